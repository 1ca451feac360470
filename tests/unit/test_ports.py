"""Ports for the Ray clusters and services the project starts (runtime/ports.py): never one already in use, never
the same twice in one process, and never in the kernel's ephemeral range, where outgoing connections take their
local ports (a port picked there was taken before Ray's agent bound it, and the start failed)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from runtime.ports import free_port, free_port_block


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


def test_a_port_in_use_handed_out_or_reserved_is_never_picked() -> None:
    from runtime.ports import _SINGLE_SEARCH, reserve

    first = random.Random(1234).randrange(*_SINGLE_SEARCH)  # free_port's first choice with this seed
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))  # in use by another socket (not handed out by free_port)
        held.listen()
        assert free_port(rng=random.Random(1234)) != first
    taken = free_port(rng=random.Random(5678))
    assert free_port(rng=random.Random(5678)) != taken  # the same first choice: handed out already
    given = random.Random(4321).randrange(*_SINGLE_SEARCH)
    reserve(given)  # a port the process was given on its command line
    assert free_port(rng=random.Random(4321)) != given
    block = free_port_block(8, rng=random.Random(7))
    singles = {free_port() for _ in range(300)}
    assert singles.isdisjoint(range(block, block + 8))  # singles and blocks come from apart


def test_a_port_handed_out_is_held_only_a_while() -> None:
    """Held until it is surely bound, not for ever: a long test session starts and stops dozens of clusters."""
    from runtime import ports

    port = free_port()
    assert ports._held(port)
    ports._hold([port], seconds=0)  # the hold ran out
    assert not ports._held(port)
