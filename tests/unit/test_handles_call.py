"""``contracts.handles.call``: what a service sees when it awaits a deployment."""

from __future__ import annotations

import asyncio

import pytest

from contracts.errors import TooLarge
from contracts.handles import call


class ServeCancelled(Exception):
    """What Serve raises from a response whose caller cancelled it (``RequestCancelledError``)."""


async def serve_like_response(seconds: float) -> str:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        raise ServeCancelled("Request was cancelled.") from None
    return "done"


def test_a_caller_timeout_stays_a_timeout_when_serve_reports_the_cancel_as_its_own_error() -> None:
    async def go() -> None:
        await asyncio.wait_for(call(serve_like_response(5)), 0.05)

    with pytest.raises(TimeoutError):  # before: ServeCancelled, a 500 at the edge instead of the route's 504
        asyncio.run(go())


def test_the_same_error_without_a_cancel_is_not_hidden() -> None:
    async def failing() -> str:
        raise ServeCancelled("replica said so")

    with pytest.raises(ServeCancelled):
        asyncio.run(call(failing()))


def test_a_domain_error_comes_back_as_itself() -> None:
    async def refused() -> str:
        raise RuntimeError("wrapped") from TooLarge("too big")

    with pytest.raises(TooLarge):
        asyncio.run(call(refused()))
    assert asyncio.run(call(serve_like_response(0))) == "done"
