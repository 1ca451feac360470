"""The database: SQLAlchemy models, sessions and migrations, and the state machines kept in it (SQLite by default,
PostgreSQL on a cluster). It imports no serving, cluster or engine layer.

- ``persistence.models``: the schema; ``persistence.session``: engines, sessions and Alembic migrations
  (``persistence/migrations/``);
- ``persistence.moves``: status changes as compare-and-set moves; ``persistence.jobs``: the queue of async v1 jobs
  and their webhook deliveries; ``persistence.batches``: batch transcription;
- ``persistence.upload_expiry``: which v1 uploads have outlived the retention period;
- ``persistence.usage_meter``: usage rows written in batches off the request path;
- ``persistence.admission``: the customers' shared request counts and live-session seats.
"""
