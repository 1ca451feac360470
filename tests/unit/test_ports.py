"""Ports for the Ray clusters and services the project starts (cluster/ports.py): never one already in use, never
the same twice in one process, and never in the kernel's ephemeral range, where outgoing connections take their
local ports (a port picked there was taken before Ray's agent bound it, and the start failed)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from cluster.ports import free_port, free_port_block


def _ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_free_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    low, _ = _ephemeral_range()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(1024 < p < low for p in ports)
    for port in ports[:20]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: nothing holds it


def test_a_port_in_use_or_handed_out_is_never_picked() -> None:
    seed = 1234
    with socket.socket() as held:
        taken = free_port(rng=random.Random(seed))
        again = free_port(rng=random.Random(seed))  # the same first choice: already handed out, so another
        assert again != taken
        held.bind(("127.0.0.1", free_port(rng=random.Random(99))))
        held.listen()
        in_use = held.getsockname()[1]
        assert free_port(rng=random.Random(99)) != in_use
        block = free_port_block(8, rng=random.Random(7))
        assert all(free_port(rng=random.Random(7)) not in range(block, block + 8) for _ in range(5))
