"""Application metrics, exported by Ray's metrics agent on each node (Prometheus format, ``ray_`` prefix).

Made with ``ray.serve.metrics`` so Serve adds the deployment, replica and application tags. Outside a Ray worker
(plain uvicorn, unit tests under Serve's local testing mode) every call is a no-op, so no code path needs to know.

- ``ray_khuluma_http_requests_total`` (counter; route, method, status): answers of the ingress, by route template.
- ``ray_khuluma_http_request_seconds`` (histogram; route): time to answer.
- ``ray_khuluma_model_seconds`` (histogram; model_call): time inside a model deployment's work (a batch once).
- ``ray_khuluma_audio_seconds_total`` (counter; route): seconds of audio transcribed.
- ``ray_khuluma_queue_depth`` (gauge; queue): async jobs waiting or running; batch files not yet done.
- ``ray_khuluma_webhook_deliveries_total`` (counter; outcome): delivered, retry, abandoned.
- ``ray_khuluma_admission_refusals_total`` (counter; kind, status): requests refused at the edge by capacity (503) or
  by a customer's concurrent share (429), before routing (so not in ``http_requests_total``).
- ``ray_khuluma_admission_limit`` and ``ray_khuluma_admission_in_flight`` (gauges; kind): each kind of work's learned
  limit on the cost in flight, and the cost in flight, on each ingress replica.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

LATENCY_BOUNDARIES = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]

_lock = threading.Lock()
_metrics: dict[str, Any] = {}


def _in_ray_worker() -> bool:
    try:
        import ray
    except ImportError:
        return False
    return bool(ray.is_initialized())


def _metric(name: str) -> Any:
    """The metric ``name`` (created once per process), or None outside Ray."""
    if name in _metrics:
        return _metrics[name]
    with _lock:
        if name not in _metrics:
            _metrics[name] = _create(name) if _in_ray_worker() else None
    return _metrics[name]


def _create(name: str) -> Any:
    from ray.serve import metrics

    if name == "http_requests":
        return metrics.Counter(
            "khuluma_http_requests_total",
            description="Requests answered by the ingress.",
            tag_keys=("route", "method", "status"),  # type: ignore[arg-type]  # Ray annotates tuple[str]
        )
    if name == "http_seconds":
        return metrics.Histogram(
            "khuluma_http_request_seconds",
            description="Time the ingress took to answer.",
            boundaries=LATENCY_BOUNDARIES,
            tag_keys=("route",),
        )
    if name == "model_seconds":
        return metrics.Histogram(
            "khuluma_model_seconds",
            description="Time inside a model deployment's work.",
            boundaries=LATENCY_BOUNDARIES,
            tag_keys=("model_call",),
        )
    if name == "audio_seconds":
        return metrics.Counter(
            "khuluma_audio_seconds_total", description="Seconds of audio transcribed.", tag_keys=("route",)
        )
    if name == "queue_depth":
        return metrics.Gauge("khuluma_queue_depth", description="Work waiting or running.", tag_keys=("queue",))
    if name == "webhooks":
        return metrics.Counter(
            "khuluma_webhook_deliveries_total", description="Webhook delivery attempts.", tag_keys=("outcome",)
        )
    if name == "refusals":
        return metrics.Counter(
            "khuluma_admission_refusals_total",
            description="Requests refused at the edge, before routing.",
            tag_keys=("kind", "status"),  # type: ignore[arg-type]  # Ray annotates tuple[str]
        )
    if name == "admission_limit":
        return metrics.Gauge(
            "khuluma_admission_limit", description="Learned limit on the cost in flight.", tag_keys=("kind",)
        )
    if name == "admission_in_flight":
        return metrics.Gauge("khuluma_admission_in_flight", description="Cost in flight.", tag_keys=("kind",))
    raise KeyError(name)


def _safely(name: str, action: str, value: float, tags: dict[str, str]) -> None:
    metric = _metric(name)
    if metric is None:
        return
    try:
        getattr(metric, action)(value, tags=tags)
    except Exception:  # noqa: BLE001 - a metric must never fail a request
        pass


def record_request(route: str, method: str, status: int, seconds: float) -> None:
    _safely("http_requests", "inc", 1, {"route": route, "method": method, "status": str(status)})
    _safely("http_seconds", "observe", seconds, {"route": route})


def record_audio(route: str, seconds: float) -> None:
    if seconds > 0:
        _safely("audio_seconds", "inc", seconds, {"route": route})


def record_refusals(kind: str, status: int, count: int) -> None:
    _safely("refusals", "inc", count, {"kind": kind, "status": str(status)})


def set_admission(kind: str, limit: float, in_flight: float) -> None:
    _safely("admission_limit", "set", limit, {"kind": kind})
    _safely("admission_in_flight", "set", in_flight, {"kind": kind})


def set_queue_depth(queue: str, depth: int) -> None:
    _safely("queue_depth", "set", depth, {"queue": queue})


def record_webhook(outcome: str) -> None:
    _safely("webhooks", "inc", 1, {"outcome": outcome})


@contextmanager
def model_timer(model_call: str) -> Iterator[None]:
    """Time a model deployment's work: ``with model_timer("TextAnalysis.entities"): ...``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        _safely("model_seconds", "observe", time.perf_counter() - start, {"model_call": model_call})
