"""CLI token management, settings, Serve config and the GPU fail-fast check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from contracts.settings import Settings
from khuluma.app import GPUUnavailableError, check_gpus, deployment_options, requested_gpus
from khuluma.cli.serve import load_serve_config

ROOT = Path(__file__).resolve().parents[2]


def _khuluma(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"KHULUMA_DATA_DIR": str(data_dir), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "khuluma.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def test_token_create_list_revoke_through_the_cli(tmp_path: Path):
    created = _khuluma(tmp_path, "token", "create", "--customer", "shop", "--project", "web", "-q")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("khk_") and len(token) > 40
    listing = _khuluma(tmp_path, "token", "list")
    assert "shop" in listing.stdout and token not in listing.stdout and token[:10] in listing.stdout
    from persistence.session import Database
    from serve_app.tokens import TokenVerifier

    db = Database(f"sqlite:///{tmp_path / 'khuluma.db'}")
    assert TokenVerifier(db, 0).verify(token) is not None
    assert _khuluma(tmp_path, "token", "revoke", token[:10]).returncode == 0
    assert TokenVerifier(db, 0).verify(token) is None
    again = _khuluma(tmp_path, "token", "revoke", token[:10])
    assert again.returncode == 1 and "No active token" in again.stdout


def test_db_migrate_brings_a_new_database_to_the_current_schema(tmp_path: Path):
    from persistence.session import Database, SchemaOutOfDate

    db = Database(f"sqlite:///{tmp_path / 'khuluma.db'}")
    with pytest.raises(SchemaOutOfDate, match="khuluma db migrate"):
        db.require_current_schema()  # what a replica says about a database nobody migrated
    for _ in range(2):  # idempotent
        migrated = _khuluma(tmp_path, "db", "migrate")
        assert migrated.returncode == 0, migrated.stderr
        assert "is up to date" in migrated.stdout
    db.require_current_schema()


def test_settings_read_the_khuluma_prefix(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("KHULUMA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KHULUMA_PORT", "9123")
    monkeypatch.setenv("KHULUMA_SPEECH_LANGUAGE_MODELS", '{"zul": "/models/zu"}')
    s = Settings(_env_file=None)
    assert s.port == 9123 and s.data_dir == tmp_path and s.speech.language_models == {"zul": "/models/zu"}
    assert s.db_url == f"sqlite:///{tmp_path / 'khuluma.db'}"
    for name, field in Settings.model_fields.items():
        assert field.description, f"setting {name} is undocumented"
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            for inner, inner_field in section.model_fields.items():
                assert inner_field.description, f"setting {name}.{inner} is undocumented"


def test_secrets_come_from_the_environment_and_are_never_handed_on(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("KHULUMA_S3_SECRET_KEY", "s3-secret-from-env")
    monkeypatch.setenv("KHULUMA_DATABASE_URL", "postgresql+psycopg://u:db-password@h/k")
    s = Settings(data_dir=tmp_path, _env_file=None)
    assert s.s3.secret_key.get_secret_value() == "s3-secret-from-env" and "db-password" in s.db_url
    assert "s3-secret-from-env" not in repr(s) and "db-password" not in repr(s)
    bound = s.for_replica()  # what replicas, tasks and the Serve config get
    assert "s3-secret-from-env" not in json.dumps(bound) and "db-password" not in json.dumps(bound)
    assert bound["speech"]["language_models"] == {} and bound["data_dir"] == str(tmp_path)
    rebuilt = Settings.from_bound(bound)  # a replica: secrets from its own environment
    assert rebuilt.s3.secret_key.get_secret_value() == "s3-secret-from-env" and rebuilt.db_url == s.db_url
    assert sorted(s.secret_values()) == sorted([s.db_url, "s3-secret-from-env"])


def test_a_secrets_file_provides_secrets(monkeypatch, tmp_path: Path):
    secrets = tmp_path / "secrets.env"
    secrets.write_text("KHULUMA_S3_SECRET_KEY=from-the-file\n")
    monkeypatch.setenv("KHULUMA_SECRETS_FILE", str(secrets))
    monkeypatch.delenv("KHULUMA_S3_SECRET_KEY", raising=False)
    assert Settings(_env_file=None).s3.secret_key.get_secret_value() == "from-the-file"


def test_serve_yaml_is_a_valid_serve_config_with_bounded_autoscaling():
    from ray.serve.schema import ServeDeploySchema

    raw = yaml.safe_load((ROOT / "configs" / "serve.yaml").read_text())
    schema = (
        ServeDeploySchema.model_validate(raw)
        if hasattr(ServeDeploySchema, "model_validate")
        else ServeDeploySchema.parse_obj(raw)
    )
    app = schema.applications[0]
    assert app.import_path == "khuluma.app:build_app"
    names = {d["name"] for d in raw["applications"][0]["deployments"]}
    from contracts.settings import Settings
    from khuluma.app import deployment_names

    # every deployment the builder makes for this config, and no other (Serve refuses a config naming one it lacks)
    assert names == deployment_names(Settings(**app.args["settings"]))
    assert "Embeddings" not in names  # the offline embedder runs inside TextAnalysis and Search
    assert "Translation" not in names  # no translation model ships offline: the ingress answers its 503
    for d in raw["applications"][0]["deployments"]:
        auto = d.get("autoscaling_config")
        if auto:
            assert auto["max_replicas"] <= 4
        assert 0 < d["ray_actor_options"]["num_cpus"] < 1


def test_khuluma_serve_tells_a_failed_start_up_check_in_one_line(tmp_path: Path):
    """The application is built by a Ray task (the CLI process never imports it): a start-up check that fails
    there is still told as the check's own one-line message, not as a Ray task error with a trace."""
    from scripts.bench._plain import free_port

    chroma = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {
        "KHULUMA_DATA_DIR": str(tmp_path / "data"),
        "KHULUMA_SEARCH_CHROMA_URL": chroma,
        "PATH": "/usr/bin:/bin",
        "RAY_AUTH_MODE": "disabled",
    }
    command = ["serve", "--port", "0", "--num-cpus", "1", "--no-storage", "--no-dashboard"]
    proc = subprocess.run(
        [sys.executable, "-m", "khuluma.cli", *command, "--metrics-port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    refusal = [line for line in proc.stderr.splitlines() if "Refusing to start" in line]
    assert refusal and f"Chroma server {chroma} is unreachable" in refusal[0], proc.stderr
    assert "RayTaskError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_gpu_check_refuses_gpus_the_cluster_lacks():
    cfg = load_serve_config(ROOT / "configs" / "serve.yaml")
    options = deployment_options(cfg["deployments"])
    assert requested_gpus(options) == 0
    check_gpus(options, available=0)  # the default config needs none
    cfg["deployments"]["Speech"]["ray_actor_options"]["num_gpus"] = 0.5
    cfg["deployments"]["TextAnalysis"]["ray_actor_options"]["num_gpus"] = 0.25
    options = deployment_options(cfg["deployments"])
    assert requested_gpus(options) == pytest.approx(0.75)
    with pytest.raises(GPUUnavailableError, match=r"0\.75 GPU.*Speech, TextAnalysis.*has 0"):
        check_gpus(options, available=0)
    check_gpus(options, available=1)


def test_khuluma_serve_refuses_a_gpu_config_before_deploying(tmp_path: Path):
    raw = yaml.safe_load((ROOT / "configs" / "serve.yaml").read_text())
    for d in raw["applications"][0]["deployments"]:
        if d["name"] == "Speech":
            d["ray_actor_options"]["num_gpus"] = 1
    cfg = tmp_path / "gpu.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    env = {"KHULUMA_DATA_DIR": str(tmp_path / "data"), "PATH": "/usr/bin:/bin", "RAY_AUTH_MODE": "disabled"}
    from scripts.bench._plain import free_port

    dashboard_port = free_port()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "khuluma.cli",
            "serve",
            "--config",
            str(cfg),
            "--port",
            "0",
            "--num-cpus",
            "1",
            "--no-storage",
            "--dashboard-port",
            str(dashboard_port),
            "--metrics-port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "Refusing to start" in proc.stderr and "GPU" in proc.stderr
    # the dashboard is on by default, and its address is printed before anything else can fail
    assert f"Ray dashboard:    http://127.0.0.1:{dashboard_port}" in proc.stderr, proc.stderr
