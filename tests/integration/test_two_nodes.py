"""Two Ray nodes, no shared disk: the cluster profile deployed with the ``serve`` CLI, driven end to end.

- A head node (the ingress, the text and search deployments, the jobs and batch coordinators) and a worker node
  started with the custom resource ``speech``. Transcription, the per-file batch tasks and one of the two
  Search replicas (``max_replicas_per_node: 1``) run on the worker, so audio, documents and batch files
  really cross nodes.
- As root the worker runs inside ``unshare --mount`` with private tmpfs mounts over ``/tmp`` and the data directory:
  a file one node writes there does not exist for the other. Without root that part is skipped with its reason
  (the nodes then share a disk, and the test proves less); so is it as root without ``unshare`` (failed under
  CI=true), while the other flows run on the shared disk.
- Tools are checked where they are used (``tests/tools.py``): PostgreSQL's server binaries for the cluster itself;
  espeak-ng only by the speech flows, so the text, knowledge-base and placement tests run without it.
- Backing services are real and throwaway: PostgreSQL for metadata, ``chroma run`` for vectors, SeaweedFS for
  objects. ``serve deploy`` talks to the head's dashboard, as an operator would.
- Flows: text, knowledge-base upload and query, sync transcription, an async job with a signed webhook, a batch,
  and a customer's requests-per-minute limit held by the two ingress replicas (one per node) together.
  Then the worker node is killed in the middle of a batch and started again: the batch completes with every file
  transcribed exactly once.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import func, select

from cluster.credentials import decode_token
from cluster.seaweedfs import LocalSeaweedFS
from contracts.settings import Settings
from khuluma.cli.batch import upload_directory
from persistence.models import BatchItem, UsageRecord
from persistence.session import Database, migrate
from scripts.bench._local_ray import LocalCluster, RayNode, free_port, private_disk_available, wait_for
from serve_app.tokens import create_token
from tests.services import ChromaServer, Postgres
from tests.speechdata import CALL_PHRASES, espeak
from tests.tools import require_tool
from tests.unit.test_jobs import SPOKEN, Receiver

pytestmark = [pytest.mark.integration, pytest.mark.twonode]

ROOT = Path(__file__).resolve().parents[2]
SERVE = Path(sys.executable).with_name("serve")
KB = "/api/v1/search/knowledgebase"
BATCH = "/api/v2alpha/transcribe/batch"
SPEECH_RESOURCE = "speech"


@dataclass
class TwoNodes:
    url: str
    cluster: LocalCluster
    worker: RayNode
    db: Database
    token: str
    data_dir: Path
    private_disk: bool

    @property
    def headers(self) -> dict[str, str]:
        return {"X-CLIENT-TOKEN": self.token}


# The cluster profile's deployments, scaled down to this machine (2 logical Ray CPUs per node, 2 real cores).
TEST_CPUS = {
    "Ingress": 0.2,
    "Embeddings": 0.25,
    "TextAnalysis": 0.25,
    "Translation": 0.25,
    "Speech": 0.5,
    "Search": 0.2,
    "Jobs": 0.1,
}


def cluster_config(port: int, settings: dict[str, Any]) -> dict[str, Any]:
    """configs/serve.cluster.yaml as an operator would deploy it, with the speech work pinned to the `speech` node
    and CPUs scaled to this machine. One HTTP entry, on the head: both nodes share this machine's ports."""
    config = yaml.safe_load((ROOT / "configs" / "serve.cluster.yaml").read_text())
    config["proxy_location"] = "HeadOnly"
    config["http_options"].update(host="127.0.0.1", port=port)
    app = config["applications"][0]
    app["args"] = {"settings": {**app["args"]["settings"], **settings}}  # the profile's own (the embedder's placement)
    for deployment in app["deployments"]:
        name = deployment["name"]
        deployment["ray_actor_options"]["num_cpus"] = TEST_CPUS[name]
        deployment["ray_actor_options"].pop("num_gpus", None)
        if "autoscaling_config" in deployment:  # one replica each: the cluster's autoscaling is not under test
            deployment.pop("autoscaling_config")
            deployment["num_replicas"] = 1
    by_name = {d["name"]: d for d in app["deployments"]}
    by_name["Speech"]["ray_actor_options"]["resources"] = {SPEECH_RESOURCE: 1}
    # an ingress replica on each node (the profile autoscales it): per-customer limits are proven across nodes
    by_name["Ingress"].update(num_replicas=2, max_replicas_per_node=1)
    assert by_name["Search"]["num_replicas"] == 2 and by_name["Search"]["max_replicas_per_node"] == 1
    return config


def replicas_by_deployment(dashboard: str) -> dict[str, list[dict[str, Any]]]:
    apps = httpx.get(f"{dashboard}/api/serve/applications/", timeout=10).json()["applications"]
    deployments = apps["khuluma"]["deployments"]
    return {name: d["replicas"] for name, d in deployments.items()}


def app_status(dashboard: str) -> str:
    apps = httpx.get(f"{dashboard}/api/serve/applications/", timeout=10).json()["applications"]
    return str(apps["khuluma"]["status"]) if "khuluma" in apps else "NOT_DEPLOYED"


def alive_nodes(dashboard: str) -> list[dict[str, Any]]:
    nodes = httpx.get(f"{dashboard}/api/v0/nodes", params={"limit": 100}, timeout=10).json()["data"]["result"]["result"]
    return [n for n in nodes if n["state"] == "ALIVE"]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    postgres = Postgres()  # checks PostgreSQL's server binaries before anything starts
    if not ChromaServer.available():
        pytest.fail("the chroma CLI (chromadb package) is not installed")
    work = Path(tempfile.mkdtemp(prefix="khuluma-2n-"))  # outside pytest's tree: the worker's /tmp is private
    defaults = Settings(_env_file=None)
    seaweed = LocalSeaweedFS(work / "seaweedfs", defaults.s3.access_key, defaults.s3.secret_key.get_secret_value())
    s3_url = seaweed.start()
    postgres.start()
    chroma = ChromaServer(work / "chroma").start()
    data_dir = work / "data"
    data_dir.mkdir()
    migrate(postgres.url)
    db = Database(postgres.url)
    from khuluma.cli.serve import cluster_ports, ray_env

    env = {
        **os.environ,
        **ray_env(),
        "KHULUMA_DATABASE_URL": postgres.url,  # secrets reach the replicas through each node's environment only
        "KHULUMA_S3_SECRET_KEY": defaults.s3.secret_key.get_secret_value(),
        # HAProxy's listeners and the direct-ingress replica ports of this cluster's own, not the session app's
        # (ray_env reuses the process's): with the same ports, one cluster's HAProxy would reach the other's replicas
        **cluster_ports(),
    }
    logs = tmp_path_factory.mktemp("two-nodes-logs")  # kept by pytest for a failed run
    cluster = LocalCluster(temp_dir=work / "ray", env=env, head_cpus=2, log_dir=logs)
    private = private_disk_available()
    try:
        cluster.start_head()
        worker = cluster.start_worker(
            num_cpus=2, resources={SPEECH_RESOURCE: 100}, private_dirs=[data_dir] if private else []
        )
        wait_for(lambda: len(alive_nodes(cluster.dashboard_url)) == 2, 120, "two alive Ray nodes")
        port = free_port()
        settings = {
            "data_dir": str(data_dir),
            "s3": {"endpoint_url": s3_url},
            "search": {"chroma_url": chroma.url},
            "webhooks": {"allow_private": True},
            "batch": {"task_resources": {SPEECH_RESOURCE: 1}, "task_cpus": 0.25},
        }
        config_path = work / "serve.cluster.yaml"
        config_path.write_text(yaml.safe_dump(cluster_config(port, settings), sort_keys=False))
        deployed = subprocess.run(
            [str(SERVE), "deploy", str(config_path), "--address", cluster.dashboard_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert deployed.returncode == 0, deployed.stderr
        url = f"http://127.0.0.1:{port}"
        # as an operator would (`serve status`): the application RUNNING, i.e. every replica up, not just the ingress
        settled = wait_for(
            lambda: (st := app_status(cluster.dashboard_url)) in ("RUNNING", "DEPLOY_FAILED") and st, 900, "the deploy"
        )
        assert settled == "RUNNING", httpx.get(f"{cluster.dashboard_url}/api/serve/applications/", timeout=10).text
        wait_for(lambda: httpx.get(f"{url}/api/v1/health", timeout=5).status_code == 200, 60, "a healthy service")
        token = create_token(db, "two-nodes", "default")[0]
        yield TwoNodes(url, cluster, worker, db, token, data_dir, private)
    finally:
        cluster.stop()
        chroma.stop()
        postgres.stop()
        seaweed.stop()
        shutil.rmtree(work, ignore_errors=True)


def worker_node_id(cluster: LocalCluster) -> str:
    head = {n["node_id"] for n in alive_nodes(cluster.dashboard_url) if n["is_head_node"]}
    others = [n["node_id"] for n in alive_nodes(cluster.dashboard_url) if n["node_id"] not in head]
    assert len(others) == 1, others
    return others[0]


def test_work_is_placed_on_both_nodes(two_nodes: TwoNodes) -> None:
    """Read from the dashboard's Serve REST API, as an operator sees it: every deployment, replicas running."""
    worker = worker_node_id(two_nodes.cluster)
    replicas = replicas_by_deployment(two_nodes.cluster.dashboard_url)
    assert set(replicas) == set(TEST_CPUS)
    assert all(r["state"] == "RUNNING" for rs in replicas.values() for r in rs), replicas
    assert {r["node_id"] for r in replicas["Speech"]} == {worker}
    store_nodes = [r["node_id"] for r in replicas["Search"]]
    assert len(store_nodes) == 2 and len(set(store_nodes)) == 2  # one replica on each node
    ingress_nodes = [r["node_id"] for r in replicas["Ingress"]]
    assert len(ingress_nodes) == 2 and len(set(ingress_nodes)) == 2


def test_customer_limits_hold_across_nodes(two_nodes: TwoNodes) -> None:
    """A customer's requests per minute are counted in PostgreSQL by both ingress replicas (one per node): 60
    requests, 8 at a time, against a limit of 30 admit exactly 30, and the worker node's ingress answered some."""
    from concurrent.futures import ThreadPoolExecutor

    token = create_token(two_nodes.db, f"limited-{time.time_ns()}", limits={"requests_per_minute": 30})[0]
    minute_left = 60 - time.time() % 60
    if minute_left < 20:  # all 60 requests inside one UTC minute
        time.sleep(minute_left + 0.5)

    def one(_: int) -> int:
        return httpx.get(
            f"{two_nodes.url}/ws/stream-transcribe", headers={"X-CLIENT-TOKEN": token}, timeout=60
        ).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(one, range(60)))
    assert codes.count(200) == 30 and codes.count(429) == 30, codes
    route = 'route="/ws/stream-transcribe"'
    worker = wait_for(lambda: t if route in (t := _scrape(two_nodes.worker.metrics_port)) else None, 120, "worker")
    assert 'status="429"' in worker or 'status="200"' in worker


def test_the_worker_disk_is_private(two_nodes: TwoNodes) -> None:
    if os.geteuid() != 0:
        pytest.skip("not root: the worker shares this disk, so no-shared-disk is not proven here")
    require_tool("unshare")  # as root, only a missing unshare leaves the disk shared
    assert two_nodes.private_disk
    marker = two_nodes.data_dir / f"head-only-{time.time_ns()}"
    marker.write_text("written by the head's filesystem view")
    listing = subprocess.run(
        ["nsenter", f"--target={two_nodes.worker.proc.pid}", "--mount", "ls", str(two_nodes.data_dir)],  # type: ignore[union-attr]
        capture_output=True,
        text=True,
    )
    assert listing.returncode == 0, listing.stderr
    assert marker.name not in listing.stdout


def test_text_and_knowledge_base_across_nodes(two_nodes: TwoNodes) -> None:
    url, h = two_nodes.url, two_nodes.headers
    r = httpx.post(f"{url}/api/v1/language/detect", headers=h, json={"text": "Sawubona, unjani namuhla?"}, timeout=60)
    assert r.status_code == 200, r.text
    r = httpx.post(
        f"{url}/api/v1/sentiment_analysis/process", headers=h, json={"encoded_text": "I love this"}, timeout=60
    )
    assert r.status_code == 200, r.text

    kb = httpx.post(f"{url}{KB}", headers=h, json={"knowledgebase_name": "two-nodes"}, timeout=60)
    assert kb.status_code == 200, kb.text
    kb_id = kb.json()["id"]
    facts = {
        "rain.txt": "The Drakensberg mountains receive heavy summer rain and snow in winter.",
        "taxi.txt": "Minibus taxis carry most commuters in Johannesburg every morning.",
    }
    for name, text in facts.items():
        up = httpx.post(
            f"{url}{KB}/{kb_id}/document", headers=h, files={"file": (name, text.encode(), "text/plain")}, timeout=120
        )
        assert up.status_code == 200, up.text
    # Both Search replicas (one per node) must see what either wrote: ask more times than there are replicas.
    for _ in range(6):
        q = httpx.post(f"{url}{KB}/{kb_id}/query", headers=h, json={"query": "Which mountains get snow?"}, timeout=60)
        assert q.status_code == 200, q.text
        top = q.json()["search_result"][0]
        assert "Drakensberg" in json.dumps(top), q.json()


def test_sync_and_async_transcription_cross_nodes(two_nodes: TwoNodes, tmp_path: Path) -> None:
    url, h = two_nodes.url, two_nodes.headers
    wav = espeak(SPOKEN, tmp_path / "weather.wav")
    speech = wav.read_bytes()
    words = {"weather", "today", "sunny", "light", "breeze", "north"}

    r = httpx.post(
        f"{url}/v1/transcribe/sync", headers=h, files={"file": ("weather.wav", speech, "audio/wav")}, timeout=300
    )
    assert r.status_code == 200, r.text
    heard = {w.strip(".,").lower() for w in r.json()["transcription_text"].split()}
    assert len(heard & words) >= 3, r.json()

    up = httpx.post(
        f"{url}/api/v1/transport/file-upload",
        headers=h,
        timeout=60,
        json={"file_name": "weather.wav", "audio_blob": base64.b64encode(speech).decode(), "file_size": len(speech)},
    )
    assert up.status_code == 200, up.text
    upload_id = up.json()["upload_id"]
    receiver = Receiver().start()
    try:
        r = httpx.post(
            f"{url}/api/v1/transcribe/process/{upload_id}", headers=h, json={"webhook": receiver.url}, timeout=60
        )
        assert r.status_code == 200, r.text
        done = wait_for(
            lambda: (
                got
                if (got := httpx.post(f"{url}/api/v1/transcribe/{upload_id}/get", headers=h, timeout=30).json()).get(
                    "status"
                )
                in ("completed", "failed")
                else None
            ),
            300,
            "the async job",
        )
        assert done["status"] == "completed", done
        assert len({w.strip(".,").lower() for w in done["text"].split()} & words) >= 3, done
        wait_for(lambda: receiver.received, 60, "the webhook")
        assert json.loads(receiver.received[0][1])["upload_id"] == upload_id
    finally:
        receiver.stop()


def _scrape(port: int | None) -> str:
    assert port is not None
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text


def test_prometheus_metrics_of_every_node(two_nodes: TwoNodes) -> None:
    """Ray's metrics agent on each node (its --metrics-export-port) serves the application's metrics."""
    url, h = two_nodes.url, two_nodes.headers
    httpx.post(f"{url}/api/v1/language/detect", headers=h, json={"text": "Sawubona"}, timeout=60)
    head_port = two_nodes.cluster.head.metrics_port if two_nodes.cluster.head else None
    wanted = [
        "ray_khuluma_http_requests_total{",
        'route="/api/v1/language/detect"',
        "ray_khuluma_http_request_seconds_bucket{",
        "ray_khuluma_model_seconds_bucket{",
        'model_call="Embeddings.embed"',
        "ray_khuluma_queue_depth{",
        'queue="jobs"',
        "ray_khuluma_audio_seconds_total{",
        "ray_khuluma_webhook_deliveries_total{",
        # Serve's own count of HTTP requests, still exported now that the ingress replica records it instead of
        # HAProxy's manager (RAY_SERVE_HAPROXY_METRICS_ENABLED=0 in ray_env; the name is the same either way)
        "ray_serve_num_http_requests_total{",
    ]

    # replicas without a pinned resource may run on either node: what the cluster exports is both agents' text
    def exported() -> str:
        return _scrape(head_port) + _scrape(two_nodes.worker.metrics_port)

    try:
        text = wait_for(lambda: t if all(w in (t := exported()) for w in wanted) else None, 120, "the metrics")
    except TimeoutError:
        text = exported()
        pytest.fail(f"not exported after 120 s: {[w for w in wanted if w not in text]}")
    assert 'status="200"' in text
    on_worker = wait_for(
        lambda: t if 'model_call="Speech.transcribe"' in (t := _scrape(two_nodes.worker.metrics_port)) else None,
        120,
        "the worker node's metrics",
    )
    assert "ray_khuluma_model_seconds_bucket{" in on_worker


def _words(text: str) -> set[str]:
    return {w.strip(".,?!'").lower() for w in text.split() if w.strip(".,?!'")}


def _batch(two_nodes: TwoNodes, folder: Path) -> str:
    url, h = two_nodes.url, two_nodes.headers
    created = httpx.post(f"{url}{BATCH}", params={"lang_code": "eng"}, headers=h, timeout=60)
    assert created.status_code == 201, created.text
    results = upload_directory(decode_token(created.json()["sas_token"]), folder, parallel=3)
    assert results and all(r.ok for r in results), [r.detail for r in results if not r.ok]
    batch_id = created.json()["batch_id"]
    r = httpx.post(f"{url}{BATCH}/{batch_id}/process", params={"diarise": 0}, headers=h, timeout=60)
    assert r.status_code == 202, r.text
    return str(batch_id)


def _batch_status(two_nodes: TwoNodes, batch_id: str) -> str:
    """The batch's status, as soon as the service answers: right after a node dies, the replicas that ran there
    (the Ingress may be one) are still being replaced, and an answer then is an error, not a list."""
    seen: list[str] = []

    def listed() -> list[dict[str, Any]] | None:
        try:
            r = httpx.get(f"{two_nodes.url}{BATCH}", headers=two_nodes.headers, timeout=30)
        except httpx.HTTPError as exc:
            seen.append(type(exc).__name__)
            return None
        if r.status_code != 200:
            seen.append(f"{r.status_code} {r.text[:200]}")
            return None
        return list(r.json())

    try:
        batches = wait_for(listed, 180, "the batch listing to answer", every_s=1.0)
    except TimeoutError:
        pytest.fail(f"the batch listing did not answer in 180 s; last answers: {seen[-3:]}")
    return str(next(b for b in batches if b["id"] == batch_id)["status"])


def _records(two_nodes: TwoNodes, batch_id: str) -> dict[str, dict[str, Any]]:
    r = httpx.get(f"{two_nodes.url}{BATCH}/{batch_id}/transcriptions", headers=two_nodes.headers, timeout=30)
    assert r.status_code == 200, r.text
    return {rec["blob_name"]: rec for rec in r.json()}


def test_batch_survives_the_worker_node_dying(two_nodes: TwoNodes, tmp_path: Path) -> None:
    folder = tmp_path / "calls"
    folder.mkdir()
    count = 6
    for i in range(count):
        espeak(f"{CALL_PHRASES[i % len(CALL_PHRASES)]}. this is call number {i}.", folder / f"call-{i}.wav")
    batch_id = _batch(two_nodes, folder)

    def some_done() -> bool:
        with two_nodes.db.session() as s:
            done = s.scalar(
                select(func.count())
                .select_from(BatchItem)
                .where(BatchItem.batch_id == batch_id, BatchItem.status == "COMPLETED")
            )
        return bool(done) and int(done) < count

    wait_for(some_done, 600, "the first batch file to finish on the worker node", every_s=0.2)
    two_nodes.worker.kill()  # mid-batch: its files in flight die with it
    wait_for(lambda: len(alive_nodes(two_nodes.cluster.dashboard_url)) == 1, 120, "Ray to see the worker gone")
    assert _batch_status(two_nodes, batch_id) in ("PROCESSING", "COMPLETE")  # not failed with the node
    two_nodes.cluster.restart(two_nodes.worker)
    wait_for(lambda: len(alive_nodes(two_nodes.cluster.dashboard_url)) == 2, 120, "the worker node back")

    wait_for(lambda: _batch_status(two_nodes, batch_id) in ("COMPLETE", "PARTIAL", "FAILED"), 900, "the batch")
    assert _batch_status(two_nodes, batch_id) == "COMPLETE"
    records = _records(two_nodes, batch_id)
    assert sorted(records) == sorted(f"batches/{batch_id}/call-{i}.wav" for i in range(count))
    for i in range(count):
        rec = records[f"batches/{batch_id}/call-{i}.wav"]
        assert rec["transcription_status"] == "COMPLETED", rec
        spoken = _words(CALL_PHRASES[i % len(CALL_PHRASES)])
        assert len(spoken & _words(rec["transcription_text"])) >= len(spoken) / 3, rec  # digits may come as words
    with two_nodes.db.session() as s:  # exactly once: one item per file, one successful usage record per file
        items = list(s.scalars(select(BatchItem).where(BatchItem.batch_id == batch_id)))
        usage = s.execute(
            select(UsageRecord.reference_id, UsageRecord.status, func.count())
            .where(UsageRecord.reference_id.in_([i.id for i in items]))
            .group_by(UsageRecord.reference_id, UsageRecord.status)
        ).all()
    assert len(items) == count and all(item.status == "COMPLETED" for item in items)
    assert sorted((status, n) for _, status, n in usage) == [("successful", 1)] * count
