"""The operators' artefacts are valid for the tools that read them, and cannot drift from the code:
the Serve configs and the KubeRay RayService's serveConfigV2 against Ray's own Serve schema, the RayService's
embedded config equal to configs/serve.cluster.yaml, the launcher config against Ray's launcher JSON schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.settings import Settings
from khuluma.app import SPECS, deployment_names, load_class

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [ROOT / "configs" / "serve.yaml", ROOT / "configs" / "serve.cluster.yaml"]
RAYSERVICE = ROOT / "cluster" / "kuberay" / "rayservice.yaml"
LAUNCHER = ROOT / "cluster" / "launcher" / "khuluma-onprem.yaml"


def _validate_serve_config(config: dict[str, Any]) -> None:
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.parse_obj(config)  # raises on any unknown or invalid field
    (app,) = schema.applications
    assert app.import_path == "khuluma.app:build_app"
    module, _, name = app.import_path.partition(":")
    assert callable(getattr(__import__(module, fromlist=[name]), name))
    # every deployment the builder makes for this config's settings, and no other (Serve refuses a config naming
    # one the application lacks)
    assert {d.name for d in app.deployments} == deployment_names(Settings(**app.args["settings"]))
    for spec in SPECS:  # every deployment the config names exists in code
        assert load_class(spec.target)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_serve_configs_pass_rays_schema(path: Path) -> None:
    _validate_serve_config(yaml.safe_load(path.read_text()))


def test_the_rayservice_embeds_the_cluster_profile() -> None:
    manifest = yaml.safe_load(RAYSERVICE.read_text())
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayService"
    embedded = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    _validate_serve_config(embedded)
    assert embedded == yaml.safe_load((ROOT / "configs" / "serve.cluster.yaml").read_text())

    cluster = manifest["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for group in pods:
        assert group["rayStartParams"]["metrics-export-port"] == "8080"  # the documented Prometheus port
        for container in group["template"]["spec"]["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            for secret in ("RAY_AUTH_TOKEN", "KHULUMA_DATABASE_URL", "KHULUMA_S3_SECRET_KEY", "KHULUMA_S3_ACCESS_KEY"):
                assert "secretKeyRef" in env[secret]["valueFrom"] and "value" not in env[secret]  # never inline
    gpu = next(g for g in cluster["workerGroupSpecs"] if g["groupName"] == "gpu")
    assert gpu["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_the_launcher_config_passes_rays_launcher_schema() -> None:
    import jsonschema
    import ray.autoscaler

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    config = yaml.safe_load(LAUNCHER.read_text())
    jsonschema.validate(config, schema)
    starts = " ".join(config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in starts and "--metrics-export-port=8080" in starts
    assert "serve deploy configs/serve.cluster.yaml" in starts


def test_a_broken_config_is_refused_by_the_same_check() -> None:
    config = yaml.safe_load((ROOT / "configs" / "serve.cluster.yaml").read_text())
    config["applications"][0]["deployments"][0]["max_ongoing_requests"] = "lots"
    with pytest.raises(Exception, match="max_ongoing_requests"):
        _validate_serve_config(config)
    config = yaml.safe_load((ROOT / "configs" / "serve.cluster.yaml").read_text())
    config["applications"][0]["deployments"][1]["name"] = "Embedings"  # would configure nothing
    with pytest.raises(AssertionError):
        _validate_serve_config(config)
