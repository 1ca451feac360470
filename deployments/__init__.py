"""Ray Serve deployments: one per model family, each a thin wrapper around an engine in ``engines/``.

Deployment classes are plain classes here; ``khuluma.app`` turns them into Serve deployments, so the same
class also runs in-process (tests, the plain-uvicorn benchmark).
"""
