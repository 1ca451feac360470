"""How audio and documents reach the replica that works on them, on one node or many, with no shared disk.

- :func:`blob_from_file` / :func:`blob_from_bytes` (the ingress): a :class:`contracts.payloads.Blob` carrying the
  bytes inline up to ``settings.inline_payload_mb``, else an object under ``transfers/`` in the service's bucket.
  Without object storage configured (one node, ``khuluma serve --no-storage``) everything travels inline, up to
  :data:`INLINE_HARD_LIMIT` (under Serve's gRPC message limit); larger answers 413 naming the setting to set.
- :func:`materialise` (the replica): the blob as a private temporary file, removed afterwards. Decoders and
  extractors read files; the file exists only inside the process that reads it.
- :func:`discard`: the sender removes a ``transfers/`` object once the call has answered.
- v1 uploads and job audio (:func:`store_upload`, :func:`upload_blob`, :func:`delete_upload`): kept under
  ``uploads/<upload id>/`` in object storage, so the Jobs deployment on any node can hand them to Transcription.
  Without object storage they stay in ``<data_dir>/uploads`` (a single-node set-up by definition).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from cluster.s3 import call_storage, download_object, ensure_bucket, for_bucket, is_missing, s3_client
from contracts.errors import TooLarge
from contracts.payloads import Blob
from contracts.settings import S3Settings, Settings

TRANSFER_PREFIX = "transfers"
UPLOAD_PREFIX = "uploads"
S3_SCHEME = "s3://"
MB = 1024 * 1024
# Serve's replica gRPC limit is raised to 64 MiB (khuluma/cli/serve.py ray_env, configs/serve.yaml); an inline
# payload stays well under it, with room for the rest of the request.
GRPC_MESSAGE_LIMIT = 64 * MB
INLINE_HARD_LIMIT = 48 * MB


def storage_configured(s3: S3Settings) -> bool:
    return bool(s3.endpoint_url)


def _inline_limit(settings: Settings) -> int:
    if not storage_configured(settings.s3):
        return INLINE_HARD_LIMIT
    return int(min(settings.inline_payload_mb * MB, INLINE_HARD_LIMIT))


def _too_large(size: int) -> TooLarge:
    return TooLarge(
        f"This file ({size / MB:.0f} MB) is larger than {INLINE_HARD_LIMIT // MB} MB, which needs object storage "
        "on this server (set KHULUMA_S3_ENDPOINT_URL, or let `khuluma serve` start its local storage)."
    )


def _object_name(name: str) -> str:
    return PurePosixPath(name.replace("\\", "/")).name[-120:] or "payload"


def blob_from_file(settings: Settings, path: Path, name: str) -> Blob:
    size = path.stat().st_size
    if size <= _inline_limit(settings):
        return Blob(data=path.read_bytes(), size=size)
    if not storage_configured(settings.s3):
        raise _too_large(size)
    key = f"{TRANSFER_PREFIX}/{uuid.uuid4().hex}/{_object_name(name)}"
    call_storage(ensure_bucket, settings.s3)
    call_storage(s3_client(settings.s3).upload_file, str(path), settings.s3.bucket, key)
    return Blob(key=key, bucket=settings.s3.bucket, size=size)


def blob_from_bytes(settings: Settings, data: bytes, name: str) -> Blob:
    if len(data) <= _inline_limit(settings):
        return Blob(data=data, size=len(data))
    if not storage_configured(settings.s3):
        raise _too_large(len(data))
    key = f"{TRANSFER_PREFIX}/{uuid.uuid4().hex}/{_object_name(name)}"
    call_storage(ensure_bucket, settings.s3)
    call_storage(s3_client(settings.s3).put_object, Bucket=settings.s3.bucket, Key=key, Body=data)
    return Blob(key=key, bucket=settings.s3.bucket, size=len(data))


def discard(settings: Settings, blob: Blob) -> None:
    """Remove a ``transfers/`` object once its call has answered (best effort: a leftover is only bytes)."""
    if blob.key is None or not blob.key.startswith(f"{TRANSFER_PREFIX}/"):
        return
    try:
        s3_client(for_bucket(settings.s3, blob.bucket)).delete_object(Bucket=blob.bucket, Key=blob.key)
    except Exception:  # noqa: BLE001 - storage hiccup: the object stays, harmless
        pass


@contextmanager
def materialise(s3: S3Settings, blob: Blob, name: str) -> Iterator[Path]:
    """The blob as a file private to this process (named like ``name``, whose extension decoders may use)."""
    folder = Path(tempfile.mkdtemp(prefix="khuluma-in-"))
    path = folder / _object_name(name)
    try:
        if blob.data is not None:
            path.write_bytes(blob.data)
        else:
            assert blob.key is not None
            download_object(for_bucket(s3, blob.bucket), blob.key, path)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------------------------ v1 uploads, job audio


def store_upload(settings: Settings, upload_id: str, name: str, data: bytes) -> str:
    """Keep an uploaded file for its job; its location (``s3://bucket/key``, or a local path without storage)."""
    if storage_configured(settings.s3):
        key = f"{UPLOAD_PREFIX}/{upload_id}/{_object_name(name)}"
        call_storage(ensure_bucket, settings.s3)
        call_storage(s3_client(settings.s3).put_object, Bucket=settings.s3.bucket, Key=key, Body=data)
        return f"{S3_SCHEME}{settings.s3.bucket}/{key}"
    folder = settings.data_dir / UPLOAD_PREFIX / upload_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / _object_name(name)
    path.write_bytes(data)
    return str(path)


def _split(location: str) -> tuple[str, str]:
    bucket, _, key = location.removeprefix(S3_SCHEME).partition("/")
    return bucket, key


def upload_blob(settings: Settings, location: str, size: int) -> Blob:
    """What a job hands Transcription for its upload."""
    if location.startswith(S3_SCHEME):
        bucket, key = _split(location)
        return Blob(key=key, bucket=bucket, size=size)
    data = Path(location).read_bytes()  # no object storage: one node, the ingress's own disk
    return Blob(data=data, size=len(data))


def delete_upload(settings: Settings, upload_id: str, location: str) -> int:
    """Remove an upload's stored audio wherever it is; the bytes freed (0 when already gone)."""
    if location.startswith(S3_SCHEME):
        bucket, key = _split(location)
        client = s3_client(for_bucket(settings.s3, bucket))
        try:
            size = int(client.head_object(Bucket=bucket, Key=key).get("ContentLength", 0))
        except Exception as exc:
            if is_missing(exc):
                return 0
            raise
        client.delete_object(Bucket=bucket, Key=key)
        return size
    root = (settings.data_dir / UPLOAD_PREFIX).resolve()
    folder = root / upload_id
    target = folder if folder.is_dir() else Path(location)
    if not target.exists() or root not in target.resolve().parents:
        return 0  # already gone, or not ours to delete
    if target.is_dir():
        size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        shutil.rmtree(target, ignore_errors=True)
        return size
    size = target.stat().st_size
    target.unlink(missing_ok=True)
    return size
