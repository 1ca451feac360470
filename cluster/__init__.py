"""Cluster-side pieces, below the ingress and the deployments (they import ``contracts``, ``persistence`` and, for
the batch tasks only, ``engines``; never ``serve_app`` or ``deployments``).

Storage and transfer, used by the ingress as well (no Ray, no engine):

- ``cluster.s3``: S3 operations and where batch files live; ``cluster.credentials``: the batch upload credential;
  ``cluster.seaweedfs``: the local SeaweedFS that ``khuluma serve`` starts;
- ``cluster.transfer``: how audio and documents reach the replica that works on them (inline, or through object
  storage), and where v1 uploads are kept;
- ``cluster.retention``: the retention sweep of v1 uploads (rows, then audio);
- ``cluster.webhooks``: webhook URLs, signatures and deliveries of async jobs.

Batch transcription: ``cluster.batch``, the Ray tasks and coordinator (runs the speech pipeline: only the Jobs
deployment imports it).

The processes of the service: ``cluster.graceful_stop``, the keys in Ray's key-value store through which
``khuluma serve`` tells every ingress replica that a graceful stop has begun. What one process needs of its own
(memory, ports, metrics, the request id) is ``runtime/``.

``cluster/kuberay/`` and ``cluster/launcher/`` hold the KubeRay and Ray cluster launcher configurations.

This file imports nothing, so importing ``cluster.s3`` never pulls in Ray or the engines.
"""
