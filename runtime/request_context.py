"""The request id Ray Serve carries with a request, for log lines (``contracts.logs``).

Serve gives every HTTP request an id (the client's ``X-Request-ID`` when it sends one) and passes it with every
handle call the request makes, so the ingress and the model deployments it calls log the same id. Outside Serve
(plain uvicorn, a Ray task, a unit test) there is none.
"""

from __future__ import annotations


def serve_request_id() -> str | None:
    try:
        from ray.serve.context import _get_serve_request_context  # private in Ray 2.60; guarded below
    except ImportError:
        return None
    try:
        return _get_serve_request_context().request_id or None
    except Exception:  # noqa: BLE001 - not inside a Serve request
        return None
