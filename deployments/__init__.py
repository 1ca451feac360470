"""Ray Serve deployments. Most are one per model family, each a thin wrapper around its engine in ``engines/``
(TextAnalysis, Embeddings, Translation, Search, Speech, LLM): batching, reloads, ``describe()``. Two wrap no
engine: ``Jobs`` (``jobs.py``), the worker of async v1 jobs and their webhooks, which calls the Speech deployment;
and ``BatchRunner`` (``batch.py``), the coordinator that fans a batch's files out as Ray tasks (``cluster.batch``).

Deployment classes are plain classes here; ``khuluma.app`` turns them into Serve deployments, so the same
class also runs in-process (tests, the plain-uvicorn benchmark).
"""
