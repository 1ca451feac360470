"""Ray Serve deployments. Most are one per model family, each a thin wrapper around its engine in ``engines/``
(TextAnalysis, Embeddings, Translation, Search, Speech, LLM): batching, reloads, ``describe()``. One wraps no
engine: ``Jobs`` (``jobs.py``), the service's background work: the worker of async v1 jobs and their webhooks,
which calls the Speech deployment, and the coordinator that fans a batch's files out as Ray tasks
(``cluster.batch``).

Deployment classes are plain classes here; ``khuluma.app`` turns them into Serve deployments, so the same
class also runs in-process (tests, the plain-uvicorn benchmark).
"""
