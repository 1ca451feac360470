"""Free ports on this machine: single ones, and whole blocks for Ray Serve's direct-ingress replicas.

Why blocks: with ``RAY_SERVE_THROUGHPUT_OPTIMIZED`` each ingress replica serves HTTP itself on a port that its
cluster's controller hands out from a fixed range (30000-31000 for HTTP, 40000-41000 for gRPC by default) and
binds it with ``SO_REUSEPORT``. Two Ray clusters on one machine (two services, a service and a test run, the
nodes of the two-node test) would then both bind port 30000, and the kernel would spread one cluster's
connections over the other cluster's replicas: requests answered by the wrong service. Each cluster that this
project starts therefore gets its own block, checked free with a plain bind (which an ``SO_REUSEPORT`` listener
of another process makes fail).
"""

from __future__ import annotations

import os
import random
import socket
import time
from collections.abc import Iterable, Mapping

# Where single ports and blocks are looked for: apart from each other, above Ray's default worker ports
# (10002-19999) and below the kernel's ephemeral range (32768+ by default, read from the kernel where it can be),
# where outgoing connections take their local ports.
_SINGLE_SEARCH = (20_000, 25_000)
_BLOCK_SEARCH = (25_000, 32_700)


def _below_ephemeral(search: tuple[int, int]) -> tuple[int, int]:
    """``search`` capped below the kernel's ephemeral range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return search
    return search[0], max(search[0] + 1, min(search[1], ephemeral))


DIRECT_INGRESS_VARIABLES = (
    "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT",
    "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT",
    "RAY_SERVE_DIRECT_INGRESS_MIN_GRPC_PORT",
    "RAY_SERVE_DIRECT_INGRESS_MAX_GRPC_PORT",
)


# Ports this process handed out (until then, monotonic seconds), or was given (for ever): not handed out (again).
# A port handed out is bound within seconds, and then found in use; the hold only covers that gap, so that a long
# test session, which starts and stops dozens of clusters, does not run out of ports.
_ISSUED: dict[int, float] = {}
ISSUED_HOLD_S = 300.0


def _held(port: int) -> bool:
    return _ISSUED.get(port, 0.0) > time.monotonic()


def _hold(ports: Iterable[int], seconds: float = ISSUED_HOLD_S) -> None:
    until = time.monotonic() + seconds
    _ISSUED.update((port, until) for port in ports)


def reserve(*ports: int) -> None:
    """Ports this process was given (on its command line, say) and starts something on: never handed out."""
    _hold(ports, float("inf"))


def free_port(host: str = "127.0.0.1", *, attempts: int = 500, rng: random.Random | None = None) -> int:
    """A port that nothing listens on now, that this process has not handed out lately, and below the kernel's
    ephemeral range. Not the OS's choice (a bind to port 0): that is in the ephemeral range, where the outgoing
    connections of Ray's processes take their local ports, and the next bind to 0 may be offered it again. Both
    happened: ``khuluma serve``'s metrics port, picked so, was taken before Ray's agent bound it (the raylet then
    exits and the start times out, 2 starts in 6 of the graceful-stop test)."""
    pick = rng or random.Random()
    low, high = _below_ephemeral(_SINGLE_SEARCH)
    for _ in range(attempts):
        port = pick.randrange(low, high)
        if not _held(port) and _is_free(port, host):
            _hold([port])
            return port
    raise RuntimeError(f"no free port between {low} and {high}")


def _is_free(port: int, *also: str) -> bool:
    for host in {"0.0.0.0", "127.0.0.1", *also}:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def free_port_block(size: int, *, attempts: int = 200, rng: random.Random | None = None) -> int:
    """The first port of ``size`` consecutive ports that are all free now."""
    pick = rng or random.Random()
    low, high = _below_ephemeral(_BLOCK_SEARCH)
    for _ in range(attempts):
        start = pick.randrange(low, max(low + 1, high - size))
        block = range(start, start + size)
        if not any(_held(p) for p in block) and all(_is_free(p) for p in block):
            _hold(block)
            return start
    raise RuntimeError(f"no {size} consecutive free ports between {low} and {high}")


def direct_ingress_ports(size: int = 32, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Ray Serve's direct-ingress port ranges for one new cluster: the caller's own if all four are set,
    else two fresh free blocks of ``size`` ports (HTTP, gRPC)."""
    env = os.environ if environ is None else environ
    if all(env.get(name) for name in DIRECT_INGRESS_VARIABLES):
        return {name: env[name] for name in DIRECT_INGRESS_VARIABLES}
    http = free_port_block(size)
    grpc = free_port_block(size)
    while grpc < http + size and http < grpc + size:  # overlapping blocks
        grpc = free_port_block(size)
    return dict(
        zip(DIRECT_INGRESS_VARIABLES, (str(http), str(http + size - 1), str(grpc), str(grpc + size - 1)), strict=True)
    )
