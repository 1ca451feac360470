"""The batch upload credential (``sas_token``): a time-limited credential that can upload any number of files under
``batches/<batch_id>/`` of the bucket and do nothing else, enforced by the storage itself (``docs/batch.md``).

Two independent S3 mechanisms travel in it: an S3 POST policy signed with the service's key (plain HTTP uploads),
and, where the storage issues them, STS temporary keys scoped to the prefix (aws-cli, boto3). The token is
standard base64 of compact JSON (:func:`encode_token`, :func:`decode_token`).
"""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any, NotRequired, TypedDict, cast

from cluster.s3 import batch_prefix, boto_client, ensure_bucket, public_endpoint, require_endpoint, s3_client
from contracts.errors import InvalidInput
from contracts.settings import S3Settings, Settings

log = logging.getLogger(__name__)

TOKEN_VERSION = 1
# STS limits GetFederationToken lifetimes to 15 minutes .. 36 hours (AWS and SeaweedFS alike).
STS_MIN_SECONDS, STS_MAX_SECONDS = 900, 129_600


class PostPolicy(TypedDict):
    url: str
    fields: dict[str, str]


class TemporaryKeys(TypedDict):
    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at: str


class UploadToken(TypedDict):
    """The decoded ``sas_token`` (its JSON field names are part of the documented wire format)."""

    v: int
    batch_id: str
    endpoint: str
    region: str
    bucket: str
    prefix: str
    expires_at: str
    max_file_bytes: int
    post: PostPolicy
    credentials: NotRequired[TemporaryKeys]


def _utc(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def upload_session_policy(bucket: str, prefix: str) -> dict[str, Any]:
    """Session policy of the temporary keys: write objects under the prefix (multipart included), nothing else."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
                "Resource": [f"arn:aws:s3:::{bucket}/{prefix}*"],
            }
        ],
    }


def issue_upload_credential(settings: Settings, batch_id: str, seconds: int | None = None) -> UploadToken:
    """The batch upload credential (see :func:`encode_token`), valid ``seconds`` (default
    ``KHULUMA_BATCH_CREDENTIAL_SECONDS``).

    ``post``: an S3 POST policy signed with the service key: any number of ``multipart/form-data`` POSTs to
    ``post.url`` whose ``key`` starts with the batch prefix, each file up to ``max_request_mb``, until
    ``expires_at``. The storage checks signature, prefix, size and expiry; the service keeps no state for it.

    ``credentials`` (when the storage implements STS ``GetFederationToken``, as SeaweedFS and AWS do, the lifetime
    is at least 15 minutes and ``KHULUMA_BATCH_CREDENTIAL_STS`` is on): temporary keys whose session policy allows
    only writing objects under the prefix, for ``aws s3 cp`` / boto3. Omitted when the storage cannot issue them.
    """
    s3 = settings.s3
    seconds = int(seconds if seconds is not None else settings.batch.credential_seconds)
    if seconds <= 0:
        raise InvalidInput("batch_credential_seconds must be positive")
    ensure_bucket(s3)
    prefix = batch_prefix(batch_id)
    max_bytes = int(settings.max_request_mb * 1024 * 1024)
    post = s3_client(s3, public=True).generate_presigned_post(
        s3.bucket,
        prefix + "${filename}",
        Fields={"Content-Type": "application/octet-stream"},
        Conditions=[
            ["starts-with", "$key", prefix],
            ["content-length-range", 1, max_bytes],
            ["starts-with", "$Content-Type", ""],
        ],
        ExpiresIn=seconds,
    )
    token: UploadToken = {
        "v": TOKEN_VERSION,
        "batch_id": batch_id,
        "endpoint": public_endpoint(s3),
        "region": s3.region,
        "bucket": s3.bucket,
        "prefix": prefix,
        "expires_at": _utc(datetime.now(UTC) + timedelta(seconds=seconds)),
        "max_file_bytes": max_bytes,
        "post": {"url": post["url"], "fields": post["fields"]},
    }
    if settings.batch.credential_sts and seconds >= STS_MIN_SECONDS:
        keys = _federation_token(s3, batch_id, prefix, min(seconds, STS_MAX_SECONDS))
        if keys:
            token["credentials"] = keys
    return token


_sts_unsupported: set[str] = set()


def _federation_token(s3: S3Settings, batch_id: str, prefix: str, seconds: int) -> TemporaryKeys | None:
    from botocore.exceptions import BotoCoreError, ClientError

    endpoint = require_endpoint(s3)
    if endpoint in _sts_unsupported:
        return None
    sts = boto_client("sts", endpoint, s3.access_key, s3.secret_key, s3.region, retries=2)
    try:
        result = sts.get_federation_token(
            Name=("b" + batch_id.replace("-", ""))[:32],
            Policy=json.dumps(upload_session_policy(s3.bucket, prefix)),
            DurationSeconds=seconds,
        )
    except ClientError as exc:  # the service answered: it does not issue them (remembered for this process)
        log.warning(
            "Storage at %s issues no STS federation tokens (%s): batch credentials carry the POST policy only.",
            endpoint,
            exc,
        )
        _sts_unsupported.add(endpoint)
        return None
    except BotoCoreError as exc:  # a network hiccup: this credential goes without temporary keys
        log.warning("STS call to %s failed (%s): this batch credential carries the POST policy only.", endpoint, exc)
        return None
    c = result["Credentials"]
    return {
        "access_key_id": c["AccessKeyId"],
        "secret_access_key": c["SecretAccessKey"],
        "session_token": c["SessionToken"],
        "expires_at": _utc(c["Expiration"]),
    }


def encode_token(token: UploadToken) -> str:
    """The ``sas_token`` string: standard base64 of compact JSON (``echo "$SAS" | base64 -d | jq`` reads it)."""
    return base64.b64encode(json.dumps(token, separators=(",", ":")).encode()).decode()


def decode_token(sas_token: str) -> UploadToken:
    """Inverse of :func:`encode_token` (also accepts base64url and missing padding); ValueError if malformed."""
    raw = sas_token.strip()
    raw += "=" * (-len(raw) % 4)
    try:
        data = json.loads(base64.b64decode(raw.replace("-", "+").replace("_", "/"), validate=True))
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError("not a Khuluma batch upload token (expected base64 JSON)") from exc
    if not isinstance(data, dict) or data.get("v") != TOKEN_VERSION or "post" not in data:
        raise ValueError("not a Khuluma batch upload token (unknown version or missing fields)")
    return cast(UploadToken, data)
