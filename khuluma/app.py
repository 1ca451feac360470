"""Application builder: wires the model deployments and the ingress into one Serve application.

``serve run configs/serve.yaml`` and ``khuluma serve`` both call :func:`build_app`. Per-deployment scaling,
resources and ``user_config`` come from the Serve config (``deployments:`` of the application); ``khuluma
serve`` passes the same overrides as ``args["deployments"]`` so both paths behave alike.
"""

from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contracts.settings import Settings, merge_mappings
from khuluma.checks import run_startup_checks

if TYPE_CHECKING:  # Serve is imported where an application is built: the `khuluma serve` process only reads the
    # deployments' options (its GPU check) and holds none of Serve's modules (about 24 MiB) while it waits
    from ray.serve import Application


@dataclass(frozen=True)
class DeploymentSpec:
    name: str  # Serve deployment name (what serve.yaml refers to)
    target: str  # "module:Class"
    backend: str  # the ingress's typed-handle field (serve_app.context.Clients) it is reached by
    sections: tuple[str, ...]  # settings sections its replicas are bound with (never secrets)
    also: tuple[str, ...] = ()  # more typed-handle fields (capabilities) the same deployment answers
    needs: tuple[str, ...] = ()  # deployments it cannot work without: always deployed with it
    uses: tuple[str, ...] = ()  # deployments it uses when they are deployed (e.g. translation of transcripts)
    # it embeds text: with the Embeddings deployment's handle when ``embeddings.placement`` puts the embedder
    # there (then that deployment is a need), else with an embedder of its own (deployments/embeddings.py)
    embeds: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every typed-handle field (capability name) this deployment is reached by."""
        return (self.backend, *self.also)


def serve_queue(ongoing: int, queued: int, retry_after_s: float) -> dict[str, Any]:
    """Serve's queue of a deployment: at most ``ongoing`` requests per replica, ``queued`` more waiting at each
    caller; one more is refused at once (``BackPressureError``, which the typed handles turn into a 503 with
    ``Retry-After: retry_after_s``, the one place that figure is set). Behind the edge's admission by capacity these
    are a backstop: docs/operators.md, Serve's queues."""
    return {
        "max_ongoing_requests": ongoing,
        "max_queued_requests": queued,
        "backpressure_config": {"retry_after_s": retry_after_s},
    }


# Defaults sized for a 2-core machine; serve.yaml overrides any of them.
SPECS: tuple[DeploymentSpec, ...] = (
    DeploymentSpec(
        "Embeddings",
        "deployments.embeddings:Embeddings",
        "embeddings",
        ("embeddings",),
        options={"ray_actor_options": {"num_cpus": 0.25}, **serve_queue(64, 128, 1)},
    ),
    DeploymentSpec(
        "TextAnalysis",
        "deployments.text:TextAnalysis",
        "text",
        ("text", "embeddings"),
        embeds=True,
        options={"ray_actor_options": {"num_cpus": 0.25}, **serve_queue(64, 64, 1)},
    ),
    DeploymentSpec(
        "Translation",
        "deployments.translation:Translation",
        "translation",
        ("translation",),
        options={"ray_actor_options": {"num_cpus": 0.25}, **serve_queue(64, 64, 2)},
    ),
    DeploymentSpec(
        "Speech",
        "deployments.speech:Speech",
        "speech",
        ("speech", "s3", "translation"),
        uses=("translation",),
        options={"ray_actor_options": {"num_cpus": 0.5}, **serve_queue(8, 16, 5)},
    ),
    DeploymentSpec(
        "Search",
        "deployments.search:Search",
        "search",
        ("search", "s3", "embeddings"),
        embeds=True,
        options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0.2}, **serve_queue(16, 64, 1)},
    ),
    # The language model (ask, chat completions): deployed only when a model is set (llm.deploy); CTranslate2 in
    # this replica, or vLLM in an LLMServer deployment bound to it (llm.engine).
    DeploymentSpec(
        "LLM",
        "deployments.llm:LLM",
        "llm",
        ("llm",),
        options={"ray_actor_options": {"num_cpus": 0.25}, **serve_queue(8, 16, 5)},
    ),
    # The background work: async jobs and their webhooks, and batch transcription's coordinator (one process for
    # both: neither runs a model, and a replica costs about 120 MiB idle).
    DeploymentSpec(
        "Jobs",
        "deployments.jobs:Jobs",
        "jobs",
        ("jobs", "webhooks", "s3", "batch", "speech"),
        also=("batch",),
        uses=("speech",),  # without it, jobs wait and are retried within their budget
        options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0.1}, **serve_queue(16, 64, 1)},
    ),
)
# The ingress validates requests, signs upload credentials and meters usage; it runs no model.
INGRESS_SECTIONS = ("text", "translation", "search", "llm", "speech", "webhooks", "s3", "batch", "admission")
# The ingress admits model-bound work by its own measured capacity and only waits on the model queues behind it, so
# Serve's queue of the ingress is never the one reached: the health routes never wait for a slot.
INGRESS_OPTIONS: dict[str, Any] = {
    "num_replicas": 1,
    "ray_actor_options": {"num_cpus": 0.2},
    **serve_queue(1024, 256, 1),
}


def load_class(target: str) -> type:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


class _Handles:
    """Root of the local-testing-mode application: hands out the handles it was bound with."""

    def __init__(self, **handles: Any) -> None:
        self._handles = handles

    def handles(self) -> dict[str, Any]:
        return self._handles


def build_local(settings: Settings, capabilities: list[str] | None = None) -> dict[str, Any]:
    """The deployments in this process under Serve's local testing mode (no Ray cluster), wired as in
    :func:`build_app`; returns their handles by typed-handle field. ``capabilities`` picks some (None: all). The
    fast tests and the plain-uvicorn side of the benchmarks use it."""
    from ray import serve

    wanted = set(capabilities or default_capabilities(settings))
    bound = _bind(settings, {spec.name: {} for spec in SPECS}, wanted)
    root = serve.deployment(name="LocalHandles")(_Handles).bind(**bound)
    handle = serve.run(root, name=f"khuluma-local-{next(_local_apps)}", route_prefix=None, _local_testing_mode=True)
    return handle.handles.remote().result()


_local_apps = itertools.count()


def _bind(settings: Settings, options: dict[str, dict[str, Any]], wanted: set[str]) -> dict[str, Any]:
    """Bind every wanted deployment, with its own settings sections and the handles it needs."""
    from ray import serve

    wanted = _with_needs(wanted, settings)
    bound: dict[str, Any] = {}
    for spec in SPECS:  # in dependency order: what a deployment needs comes before it
        fields = [f for f in spec.fields if f in wanted]
        if not fields:
            continue
        deps = {dep: bound[dep] for dep in _needs(spec, settings) + spec.uses if dep in bound}
        if spec.backend == "llm" and settings.llm.engine == "vllm":
            deps["server"] = _vllm_server(settings, options)
        deployment = serve.deployment(name=spec.name)(load_class(spec.target)).options(**options[spec.name])
        serves = {"serves": tuple(fields)} if spec.also else {}  # the capabilities it is bound for, when several
        node = deployment.bind(settings.for_replica(spec.sections), **deps, **serves)
        bound.update(dict.fromkeys(fields, node))
    return bound


def default_capabilities(settings: Settings, options: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """What is deployed when nobody picks: every capability, less
    - the Embeddings deployment when the embedder runs inside the replicas that use it;
    - the Translation deployment while no translation model is set (``translation.deploy``), and the LLM
      deployment while no language model is (``llm.deploy``); ``options`` are the deployments' effective options,
      whose ``user_config`` may name one."""

    def user_model(name: str) -> Any:
        return ((options or {}).get(name, {}).get("user_config") or {}).get("model")

    skipped = {
        "embeddings": settings.embeddings.local,
        "translation": settings.translation.deploy == "auto"
        and not (settings.translation.model or user_model("Translation")),
        "llm": settings.llm.deploy == "auto" and not (settings.llm.model or user_model("LLM")),
    }
    return [f for s in SPECS if not skipped.get(s.backend) for f in s.fields]


def _vllm_server(settings: Settings, options: dict[str, dict[str, Any]]) -> Any:
    """Ray Serve LLM's LLMServer for the configured model (``llm.engine: vllm``), with the Serve config's
    overrides of the ``LLMServer`` deployment."""
    from deployments.llm_vllm import SERVER_NAME, build_server

    return build_server(settings, options.get(SERVER_NAME))


def deployment_names(settings: Settings) -> set[str]:
    """The Serve deployments of the default application for these settings (what a Serve config may name)."""
    wanted = set(default_capabilities(settings))
    names = {spec.name for spec in SPECS if wanted.intersection(spec.fields)} | {"Ingress"}
    if "llm" in wanted and settings.llm.engine == "vllm":
        names.add("LLMServer")  # deployments.llm_vllm.SERVER_NAME
    return names


def _needs(spec: DeploymentSpec, settings: Settings) -> tuple[str, ...]:
    embedder = ("embeddings",) if spec.embeds and not settings.embeddings.local else ()
    return spec.needs + embedder


def _with_needs(wanted: set[str], settings: Settings) -> set[str]:
    """``wanted`` plus, transitively, every deployment one of them cannot work without."""
    by_backend = {f: spec for spec in SPECS for f in spec.fields}
    out, todo = set(), list(wanted)
    while todo:
        backend = todo.pop()
        if backend not in out:
            out.add(backend)
            todo.extend(_needs(by_backend[backend], settings))
    return out


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = merge_mappings(base, override)
    if "autoscaling_config" in out:
        out.pop("num_replicas", None)
    return out


def deployment_options(overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Effective options per deployment name (defaults merged with overrides)."""
    overrides = overrides or {}
    opts = {spec.name: _merge(spec.options, overrides.get(spec.name, {})) for spec in SPECS}
    opts["Ingress"] = _merge(INGRESS_OPTIONS, overrides.get("Ingress", {}))
    if "LLMServer" in overrides:  # Ray Serve LLM's deployment (llm.engine: vllm): its defaults come from LLMConfig
        opts["LLMServer"] = dict(overrides["LLMServer"])
    return opts


def requested_gpus(options: dict[str, dict[str, Any]]) -> float:
    """GPUs the application needs at its minimum size."""
    total = 0.0
    for opt in options.values():
        gpus = float((opt.get("ray_actor_options") or {}).get("num_gpus") or 0)
        auto = opt.get("autoscaling_config")
        replicas = auto.get("min_replicas", 1) if auto else opt.get("num_replicas", 1)
        total += gpus * int(replicas or 0)
    return total


class GPUUnavailableError(RuntimeError):
    pass


def check_gpus(options: dict[str, dict[str, Any]], available: float) -> None:
    """Refuse a config that asks for more GPUs than the cluster has (Ray would wait forever)."""
    needed = requested_gpus(options)
    if needed > available + 1e-9:
        asking = sorted(n for n, o in options.items() if (o.get("ray_actor_options") or {}).get("num_gpus"))
        raise GPUUnavailableError(
            f"The Serve config asks for {needed:g} GPU(s) ({', '.join(asking)}) but the Ray cluster has "
            f"{available:g}. Set num_gpus: 0 for those deployments in the config, or join a cluster with GPUs "
            f"(khuluma serve --address ...)."
        )


def build_app(args: dict[str, Any] | None = None) -> Application:
    """Serve application builder (``import_path: khuluma.app:build_app``).

    args:
      settings:     Settings fields (override KHULUMA_* environment variables; secrets only from the environment or
                    KHULUMA_SECRETS_FILE: the replicas read them there, so they never pass through Ray)
      deployments:  per-deployment option overrides, keyed by deployment name
      capabilities: backends to deploy (default: all; ``["none"]``: the ingress alone)
      checks:       run the start-up checks (default: true; khuluma/checks.py)
    """
    args = dict(args or {})
    settings = Settings(**(args.get("settings") or {}))
    options = deployment_options(args.get("deployments"))
    wanted = set(args.get("capabilities") or default_capabilities(settings, options))
    known = {f for s in SPECS for f in s.fields}
    unknown = wanted - known - {"none"}
    if unknown:
        raise ValueError(
            f"Unknown capabilities {sorted(unknown)}; known: {sorted(known)} (or none: the ingress alone)."
        )
    wanted.discard("none")
    _check_cluster_gpus(options)
    if "llm" in wanted and settings.llm.engine == "vllm":
        _check_vllm_gpus(settings)
    if args.get("checks", True):
        run_startup_checks(settings, _with_needs(wanted, settings), options)
    bound = _bind(settings, options, wanted)

    from ray import serve

    from serve_app.ingress import Ingress  # the composition root binds the ingress (import-linter allows this one)

    ingress = serve.deployment(name="Ingress")(Ingress).options(**options["Ingress"])
    return ingress.bind(settings.for_replica(INGRESS_SECTIONS), **bound)


def _check_cluster_gpus(options: dict[str, dict[str, Any]]) -> None:
    import ray

    if requested_gpus(options) and ray.is_initialized():
        check_gpus(options, float(ray.cluster_resources().get("GPU", 0)))


def _check_vllm_gpus(settings: Settings) -> None:
    """vLLM's replicas ask for GPUs through a placement group the options above do not show: refuse at once when
    the cluster has fewer than one replica needs (Ray would wait forever)."""
    import ray

    if not ray.is_initialized():
        return
    needed, available = settings.llm.vllm_tensor_parallel_size, float(ray.cluster_resources().get("GPU", 0))
    if available < needed:
        raise GPUUnavailableError(
            f"KHULUMA_LLM_ENGINE=vllm needs {needed} GPU(s) per LLMServer replica but the Ray cluster has "
            f"{available:g}. Join a cluster with GPUs, or set KHULUMA_LLM_ENGINE=ctranslate2 (CPU)."
        )
