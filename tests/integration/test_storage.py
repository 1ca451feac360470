"""Object storage against a real SeaweedFS: the batch upload credential allows the batch prefix and nothing else,
and stops working when it expires; the local server starts, stops and keeps its data."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from cluster.credentials import UploadToken, decode_token, encode_token, issue_upload_credential
from cluster.s3 import batch_prefix, blob_endpoint, ensure_bucket, list_objects, s3_client
from cluster.seaweedfs import LocalSeaweedFS
from contracts.settings import Settings
from khuluma.cli import app as cli_app
from khuluma.cli.batch import upload_file


@pytest.fixture()
def s3_settings(settings: Settings, seaweedfs: str) -> Settings:
    return settings.updated({"s3": {"endpoint_url": seaweedfs, "bucket": "khuluma-test-storage"}})


def _read(settings: Settings, key: str) -> bytes:
    return s3_client(settings.s3).get_object(Bucket=settings.s3.bucket, Key=key)["Body"].read()


def _scoped_client(token: UploadToken, settings: Settings):
    creds = token["credentials"]
    return boto3.client(
        "s3",
        endpoint_url=token["endpoint"],
        region_name=settings.s3.region,
        aws_access_key_id=creds["access_key_id"],
        aws_secret_access_key=creds["secret_access_key"],
        aws_session_token=creds["session_token"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def _denied(call) -> str:
    with pytest.raises(ClientError) as info:
        call()
    return info.value.response["Error"]["Code"]


def test_token_is_base64_json_and_garbage_is_rejected(s3_settings: Settings):
    token = issue_upload_credential(s3_settings, "b-roundtrip")
    sas = encode_token(token)
    assert json.loads(base64.b64decode(sas))["prefix"] == "batches/b-roundtrip/"
    assert decode_token(sas) == token
    for bad in ("", "not base64!", base64.b64encode(b"[1,2]").decode(), base64.b64encode(b'{"v": 9}').decode()):
        with pytest.raises(ValueError):
            decode_token(bad)
    assert blob_endpoint(s3_settings.s3, "b-roundtrip") == (
        f"{s3_settings.s3.endpoint_url}/khuluma-test-storage/batches/b-roundtrip/"
    )


def test_ensure_bucket_creates_a_missing_bucket(s3_settings: Settings):
    fresh = s3_settings.updated({"s3": {"bucket": f"fresh-{int(time.time() * 1000)}"}})
    client = s3_client(fresh.s3)
    assert _denied(lambda: client.head_bucket(Bucket=fresh.s3.bucket)) in ("404", "NoSuchBucket")
    ensure_bucket(fresh.s3)
    client.head_bucket(Bucket=fresh.s3.bucket)  # exists now


def test_post_policy_uploads_inside_the_prefix_only(s3_settings: Settings, tmp_path: Path):
    token = decode_token(encode_token(issue_upload_credential(s3_settings, "b-post")))
    audio = tmp_path / "hello.wav"
    audio.write_bytes(b"RIFF-not-really-audio" * 100)

    ok = upload_file(token, audio, "batches/b-post/hello.wav")
    assert ok.ok, ok.detail
    assert _read(s3_settings, "batches/b-post/hello.wav") == audio.read_bytes()
    ok = upload_file(token, audio, "batches/b-post/sub/dir/again.wav")  # any number of files, sub-paths too
    assert ok.ok, ok.detail

    for outside in ("batches/other-batch/hello.wav", "hello.wav", "batches/b-pos/x.wav", "batches/b-post"):
        refused = upload_file(token, audio, outside)
        assert not refused.ok and "403" in refused.detail, (outside, refused.detail)
    # tampering with the signed policy (widening the prefix) breaks the signature
    forged = json.loads(base64.b64decode(token["post"]["fields"]["policy"]))
    forged["conditions"] = [c for c in forged["conditions"] if not (isinstance(c, list) and c[1] == "$key")]
    token_forged: UploadToken = {
        **token,
        "post": {
            **token["post"],
            "fields": {**token["post"]["fields"], "policy": base64.b64encode(json.dumps(forged).encode()).decode()},
        },
    }
    assert not upload_file(token_forged, audio, "elsewhere.wav").ok
    keys = [o.key for o in list_objects(s3_settings.s3, "")]
    assert "hello.wav" not in keys and not any(k.startswith("batches/other-batch/") for k in keys)
    assert sorted(o.key for o in list_objects(s3_settings.s3, batch_prefix("b-post"))) == [
        "batches/b-post/hello.wav",
        "batches/b-post/sub/dir/again.wav",
    ]


def test_post_policy_expires(s3_settings: Settings, tmp_path: Path):
    token = issue_upload_credential(s3_settings, "b-expiring", seconds=2)
    assert "credentials" not in token  # STS keys live at least 15 minutes: not issued for shorter credentials
    audio = tmp_path / "a.wav"
    audio.write_bytes(b"x" * 64)
    assert upload_file(token, audio, "batches/b-expiring/first.wav").ok
    time.sleep(3.2)
    late = upload_file(token, audio, "batches/b-expiring/late.wav")
    assert not late.ok and "403" in late.detail and "expired" in late.detail.lower()
    assert [o.key for o in list_objects(s3_settings.s3, "batches/b-expiring/")] == ["batches/b-expiring/first.wav"]


def test_temporary_keys_write_the_prefix_and_nothing_else(s3_settings: Settings, tmp_path: Path):
    token = issue_upload_credential(s3_settings, "b-sts")
    assert token["credentials"]["session_token"]
    client = _scoped_client(token, s3_settings)
    bucket = s3_settings.s3.bucket
    client.put_object(Bucket=bucket, Key="batches/b-sts/one.wav", Body=b"abc")
    # a multipart upload (what aws s3 cp does for big files) inside the prefix works too
    from boto3.s3.transfer import TransferConfig

    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (6 * 1024 * 1024))
    client.upload_file(
        str(big),
        bucket,
        "batches/b-sts/big.bin",
        Config=TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024),
    )
    assert _read(s3_settings, "batches/b-sts/one.wav") == b"abc"

    assert _denied(lambda: client.put_object(Bucket=bucket, Key="batches/other/one.wav", Body=b"x")) == "AccessDenied"
    assert _denied(lambda: client.put_object(Bucket=bucket, Key="root.wav", Body=b"x")) == "AccessDenied"
    assert _denied(lambda: client.get_object(Bucket=bucket, Key="batches/b-sts/one.wav")) == "AccessDenied"
    assert _denied(lambda: client.list_objects_v2(Bucket=bucket)) == "AccessDenied"
    assert _denied(lambda: client.delete_object(Bucket=bucket, Key="batches/b-sts/one.wav")) == "AccessDenied"
    assert _denied(lambda: client.create_bucket(Bucket="sneaky-bucket")) == "AccessDenied"
    assert sorted(o.key for o in list_objects(s3_settings.s3, "batches/b-sts/")) == [
        "batches/b-sts/big.bin",
        "batches/b-sts/one.wav",
    ]


def test_cli_uploads_a_directory_with_the_credential(s3_settings: Settings, tmp_path: Path):
    token = encode_token(issue_upload_credential(s3_settings, "b-cli"))
    folder = tmp_path / "calls"
    (folder / "day2").mkdir(parents=True)
    (folder / "a.wav").write_bytes(b"a" * 1000)
    (folder / "day2" / "b.mp3").write_bytes(b"b" * 2000)
    (folder / ".hidden").write_bytes(b"skip me")
    runner = CliRunner()
    result = runner.invoke(cli_app, ["batch", "upload", "b-cli", str(folder), "--token", token])
    assert result.exit_code == 0, result.output
    assert sorted(o.key for o in list_objects(s3_settings.s3, "batches/b-cli/")) == [
        "batches/b-cli/a.wav",
        "batches/b-cli/day2/b.mp3",
    ]
    wrong = runner.invoke(cli_app, ["batch", "upload", "another-batch", str(folder), "--token", token])
    assert wrong.exit_code == 2 and "belongs to batch b-cli" in wrong.output
    exports = runner.invoke(cli_app, ["batch", "env", "--token", token])
    assert exports.exit_code == 0 and "export AWS_SESSION_TOKEN=" in exports.output
    assert "s3://khuluma-test-storage/batches/b-cli/" in exports.output


def test_local_seaweedfs_binds_loopback_keeps_data_and_stops(tmp_path: Path, settings: Settings):
    server = LocalSeaweedFS(tmp_path / "sw", "k-local", "s-local")
    endpoint = server.start()
    assert endpoint.startswith("http://127.0.0.1:")
    local = settings.updated(
        {"s3": {"endpoint_url": endpoint, "access_key": "k-local", "secret_key": "s-local", "bucket": "persist-test"}}
    )
    token = issue_upload_credential(local, "b-restart")
    audio = tmp_path / "keep.wav"
    audio.write_bytes(b"keep me")
    assert upload_file(token, audio, "batches/b-restart/keep.wav").ok
    wrong_key = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="k-local",
        aws_secret_access_key="wrong",
        config=Config(retries={"max_attempts": 1}),
    )
    assert _denied(lambda: wrong_key.list_buckets()) in ("SignatureDoesNotMatch", "AccessDenied", "403")
    server.stop()
    with pytest.raises(httpx.HTTPError):
        httpx.get(endpoint, timeout=2)

    # restarted on the same data directory: same endpoint (its ports are reused while free); the object and the
    # credential issued before the restart still work
    endpoint2 = server.start()
    try:
        assert endpoint2 == endpoint
        assert _read(local, "batches/b-restart/keep.wav") == b"keep me"
        assert upload_file(token, audio, "batches/b-restart/after-restart.wav").ok
    finally:
        server.stop()
