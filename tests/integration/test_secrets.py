"""No secret appears in what Ray shows an operator, nor in Ray's logs.

Secrets (``SecretStr`` settings: ``database_url``, ``s3.secret_key``) reach replicas through the process environment
only (contracts/settings/service.py: ``Settings.for_replica`` / ``from_bound``). This checks every place Ray keeps or
shows an application's configuration:

- ``serve.status()`` and the Serve application details (the controller's ``get_serve_instance_details``: exactly
  what the dashboard's ``GET /api/serve/applications/`` returns; the test clusters run without a dashboard);
- the job's ``runtime_env``, the GCS job and actor tables (the dashboard's Jobs and Actors pages);
- Serve's stored state in the GCS (the controller's checkpoints: deployment configs and the pickled bind
  arguments of every replica) and the bind arguments themselves, pickled;
- every file of the Ray session directory (logs of the raylet, GCS, controller, replicas, runtime-env agent), and
  the driver's own output.

It runs its own small application (ingress + Embeddings) with distinctive secret values in a SUBPROCESS that starts
its own local Ray cluster: the replicas inherit the secrets from the environment that starts Ray, as under
``khuluma serve``, and the pytest process (which may already hold the session Ray cluster of ``serve_url``) keeps
its own Ray and environment untouched. Positive controls prove each view is the one that would show a leak: the
bound release name (not a secret) must appear in the bind arguments and in Serve's stored state, the logs must hold
the deployments' log lines, and an authenticated request must succeed against the secret database URL (so the
secrets did reach the replicas).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.settings import Settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
APP_NAME = "khuluma-secrets"
STORED_STATE = "Serve's stored state in the GCS (controller checkpoints, bind arguments)"
BIND_ARGS = "bind arguments of every deployment (pickled)"


def collect_views() -> dict[str, str]:
    """Everything this Ray driver's cluster shows about its Serve applications, as text (bytes as latin-1)."""
    import ray
    from ray import serve
    from ray._private import state
    from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list
    from ray.serve.context import _get_global_client

    stored = b"".join(
        key + b"=" + (_internal_kv_get(key, namespace=b"serve") or b"") + b"\n"
        for key in _internal_kv_list(b"", namespace=b"serve")
    )
    return {
        "serve.status()": repr(serve.status()),
        "Serve application details (dashboard: /api/serve/applications/)": json.dumps(
            _get_global_client().get_serve_details(), default=repr
        ),
        "runtime_env of the job": json.dumps(ray.get_runtime_context().runtime_env, default=repr),
        "GCS job table (dashboard: Jobs)": repr(state.jobs()),
        "GCS actor table (dashboard: Actors)": repr(state.actors()),
        STORED_STATE: stored.decode("latin-1"),
    }


def pickled_bind_args(app: Any) -> str:
    """The init arguments of every deployment of an application graph, pickled as Ray ships them (a ``SecretStr``
    pickles its plain value, so this sees through masking reprs)."""
    from ray import cloudpickle
    from ray.serve import Application

    args: list[Any] = []

    def walk(value: Any) -> Any:
        if isinstance(value, Application):
            deployment = value._bound_deployment
            args.append(
                (
                    deployment.name,
                    [walk(a) for a in deployment.init_args],
                    {k: walk(v) for k, v in deployment.init_kwargs.items()},
                )
            )
            return f"<handle {deployment.name}>"
        return value

    walk(app)
    return cloudpickle.dumps(args).decode("latin-1")


def find_secrets(text: str | bytes, secrets: list[str]) -> list[str]:
    data = text.encode("latin-1", "replace") if isinstance(text, str) else text
    return [secret for secret in secrets if secret.encode() in data]


def _session_files_with(session_dir: Path, secrets: list[str]) -> dict[str, list[str]]:
    """Files of a Ray session directory (logs, runtime-env agent state, ...) that hold any of the secrets."""
    files = [p for p in session_dir.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size < 256 << 20]
    return {str(p.relative_to(session_dir)): found for p in files if (found := find_secrets(p.read_bytes(), secrets))}


# --- the subprocess: a local Ray cluster + Serve app started with the secrets in its environment -------------------


def _serve_with_secrets(out: Path, port: int) -> None:
    """Run in a child process (``python -m tests.integration.test_secrets OUT PORT``); settings and secrets come
    from the environment, as for ``khuluma serve``. Writes the views to OUT, then serves until stdin closes."""
    import ray
    from ray import serve

    from khuluma.app import build_app
    from khuluma.cli.serve import ray_env

    settings = Settings()
    env = ray_env()
    os.environ.update(env)
    ray.init(
        address="local",
        include_dashboard=False,
        logging_level="INFO",
        runtime_env={"env_vars": env},
        num_cpus=os.cpu_count() or 2,
    )
    # INFO and access logs: a wider net than the shipped WARNING level for anything that logs a secret.
    logging_config = {"log_level": "INFO", "enable_access_log": True}
    serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config=logging_config)
    app = build_app({"settings": settings.for_replica(), "capabilities": ["embeddings"]})
    bind_args = pickled_bind_args(app)
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False, logging_config=logging_config)
    _wait_healthy(f"http://127.0.0.1:{port}", timeout=600)
    views = {**collect_views(), BIND_ARGS: bind_args}
    session_dir = ray._private.worker._global_node.get_session_dir_path()
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"session_dir": session_dir, "views": views}))
    tmp.rename(out)  # the parent waits for this file: write it whole
    sys.stdin.read()  # serve until the test closes our stdin
    serve.shutdown()
    ray.shutdown()


def _wait_healthy(url: str, timeout: float) -> None:
    """Like scripts/bench/_plain.wait_healthy, but a failure says what the health route last answered."""
    deadline, last = time.monotonic() + timeout, "no answer"
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/api/v1/health", timeout=5)
            if r.status_code == 200:
                return
            last = f"{r.status_code} {r.text[:2000]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not become healthy within {timeout:.0f} s; last answer: {last}")


@dataclass
class SecretApp:
    url: str
    token: str
    secrets: list[str]
    release: str
    views: dict[str, str]
    session_dir: Path
    driver_log: Path
    proc: subprocess.Popen[str]
    stopped: bool = field(default=False)

    def stop(self) -> None:
        """Shut the child's Serve and Ray down (it does so itself once its stdin closes) and wait for it."""
        if self.stopped:
            return
        self.stopped = True
        _stop(self.proc)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.stdin and not proc.stdin.closed:
        proc.stdin.close()
    try:
        proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        proc.terminate()  # only the child this module started; its Ray processes share its fate
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def secret_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecretApp]:
    from khuluma.cli.serve import cluster_ports
    from persistence.session import Database
    from scripts.bench._plain import free_port
    from serve_app.tokens import create_token

    tag = uuid.uuid4().hex
    root = tmp_path_factory.mktemp("secrets")
    data_dir = root / "data"
    settings = Settings(
        data_dir=data_dir,
        database_url=f"sqlite:///{root}/khuluma-{tag}.db",
        s3={"secret_key": f"s3-secret-{tag}"},
        _env_file=None,
    )
    settings.ensure_dirs()
    token = create_token(Database.migrated(settings.db_url), "secrets")[0]  # migrated first, as khuluma serve does
    secrets = settings.secret_values()
    assert len(secrets) == 2, "both secret settings must have a value for this test to mean anything"

    release = f"release-{tag}"
    # Not the session cluster's HAProxy and direct-ingress ports (ray_env() exported them to this process): the
    # child picks its own, or the two clusters would answer each other's requests.
    inherited = {k: v for k, v in os.environ.items() if k not in cluster_ports()}
    env = {
        **inherited,
        **settings.secret_env(),
        "KHULUMA_DATA_DIR": str(data_dir),
        "KHULUMA_RELEASE_NAME": release,
        "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    port = free_port()
    out, driver_log = root / "views.json", root / "driver.log"
    with driver_log.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_secrets", str(out), str(port)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + 900
        while not out.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the secrets app did not start (exit {proc.poll()}):\n{driver_log.read_text()[-6000:]}")
            time.sleep(1)
        data = json.loads(out.read_text())
        app = SecretApp(
            url=f"http://127.0.0.1:{port}",
            token=token,
            secrets=secrets,
            release=release,
            views=data["views"],
            session_dir=Path(data["session_dir"]),
            driver_log=driver_log,
            proc=proc,
        )
        yield app
        app.stop()
    finally:
        _stop(proc)


def test_session_app_shows_no_secret(serve_url: str, settings: Settings) -> None:
    """The session application (tests/conftest.py, every deployment; its S3 secret is the settings' value). First
    in this module, so that the app below starts its own cluster while the session cluster runs, as in a full run."""
    import ray

    secrets = settings.secret_values()
    assert secrets
    views = collect_views()
    leaks = {view: found for view, text in views.items() if (found := find_secrets(text, secrets))}
    assert not leaks, f"secret values appear in: {sorted(leaks)}"
    assert str(settings.data_dir) in views[STORED_STATE]  # bound (not secret), so the view does show bind args
    session_dir = Path(ray._private.worker._global_node.get_session_dir_path())
    assert not _session_files_with(session_dir, secrets)


def test_the_secrets_reach_the_replicas(secret_app: SecretApp) -> None:
    """Positive control: the ingress opened the database named only by the secret KHULUMA_DATABASE_URL (the token
    exists there and nowhere else) and was bound with the non-secret settings."""
    r = httpx.get(
        f"{secret_app.url}/v1/transcribe/usage",
        headers={"X-CLIENT-TOKEN": secret_app.token},
        params={"start_date_time": "2024-01-01T00:00:00Z", "end_date_time": "2024-01-02T00:00:00Z"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    version = httpx.get(f"{secret_app.url}/_meta/version", timeout=60)
    assert version.status_code == 200 and version.json()["release_name"] == secret_app.release


def test_no_secret_in_what_ray_shows(secret_app: SecretApp) -> None:
    views = secret_app.views
    leaks = {view: found for view, text in views.items() if (found := find_secrets(text, secret_app.secrets))}
    assert not leaks, f"secret values appear in: {sorted(leaks)}"
    # Positive controls: these views really hold what the replicas were bound with, so a bound secret would show.
    assert secret_app.release in views[BIND_ARGS]
    assert secret_app.release in views[STORED_STATE]
    assert APP_NAME in views["serve.status()"]
    assert "Embeddings" in views["Serve application details (dashboard: /api/serve/applications/)"]


def test_no_secret_in_the_ray_logs(secret_app: SecretApp) -> None:
    secret_app.stop()  # shut down first: every log line is flushed to the session directory
    assert secret_app.proc.returncode == 0, secret_app.driver_log.read_text()[-6000:]
    leaks = _session_files_with(secret_app.session_dir, secret_app.secrets)
    assert not leaks, f"secret values appear in Ray's session files: {leaks}"
    assert not find_secrets(secret_app.driver_log.read_bytes(), secret_app.secrets), "the driver printed a secret"
    # Positive control: the replicas' logs are in this directory (Serve writes one file per replica).
    names = sorted(p.name for p in secret_app.session_dir.rglob("*"))
    assert any("Ingress" in name for name in names), names[:50]


if __name__ == "__main__":
    _serve_with_secrets(Path(sys.argv[1]), int(sys.argv[2]))
