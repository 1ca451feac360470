"""The processes of this test session's own Serve replicas, never another Ray cluster's on the same machine (a
benchmark or another checkout may run a Serve app of the same name, whose replicas have the same process title)."""

from __future__ import annotations

import psutil


def own_replica_processes(deployment: str, app: str = "khuluma") -> list[psutil.Process]:
    """The worker processes titled ``ray::ServeReplica:<app>:<deployment>`` below the raylet that this process's
    ``ray.init(address="local")`` started (``tests/conftest.py:serve_url``)."""
    import ray
    from ray._private import ray_constants
    from ray._private.worker import _global_node

    assert _global_node is not None, "this process started no Ray node"
    raylets = {info.process.pid for info in _global_node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, [])}
    assert raylets and ray.is_initialized()
    title = f"ServeReplica:{app}:{deployment}"
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(title in part for part in (process.info["cmdline"] or [])) and any(
                parent.pid in raylets for parent in process.parents()
            ):
                found.append(process)
        except psutil.Error:  # gone meanwhile
            continue
    return found
