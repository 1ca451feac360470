"""Admission's kinds of work come from the routes (``serve_app/admission/kinds.py``): every route that calls a model
deployment declares, where it is defined, its kind of work or why its capacity is not checked, and a new one that
declares neither fails here.

What "calls a model deployment" means here, read from the code: the route's endpoint, or a function of
``serve_app`` it names in its body (a service function, a helper, every method of a class it names, followed
through the modules they live in), reads a model deployment's typed handle, ``<context>.clients.<field>`` with a
field of :class:`serve_app.context.Clients` other than ``jobs`` and ``batch`` (the deployments that run work queued
for later), other than to compare it with None. Live sessions (WebSocket routes) have an admission of their own
(``serve_app/admission/live.py``).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from serve_app.admission.kinds import SPEECH, TEXT, Kind, RouteKinds, admitted_as, app_routes, declared
from serve_app.app import create_app
from serve_app.context import Clients
from serve_app.services import translation as translation_service

QUEUED_WORK = {"jobs", "batch"}  # deployments whose work runs after the request is answered
MODEL_CLIENTS = {field.name for field in dataclasses.fields(Clients)} - QUEUED_WORK


def _body(function: Callable[..., Any]) -> list[ast.stmt]:
    """The statements of a function's body (its signature's annotations name types, not calls)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError):
        return []
    definition = tree.body[0]
    return definition.body if isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef) else []


def _reads_a_model_client(statements: list[ast.stmt]) -> str | None:
    """``.clients.<field>`` read in ``statements`` other than in ``is None`` / ``is not None``, or None."""
    compared = set()
    for node in (n for statement in statements for n in ast.walk(statement)):
        if isinstance(node, ast.Compare) and all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
            compared.update(id(part) for part in [node.left, *node.comparators])
    for node in (n for statement in statements for n in ast.walk(statement)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in MODEL_CLIENTS
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "clients"
            and id(node) not in compared
        ):
            return f"clients.{node.attr}"
    return None


def _named(function: Callable[..., Any], statements: list[ast.stmt]) -> list[Callable[..., Any]]:
    """The functions of ``serve_app`` that ``statements`` name: by name, or as ``module.name`` / ``Class.name``; a
    class of ``serve_app`` stands for all its methods and properties."""
    scope = {**function.__globals__, **inspect.getclosurevars(function).nonlocals}
    found: list[Any] = []
    for node in (n for statement in statements for n in ast.walk(statement)):
        if isinstance(node, ast.Name):
            found.append(scope.get(node.id))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = scope.get(node.value.id)
            if isinstance(owner, types.ModuleType) or inspect.isclass(owner):
                found.append(getattr(owner, node.attr, None))
    functions: list[Callable[..., Any]] = []
    for thing in found:
        if inspect.isclass(thing):
            for member in vars(thing).values():
                member = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if inspect.isfunction(member):
                    functions.append(member)
        elif inspect.isfunction(thing):
            functions.append(thing)
    return [f for f in functions if f.__module__.startswith("serve_app.")]


def model_call(endpoint: Callable[..., Any]) -> list[str] | None:
    """The path from a route's endpoint to a model deployment's typed handle (function names, then the handle it
    reads), or None when it reaches none."""
    seen: set[Callable[..., Any]] = set()

    def visit(function: Callable[..., Any], path: list[str]) -> list[str] | None:
        function = inspect.unwrap(function)
        if function in seen:
            return None
        seen.add(function)
        statements = _body(function)
        path = [*path, function.__qualname__]
        client = _reads_a_model_client(statements)
        if client is not None:
            return [*path, client]
        for named in _named(function, statements):
            found = visit(named, path)
            if found is not None:
                return found
        return None

    return visit(endpoint, [])


def _http_routes(app: FastAPI) -> list[Any]:
    return [route for route in app_routes(app.routes) if isinstance(getattr(route, "original_route", route), APIRoute)]


def test_every_route_that_calls_a_model_deployment_declares_its_kind_of_work() -> None:
    missing, needless = [], []
    for route in _http_routes(create_app()):
        path = model_call(route.endpoint)
        declaration = declared(route.endpoint)
        where = f"{sorted(route.methods)} {route.path}"
        if path is not None and declaration is None:
            missing.append(f"{where}: calls a model deployment ({' > '.join(path)}) but declares no kind of work")
        if path is None and declaration is not None:
            needless.append(f"{where}: declares {declaration!r} but calls no model deployment")
    assert not missing, "declare @admitted_as(<kind>) or @not_capacity_checked(<why>) on:\n" + "\n".join(missing)
    assert not needless, "\n".join(needless)


def test_the_table_is_the_routes_declarations() -> None:
    """Admission's table holds exactly the routes that declared a kind, each matched on its own path and method."""
    app = create_app()
    table = RouteKinds.of(app.routes)
    kinds = [declared(route.endpoint) for route in _http_routes(app)]
    assert len(table.routes) == sum(isinstance(kind, Kind) for kind in kinds) >= 15
    reasons = [kind for kind in kinds if isinstance(kind, str)]
    assert reasons and all(len(reason) > 20 for reason in reasons)  # each says why
    assert table.kind_of("POST", "/api/v1/search/knowledgebase/7f3a/query").name == "search"
    assert table.kind_of("GET", "/api/v1/search/knowledgebase/7f3a/query") is None  # its method only
    assert table.kind_of("POST", "/api/v1/search/knowledgebase/7f3a/query/more") is None  # its whole path only


def test_the_check_sees_a_new_model_bound_route_without_a_kind() -> None:
    """The rule bites: a route added without a declaration is found, through the service it calls; declared, it is
    in the table; a route that calls no model is left alone."""
    router = APIRouter()

    @router.post("/new/translate")
    async def new_translate(ctx: Any) -> Any:
        return await translation_service.translate(ctx, None, "text", "eng_Latn", "zul_Latn")

    @router.post("/new/echo")
    async def echo() -> dict[str, str]:
        return {"echo": "nothing to size"}

    app = FastAPI()
    app.include_router(router)
    found = {route.path: model_call(route.endpoint) for route in _http_routes(app)}
    assert found["/new/translate"][-2:] == ["translate", "clients.translation"]  # through the service it calls
    assert found["/new/echo"] is None
    assert declared(new_translate) is None
    admitted_as(SPEECH)(new_translate)
    assert RouteKinds.of(app.routes).kind_of("POST", "/new/translate") is SPEECH
    assert RouteKinds.of(app.routes).kind_of("POST", "/new/echo") is None


def test_a_client_compared_with_none_is_not_a_call() -> None:
    """Asking whether a deployment is there (``ctx.clients.translation is None``) calls nothing."""
    checks = ast.parse("if ctx.clients.translation is None:\n    pass\nx = ctx.clients.jobs").body
    assert _reads_a_model_client(checks) is None
    calls = ast.parse("y = required(ctx.clients.text, 'text')").body
    assert _reads_a_model_client(calls) == "clients.text" and TEXT.name == "text"
