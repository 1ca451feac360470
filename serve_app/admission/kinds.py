"""The kinds of model-bound work that admission sizes and limits apart, and which route is which kind.

A route that calls a model deployment declares, where it is defined, the kind of work it is
(:func:`admitted_as`), or why this server's capacity is not checked for it (:func:`not_capacity_checked`: it only
asks a deployment something that costs next to nothing, or manages what a deployment holds). The table admission
reads before routing, :class:`RouteKinds`, is built from the app's own routes, so it cannot disagree with them, and
``tests/unit/test_admission_kinds.py`` fails when a route that calls a model deployment declares neither.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import fastapi.routing
from starlette.routing import BaseRoute, compile_path

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Kind:
    """One kind of model-bound work, with its own limiter (``serve_app/admission/capacity.py:Limiter``)."""

    name: str
    unit: str  # what its cost counts
    overhead: float  # the cost of a request's fixed work (parsing, routing, the model call), in ``unit``
    setting: str = ""  # the settings field of its optional ceiling of requests in flight
    audio: bool = False  # sized by the seconds of audio in its upload


TEXT = Kind("text", "bytes", 64, "text_in_flight")
TRANSLATION = Kind("translation", "bytes", 64, "translation_in_flight")
SEARCH = Kind("search", "bytes", 2048, "search_in_flight")
DOCUMENTS = Kind("documents", "bytes", 64 * 1024, "search_in_flight")
SPEECH = Kind("speech", "audio seconds", 1.0, "speech_in_flight", audio=True)
# an answer's cost is mostly the tokens it generates, bounded per request: a fixed overhead as large as a long
# question, on top of the bytes of the question (the learned speed per size absorbs the rest)
LLM = Kind("llm", "bytes", 16 * 1024, "llm_in_flight")
KINDS: tuple[Kind, ...] = (TEXT, TRANSLATION, SEARCH, DOCUMENTS, SPEECH, LLM)
_BY_NAME = {kind.name: kind for kind in KINDS}

_DECLARED = "khuluma_admission"  # the attribute of a route's endpoint that holds its declaration


def kind_named(name: str) -> Kind:
    return _BY_NAME[name]


def admitted_as(kind: Kind) -> Callable[[F], F]:
    """Declares a route's endpoint model-bound work of ``kind``: admission sizes it from its headers and checks this
    server's capacity for the kind before its body is read."""

    def declare(endpoint: F) -> F:
        setattr(endpoint, _DECLARED, kind)
        return endpoint

    return declare


def not_capacity_checked(reason: str) -> Callable[[F], F]:
    """Declares that a route calls a model deployment but is not model work to size (``reason`` says why)."""

    def declare(endpoint: F) -> F:
        setattr(endpoint, _DECLARED, reason)
        return endpoint

    return declare


def declared(endpoint: object) -> Kind | str | None:
    """What a route's endpoint declared: its :class:`Kind`, the reason it is not capacity-checked, or None."""
    return getattr(endpoint, _DECLARED, None)


def app_routes(routes: Sequence[BaseRoute]) -> Iterable[Any]:
    """Every route of an app, routers included (newer FastAPI keeps an included router whole in ``app.routes``),
    each with its ``path``, ``methods`` and ``endpoint``."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    return iterate(routes) if iterate is not None else routes


@dataclass(frozen=True)
class RouteKinds:
    """The kind of work of each model-bound route of an app, by method and path: what admission reads before
    routing, for every request. A path without parameters is found in one dictionary look-up; only the routes with
    path parameters (a knowledge base's id) are matched by pattern."""

    routes: tuple[tuple[frozenset[str], re.Pattern[str], Kind], ...] = ()  # every declared route
    static: dict[tuple[str, str], Kind] = field(default_factory=dict)  # (method, path) of those without parameters
    patterned: tuple[tuple[frozenset[str], re.Pattern[str], Kind], ...] = ()  # those with

    @classmethod
    def of(cls, routes: Sequence[BaseRoute]) -> RouteKinds:
        """The table of an app's routes (``app.routes``): those whose endpoint declared a :class:`Kind`."""
        table, static, patterned = [], {}, []
        for route in app_routes(routes):
            kind = declared(getattr(route, "endpoint", None))
            if isinstance(kind, Kind):
                pattern, _, params = compile_path(route.path)
                entry = (frozenset(route.methods or ()), pattern, kind)
                table.append(entry)
                if params:
                    patterned.append(entry)
                else:
                    static.update({(method, route.path): kind for method in entry[0]})
        return cls(tuple(table), static, tuple(patterned))

    def kind_of(self, method: str, path: str) -> Kind | None:
        """The kind of model-bound work a request is, or None (health, metadata, async jobs and batches,
        management)."""
        kind = self.static.get((method, path))
        if kind is not None:
            return kind
        for methods, pattern, kind in self.patterned:
            if method in methods and pattern.match(path):
                return kind
        return None
