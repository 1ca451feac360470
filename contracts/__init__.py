"""What every layer shares, and nothing else: the domain errors, the language registry, the settings tree and
the typed contracts (request and result models) between the ingress and the deployments.

This package imports none of ``serve_app``, ``deployments``, ``cluster``, ``engines`` or ``persistence``, and no
web or Ray library (import-linter enforces it), so every layer may import it.
"""
