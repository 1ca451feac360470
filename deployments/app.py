"""Application builder: wires the model deployments and the ingress into one Serve application.

``serve run configs/serve.yaml`` and ``khuluma serve`` both call :func:`build_app`. Per-deployment scaling,
resources and ``user_config`` come from the Serve config (``deployments:`` of the application); ``khuluma
serve`` passes the same overrides as ``args["deployments"]`` so both paths behave alike.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from ray import serve
from ray.serve import Application

from serve_app.settings import Settings


@dataclass(frozen=True)
class DeploymentSpec:
    name: str  # Serve deployment name (what serve.yaml refers to)
    target: str  # "module:Class"
    backend: str  # Backends field the ingress reaches it by
    needs: tuple[str, ...] = ()  # other backends handed to its constructor
    options: dict[str, Any] = field(default_factory=dict)


# Defaults sized for a 2-core machine; serve.yaml overrides any of them.
SPECS: tuple[DeploymentSpec, ...] = (
    DeploymentSpec("Embeddings", "deployments.embeddings:Embeddings", "embeddings",
                   options={"ray_actor_options": {"num_cpus": 0.25}, "max_ongoing_requests": 64}),
    DeploymentSpec("TextAnalysis", "deployments.text:TextAnalysis", "text", needs=("embeddings",),
                   options={"ray_actor_options": {"num_cpus": 0.25}, "max_ongoing_requests": 64}),
    DeploymentSpec("Translation", "deployments.translation:Translation", "translation",
                   options={"ray_actor_options": {"num_cpus": 0.25}, "max_ongoing_requests": 64}),
    DeploymentSpec("Transcription", "deployments.transcription:Transcription", "transcription",
                   needs=("text", "translation"),
                   options={"ray_actor_options": {"num_cpus": 0.5}, "max_ongoing_requests": 16}),
    DeploymentSpec("KnowledgeStore", "deployments.knowledge:KnowledgeStore", "knowledge", needs=("embeddings",),
                   options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0.2}}),
    DeploymentSpec("Jobs", "deployments.jobs:Jobs", "jobs", needs=("transcription",),
                   options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0.1}}),
    DeploymentSpec("BatchRunner", "deployments.batch:BatchRunner", "batch",
                   options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0.05}}),
)
INGRESS_OPTIONS: dict[str, Any] = {"num_replicas": 1, "ray_actor_options": {"num_cpus": 0.2},
                                   "max_ongoing_requests": 256}


def load_class(target: str) -> type:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def build_in_process(settings: Settings, capabilities: list[str] | None = None) -> Any:
    """The deployment classes as plain objects in this process (no Ray), wired as Serve wires them; ``Backends``
    for the ingress. ``capabilities`` (``Backends`` field names) picks some; None: all. Fast tests and the
    plain-uvicorn side of the benchmarks use it."""
    from serve_app.backends import Backends

    settings_dict = settings.model_dump(mode="json")
    wanted = set(capabilities or [s.backend for s in SPECS])
    objs: dict[str, Any] = {}
    for spec in SPECS:
        if spec.backend in wanted:
            deps = {need: objs[need] for need in spec.needs if need in objs}
            objs[spec.backend] = load_class(spec.target)(settings_dict, **deps)
    return Backends.wrap(**objs)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    if "autoscaling_config" in out:
        out.pop("num_replicas", None)
    return out


def deployment_options(overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Effective options per deployment name (defaults merged with overrides)."""
    overrides = overrides or {}
    opts = {spec.name: _merge(spec.options, overrides.get(spec.name, {})) for spec in SPECS}
    opts["Ingress"] = _merge(INGRESS_OPTIONS, overrides.get("Ingress", {}))
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
    """Serve application builder (``import_path: deployments.app:build_app``).

    args:
      settings:     Settings fields (override KHULUMA_* environment variables)
      deployments:  per-deployment option overrides, keyed by deployment name
      capabilities: backends to deploy (default: all)
    """
    args = dict(args or {})
    settings = Settings(**(args.get("settings") or {}))
    settings_dict = settings.model_dump(mode="json")
    options = deployment_options(args.get("deployments"))
    wanted = set(args.get("capabilities") or [s.backend for s in SPECS])
    _check_cluster_gpus(options)

    bound: dict[str, Any] = {}
    for spec in SPECS:
        if spec.backend not in wanted:
            continue
        cls = load_class(spec.target)
        deps = {need: bound[need] for need in spec.needs if need in bound}
        deployment = serve.deployment(cls, name=spec.name).options(**options[spec.name])
        bound[spec.backend] = deployment.bind(settings_dict, **deps)

    from serve_app.ingress import Ingress

    ingress = serve.deployment(Ingress, name="Ingress").options(**options["Ingress"])
    return ingress.bind(settings_dict, **bound)


def _check_cluster_gpus(options: dict[str, dict[str, Any]]) -> None:
    import ray

    if requested_gpus(options) and ray.is_initialized():
        check_gpus(options, float(ray.cluster_resources().get("GPU", 0)))
