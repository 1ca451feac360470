"""The settings tree: the service-wide fields, one section per capability, where a process reads them from (its
environment, the operator's secrets file, ``.env``) and what a replica is handed (:meth:`Settings.for_replica`)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources import DotEnvSettingsSource, EnvSettingsSource

from contracts.settings.admission import AdmissionSettings
from contracts.settings.batch import BatchSettings, S3Settings
from contracts.settings.jobs import JobsSettings, WebhooksSettings
from contracts.settings.llm import LLMSettings
from contracts.settings.renames import merge_mappings, new_section_names, with_new_names
from contracts.settings.search import SearchSettings
from contracts.settings.speech import SpeechSettings
from contracts.settings.text import EmbeddingsSettings, TextSettings
from contracts.settings.translation import TranslationSettings

SECRETS_FILE_ENV = "KHULUMA_SECRETS_FILE"
# (section or None for the top level, field): values that must never reach Ray's view or a log line.
SECRET_FIELDS: tuple[tuple[str | None, str], ...] = ((None, "database_url"), ("s3", "secret_key"))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="KHULUMA_", env_file=".env", extra="ignore", env_nested_delimiter="_", env_nested_max_split=1
    )

    # --- service-wide --------------------------------------------------------------------
    data_dir: Path = Field(
        default=Path.home() / ".khuluma",
        description="Where the service keeps its database, uploads, vector store and model cache.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="SQLAlchemy URL (a secret: it may carry a password). Default: SQLite file "
        "`<data_dir>/khuluma.db`. For clusters use `postgresql+psycopg://user:pass@host/db`.",
    )
    host: str = Field(default="127.0.0.1", description="Address the HTTP server binds to.")
    port: int = Field(default=8000, description="Port the HTTP server listens on.")
    release_name: str | None = Field(default=None, description="Release name reported by /_meta/version.")
    git_commit: str | None = Field(
        default=None, description="Commit reported by /_meta/version (default: read from git at start-up)."
    )
    token_cache_seconds: float = Field(
        default=30.0,
        ge=0,
        description="How long an ingress replica trusts a token it verified without asking the database again: a "
        "token is checked once per this period, not once per request. A token revoked with `khuluma token revoke` "
        "is refused by every replica at most this long after its revocation. 0: every request asks the database.",
    )
    token_cache_size: int = Field(
        default=10_000,
        ge=1,
        description="Most verified tokens an ingress replica keeps trusted at once; past it, the one verified longest "
        "ago is forgotten (and asked again on its next request).",
    )
    max_request_mb: float = Field(
        default=1024.0,
        gt=0,
        description="Largest upload accepted, in MB (spec: 1 GB). A multipart body over it (by its Content-Length, "
        "or counted as it streams in when chunked) is refused with 413 before the rest is read.",
    )
    max_json_mb: float = Field(
        default=16.0,
        gt=0,
        description="Largest JSON body of every route except the two v1 base64 audio routes, in MB (text fields have "
        "their own, smaller limits). Checked before parsing (Content-Length, or counted while a chunked body streams "
        "in): 413. The v1 audio routes (`/api/v1/transcribe/sync`, `/api/v1/transport/file-upload`) take the "
        "base64 of a `max_request_mb` file (the spec's 1 GB), checked the same way.",
    )
    usage_flush_seconds: float = Field(
        default=0.2,
        ge=0,
        description="How often each ingress replica writes the usage rows of the requests it answered, in one "
        "transaction (off the request path). A usage report flushes its replica first; rows from other replicas "
        "show within this time. 0 writes each row before the request answers.",
    )
    cors_origins: list[str] = Field(default_factory=list, description="Origins allowed by CORS (none by default).")
    inline_payload_mb: float = Field(
        default=8.0,
        gt=0,
        le=48,
        description="Audio and documents up to this size (MB) travel to the model replicas inside the call; larger "
        "ones go through object storage (KHULUMA_S3_*), so any replica on any node can read them and no call comes "
        "near Serve's gRPC message limit (raised to 64 MiB by the service's Ray environment).",
    )
    shutdown_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        description="On SIGTERM or SIGINT, `khuluma serve` stops taking new requests and live sessions (503, live "
        "sessions are closed with 1001) and gives the requests in flight this long to finish before it stops "
        "everything it started; a second signal stops at once.",
    )
    access_log: bool | None = Field(
        default=None,
        description="Ray Serve's access log: one INFO line per request in each replica's log, on the request path "
        "(docs/performance.md, the per-request budget). Unset: the Serve config's `logging_config.enable_access_log` "
        "(false in configs/serve.yaml); true or false overrides it for `khuluma serve`.",
    )
    log_level: str = Field(
        default="INFO",
        description="Level of the service's own log lines (DEBUG, INFO, WARNING, ERROR): JSON lines with the request "
        "id on each process's standard error, which Ray keeps in `<ray session>/logs/worker-*.err` and `khuluma "
        "serve` prints. Ray Serve's own logs follow the Serve config's `logging_config`.",
        pattern=r"^(?i:debug|info|warning|error|critical)$",
    )

    # --- per capability ------------------------------------------------------------------
    text: TextSettings = Field(default_factory=TextSettings, description="Text analysis (KHULUMA_TEXT_*).")
    embeddings: EmbeddingsSettings = Field(
        default_factory=EmbeddingsSettings, description="The shared sentence embedder (KHULUMA_EMBEDDINGS_*)."
    )
    translation: TranslationSettings = Field(
        default_factory=TranslationSettings, description="Translation (KHULUMA_TRANSLATION_*)."
    )
    search: SearchSettings = Field(default_factory=SearchSettings, description="Knowledge bases (KHULUMA_SEARCH_*).")
    speech: SpeechSettings = Field(
        default_factory=SpeechSettings,
        description="Speech: models per language (any family), Whisper's decoding, the transcription and live routes' "
        "limits (KHULUMA_SPEECH_*; once KHULUMA_WHISPER_* and KHULUMA_TRANSCRIPTION_*).",
    )
    llm: LLMSettings = Field(
        default_factory=LLMSettings, description="The language model of the ask and chat routes (KHULUMA_LLM_*)."
    )
    jobs: JobsSettings = Field(default_factory=JobsSettings, description="Async v1 jobs (KHULUMA_JOBS_*).")
    webhooks: WebhooksSettings = Field(
        default_factory=WebhooksSettings, description="Webhook delivery (KHULUMA_WEBHOOKS_*)."
    )
    s3: S3Settings = Field(default_factory=S3Settings, description="Object storage (KHULUMA_S3_*).")
    batch: BatchSettings = Field(default_factory=BatchSettings, description="Batch transcription (KHULUMA_BATCH_*).")
    admission: AdmissionSettings = Field(
        default_factory=AdmissionSettings,
        description="Admission: customer limits and capacity (KHULUMA_ADMISSION_*; once KHULUMA_LIMITS_*).",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        secrets_file = os.environ.get(SECRETS_FILE_ENV)
        if secrets_file:  # the operator's secrets file, read by every process on every node
            sources.append(DotEnvSettingsSource(settings_cls, env_file=secrets_file))
        sources += [dotenv_settings, file_secret_settings]
        for source in sources:  # variables of a renamed section are read under its name now too
            if isinstance(source, EnvSettingsSource):
                source.env_vars = with_new_names(source.env_vars)
        return tuple(sources)

    @model_validator(mode="before")
    @classmethod
    def _renamed_sections(cls, data: Any) -> Any:
        """A section given under its old name (a Serve config's ``settings: {limits: ...}``) is read as its new
        one, with a warning; the new name wins where both are given."""
        return new_section_names(data) if isinstance(data, dict) else data

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @property
    def db_url(self) -> str:
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        return f"sqlite:///{self.data_dir / 'khuluma.db'}"

    def ensure_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "uploads").mkdir(exist_ok=True)

    def updated(self, changes: dict[str, Any]) -> Settings:
        """A validated copy with ``changes`` deep-merged: ``{"speech": {"whisper_model": "x"}, "port": 9000}``."""
        return type(self).model_validate(deep_merge(self.model_dump(), changes))

    def for_replica(self, sections: tuple[str, ...] | None = None) -> dict[str, Any]:
        """What a replica (or a Ray task, or the app builder) is handed: the service-wide fields and the named
        sections (None: all), secrets left out. The receiver reads those from its own environment
        (:meth:`from_bound`), so no secret ever appears in Ray's bind arguments, task arguments or dashboard."""
        top = {
            name
            for name, info in type(self).model_fields.items()
            if not (isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel))
        }
        if sections is None:
            sections = tuple(name for name in type(self).model_fields if name not in top)
        exclude: dict[str, Any] = {name: True for section, name in SECRET_FIELDS if section is None}
        exclude.update({section: {name} for section, name in SECRET_FIELDS if section in sections})
        return self.model_dump(mode="json", include=top | set(sections), exclude=exclude, exclude_none=True)

    @classmethod
    def from_bound(cls, bound: dict[str, Any] | None) -> Settings:
        """A replica's settings: what it was bound with, then its own environment for everything else."""
        return cls(**(bound or {}))

    def secret_env(self) -> dict[str, str]:
        """The secrets as the environment variables a process reads them from (``KHULUMA_S3_SECRET_KEY``)."""
        env = {}
        for section, name in SECRET_FIELDS:
            owner: Any = self if section is None else getattr(self, section)
            value = getattr(owner, name)
            if isinstance(value, SecretStr) and value.get_secret_value():
                env["KHULUMA_" + (f"{section}_{name}" if section else name).upper()] = value.get_secret_value()
        return env

    def secret_values(self) -> list[str]:
        """The plain secret values, for redaction and for the tests that prove they never leak."""
        return list(self.secret_env().values())


def deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes``: a settings section given as a mapping updates that section field by field."""
    return merge_mappings(base, new_section_names(changes), Settings.model_fields)


@lru_cache
def get_settings() -> Settings:
    """The process's settings from its environment (the CLI's entry point; replicas use :meth:`from_bound`)."""
    return Settings()
