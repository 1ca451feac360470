"""S3 operations against any S3-compatible endpoint (SeaweedFS, MinIO, Ceph, AWS ...) through boto3, configured by
the ``s3`` settings section, and where batch files live in the bucket (``batches/<batch_id>/``).

No Ray and no engine here: the ingress (creating and listing batches) and the batch tasks (reading files) share
this module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from pydantic import SecretStr

from contracts.errors import DomainError, Unavailable
from contracts.settings import S3Settings

BATCH_PREFIX = "batches"

P = ParamSpec("P")
T = TypeVar("T")


@functools.lru_cache(maxsize=32)  # boto3 clients are thread-safe and costly to build: one per configuration
def boto_client(
    service: Literal["s3", "sts"],
    endpoint: str,
    access_key: str,
    secret_key: SecretStr,
    region: str,
    *,
    connect_timeout: float = 10,
    read_timeout: float = 120,
    retries: int = 4,
) -> Any:
    """A boto3 client (``s3`` or ``sts``) with path-style addressing and SigV4, as S3-compatible services need."""
    import boto3
    from botocore.config import Config

    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"max_attempts": retries, "mode": "standard"},
    )
    options: dict[str, Any] = {
        "endpoint_url": endpoint,
        "region_name": region,
        "aws_access_key_id": access_key,
        "aws_secret_access_key": secret_key.get_secret_value(),
        "config": config,
    }
    session = boto3.session.Session()
    if service == "sts":
        return session.client("sts", **options)
    return session.client("s3", **options)


def require_endpoint(s3: S3Settings) -> str:
    if not s3.endpoint_url:
        raise Unavailable(
            "Object storage is not configured: set KHULUMA_S3_ENDPOINT_URL (any S3-compatible service), or run "
            "`khuluma serve`, which starts a local SeaweedFS."
        )
    return s3.endpoint_url.rstrip("/")


def public_endpoint(s3: S3Settings) -> str:
    """The endpoint clients upload to (``KHULUMA_S3_PUBLIC_ENDPOINT_URL``, else the service's own endpoint)."""
    return (s3.public_endpoint_url or require_endpoint(s3)).rstrip("/")


def s3_client(s3: S3Settings, *, public: bool = False) -> Any:
    """A boto3 S3 client with the service's keys (``public=True``: addressed at the public endpoint)."""
    endpoint = public_endpoint(s3) if public else require_endpoint(s3)
    return boto_client("s3", endpoint, s3.access_key, s3.secret_key, s3.region)


def for_bucket(s3: S3Settings, bucket: str | None) -> S3Settings:
    """``s3`` pointing at ``bucket`` (a batch's own bucket, which may differ from the configured one after a
    configuration change); None keeps the configured bucket."""
    if bucket and bucket != s3.bucket:
        return s3.model_copy(update={"bucket": bucket})
    return s3


_known_buckets: set[tuple[str, str]] = set()


def ensure_bucket(s3: S3Settings) -> None:
    """Create the bucket if it does not exist (checked once per process, endpoint and bucket)."""
    from botocore.exceptions import ClientError

    key = (require_endpoint(s3), s3.bucket)
    if key in _known_buckets:
        return
    client = s3_client(s3)
    try:
        client.head_bucket(Bucket=s3.bucket)
    except ClientError as exc:
        if error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
            raise
        try:
            client.create_bucket(Bucket=s3.bucket)
        except ClientError as create_exc:  # created meanwhile by another process
            if error_code(create_exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
    _known_buckets.add(key)


def error_code(exc: Exception) -> str:
    """The S3 error code of a botocore ``ClientError`` (``NoSuchKey``, ``404``, ``AccessDenied`` ...)."""
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def is_missing(exc: Exception) -> bool:
    return error_code(exc) in ("404", "NoSuchKey", "NotFound", "NoSuchBucket")


def call_storage(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a blocking storage call for a request: a storage outage becomes :class:`Unavailable` naming the
    cause (the client may retry), not a 500."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(*args, **kwargs)
    except DomainError:
        raise
    except (BotoCoreError, ClientError) as exc:
        raise Unavailable(f"Object storage is unavailable: {exc}") from None


# --------------------------------------------------------------------------- where batch files live


def batch_prefix(batch_id: str) -> str:
    return f"{BATCH_PREFIX}/{batch_id}/"


def blob_endpoint(s3: S3Settings, batch_id: str) -> str:
    """The address of the batch's place in object storage: ``<endpoint>/<bucket>/batches/<batch_id>/``."""
    return f"{public_endpoint(s3)}/{s3.bucket}/{batch_prefix(batch_id)}"


def object_url(s3: S3Settings, key: str) -> str:
    return f"{public_endpoint(s3)}/{s3.bucket}/{key}"


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int


def list_objects(s3: S3Settings, prefix: str) -> list[StoredObject]:
    """Every object under ``prefix`` (all pages), sorted by key; 'folder' markers are skipped."""
    objects: list[StoredObject] = []
    for page in s3_client(s3).get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if not item["Key"].endswith("/"):
                objects.append(StoredObject(item["Key"], int(item.get("Size", 0))))
    return sorted(objects, key=lambda o: o.key)


def download_object(s3: S3Settings, key: str, dest: Path) -> int:
    """Stream one object to ``dest``; returns its size in bytes."""
    s3_client(s3).download_file(s3.bucket, key, str(dest))
    return dest.stat().st_size
