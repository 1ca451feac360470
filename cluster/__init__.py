"""Cluster-side pieces, below the ingress and the deployments (imports ``contracts``, ``persistence`` and, for the
batch tasks only, ``engines``; never ``serve_app``).

- ``cluster.s3``: S3 operations and where batch files live; ``cluster.credentials``: the batch upload credential;
  ``cluster.seaweedfs``: the local SeaweedFS ``khuluma serve`` starts. No Ray and no engine: the ingress uses them.
- ``cluster.webhooks``: webhook URLs, signatures and deliveries of async jobs.
- ``cluster.batch``: the Ray tasks and coordinator of batch transcription (runs the speech pipeline: only the
  BatchRunner deployment imports it).
- ``cluster.memory``: freed heap memory handed back to the OS (after large bodies in the ingress, and once the
  Speech replica is idle).

This file imports nothing, so importing ``cluster.s3`` never pulls in Ray or the engines.
"""
