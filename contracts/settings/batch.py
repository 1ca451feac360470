"""Settings of object storage (``KHULUMA_S3_*``) and batch transcription (``KHULUMA_BATCH_*``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class S3Settings(BaseModel):
    """Object storage (S3 API): batch files, v1 uploads and job audio, large payloads between nodes."""

    model_config = ConfigDict(extra="ignore")
    endpoint_url: str | None = Field(
        default=None,
        description="S3-compatible endpoint. Unset: `khuluma serve` starts a local SeaweedFS on 127.0.0.1.",
    )
    region: str = Field(default="us-east-1", description="S3 region.")
    bucket: str = Field(
        default="khuluma-batches", description="Bucket for new batch uploads (each batch remembers its own bucket)."
    )
    access_key: str = Field(default="khuluma", description="S3 access key.")
    secret_key: SecretStr = Field(default=SecretStr("khuluma-secret"), description="S3 secret key (a secret).")
    public_endpoint_url: str | None = Field(
        default=None, description="Endpoint URL clients should upload to, if different from `s3.endpoint_url`."
    )


class BatchSettings(BaseModel):
    """Batch transcription."""

    model_config = ConfigDict(extra="ignore")
    credential_seconds: int = Field(default=24 * 3600, description="Lifetime of a batch upload credential.")
    credential_sts: bool = Field(
        default=True,
        description="Also put prefix-scoped temporary S3 keys (STS GetFederationToken) in the batch credential, "
        "for aws-cli/boto3 uploads, when the storage issues them (SeaweedFS, AWS) and the lifetime is >= 15 min.",
    )
    task_cpus: float = Field(
        default=0.05,
        description="Ray CPUs reserved by each per-file batch task (scheduling only; `batch.max_parallel` bounds "
        "concurrency). Tiny by default so tasks fit next to the Serve replicas on a laptop; on a cluster set it "
        "to the CPUs one transcription really uses (e.g. 1-2) so Ray never oversubscribes a node.",
    )
    max_parallel: int = Field(
        default=0,
        description="Most files of one batch transcribed at once (0: the cluster's CPU count).",
    )
    task_retries: int = Field(
        default=3, description="Times a file's task is retried after its worker dies or storage fails."
    )
    task_resources: dict[str, float] = Field(
        default_factory=dict,
        description='Custom Ray resources each per-file batch task requires, e.g. {"speech": 1} to run batch '
        "files only on the nodes started with `ray start --resources '{\"speech\": N}'` (the speech/GPU nodes). "
        "Empty: any node.",
    )
