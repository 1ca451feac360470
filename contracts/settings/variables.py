"""Unknown ``KHULUMA_*`` environment variables, reported at start with the setting that was meant.

A misspelt or renamed variable is ignored by the settings (``contracts/settings/``), so a service would run
without the setting its operator believes set. ``khuluma serve`` prints one line per unknown name before it starts
anything, and each replica logs the same lines once as it starts (:func:`report_setting_warnings`); they never stop
the service. The names come from the settings' model tree (:func:`setting_variables`), so a new setting needs no
entry here; the project's other ``KHULUMA_*`` variables are :data:`NOT_SETTINGS`, and the flat names of before the
settings were nested per capability are :data:`RENAMED_VARIABLES`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping

from pydantic import BaseModel

from contracts.settings.renames import ENV_PREFIX, renamed_variable
from contracts.settings.service import SECRETS_FILE_ENV, Settings

# KHULUMA_* variables the project reads that are not settings: never reported as unknown.
NOT_SETTINGS: dict[str, str] = {
    SECRETS_FILE_ENV: "the dotenv file with the secrets, read by every process (Settings' own sources)",
    "KHULUMA_TOKEN": "the token of the `khuluma` client commands (khuluma/cli/client.py, stream.py)",
    "KHULUMA_URL": "the service URL of the `khuluma` client commands",
    "KHULUMA_SAS_TOKEN": "the batch upload credential of `khuluma batch upload|env`",
    "KHULUMA_BATCH_URI": "exported by `khuluma batch env` for `aws s3 cp` (docs/batch.md)",
    "KHULUMA_PLAYGROUND_SCREENSHOTS": "where the playground's browser tests keep a picture of each page",
}

# Settings that were renamed, old variable -> its name now: the flat names from before the settings were nested
# per capability (the old names of a renamed section, such as KHULUMA_WHISPER_MODEL, are read too: renames.py).
RENAMED_VARIABLES: dict[str, str] = {
    "KHULUMA_MAX_TEXT_TOKENS": "KHULUMA_TEXT_MAX_TOKENS",
    "KHULUMA_CLASSIFY_ENABLED": "KHULUMA_TEXT_CLASSIFY_ENABLED",
    "KHULUMA_NER_MODEL": "KHULUMA_TEXT_NER_MODEL",
    "KHULUMA_MAX_TRANSLATION_WORDS": "KHULUMA_TRANSLATION_MAX_WORDS",
    "KHULUMA_EMBEDDING_MODEL": "KHULUMA_EMBEDDINGS_MODEL",
    "KHULUMA_CHROMA_URL": "KHULUMA_SEARCH_CHROMA_URL",
    "KHULUMA_MAX_DOCUMENT_MB": "KHULUMA_SEARCH_MAX_DOCUMENT_MB",
    "KHULUMA_KNOWLEDGE_CHROMA_PATH": "KHULUMA_SEARCH_CHROMA_PATH",
    "KHULUMA_KNOWLEDGE_LOCK_WAIT_SECONDS": "KHULUMA_SEARCH_LOCK_WAIT_SECONDS",
    "KHULUMA_TRANSCRIBE_WINDOW_SECONDS": "KHULUMA_SPEECH_WINDOW_SECONDS",
    "KHULUMA_SYNC_TIMEOUT_SECONDS": "KHULUMA_SPEECH_SYNC_TIMEOUT_SECONDS",
    "KHULUMA_FAST_TIMEOUT_SECONDS": "KHULUMA_SPEECH_FAST_TIMEOUT_SECONDS",
    "KHULUMA_DIARISATION_THRESHOLD": "KHULUMA_SPEECH_DIARISATION_THRESHOLD",
    "KHULUMA_JOB_CONCURRENCY": "KHULUMA_JOBS_CONCURRENCY",
    "KHULUMA_JOB_LEASE_SECONDS": "KHULUMA_JOBS_LEASE_SECONDS",
    "KHULUMA_JOB_MAX_ATTEMPTS": "KHULUMA_JOBS_MAX_ATTEMPTS",
    "KHULUMA_JOB_POLL_SECONDS": "KHULUMA_JOBS_POLL_SECONDS",
    "KHULUMA_WEBHOOK_RETRY_SECONDS": "KHULUMA_WEBHOOKS_RETRY_SECONDS",
    "KHULUMA_WEBHOOK_ALLOW_PRIVATE": "KHULUMA_WEBHOOKS_ALLOW_PRIVATE",
    "KHULUMA_WEBHOOK_BACKOFF_SECONDS": "KHULUMA_WEBHOOKS_BACKOFF_SECONDS",
    "KHULUMA_WEBHOOK_BACKOFF_MAX_SECONDS": "KHULUMA_WEBHOOKS_BACKOFF_MAX_SECONDS",
    "KHULUMA_WEBHOOK_TIMEOUT_SECONDS": "KHULUMA_WEBHOOKS_TIMEOUT_SECONDS",
}


def setting_variables() -> frozenset[str]:
    """Every environment variable a setting reads, from the model tree: ``KHULUMA_<FIELD>`` for the service-wide
    fields, ``KHULUMA_<SECTION>_<FIELD>`` for each field of a section, and ``KHULUMA_<SECTION>`` (the whole section
    as JSON). A field that holds a mapping or a list (``speech.language_models``) is one variable, given as JSON."""
    names: set[str] = set()
    for name, info in Settings.model_fields.items():
        names.add(f"{ENV_PREFIX}{name}".upper())
        section = info.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            names.update(f"{ENV_PREFIX}{name}_{inner}".upper() for inner in section.model_fields)
    return frozenset(names)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``KHULUMA_*`` variables of ``environ`` that no setting reads and the project does not use otherwise
    (:data:`NOT_SETTINGS`): typos, or names from before a rename (:data:`RENAMED_VARIABLES`). Sorted; names are
    matched without regard to case, as the settings read them."""
    known = setting_variables() | NOT_SETTINGS.keys()
    return sorted(key for key in environ if key.upper().startswith(ENV_PREFIX) and key.upper() not in known)


def setting_warnings(environ: Mapping[str, str]) -> list[str]:
    """One line per unknown ``KHULUMA_*`` variable (:func:`unknown_variables`), naming what to set instead: the
    new name of a renamed setting, else the nearest known name (``difflib``; only one close enough to be a typo),
    e.g. ``KHULUMA_WEBHOOK_ALLOW_PRIVATE is not a setting (renamed: KHULUMA_WEBHOOKS_ALLOW_PRIVATE)``. The service
    starts anyway: an unknown variable is ignored."""
    candidates = sorted(name.removeprefix(ENV_PREFIX) for name in setting_variables() | NOT_SETTINGS.keys())
    lines = []
    for key in unknown_variables(environ):
        name = key.upper()
        if name in RENAMED_VARIABLES:
            hint = f"renamed: {RENAMED_VARIABLES[name]}"
        elif (now := renamed_variable(name)) is not None and now in setting_variables():
            lines.append(f"{key} is an old name of {now}: still read as that; rename it")
            continue
        elif close := difflib.get_close_matches(name.removeprefix(ENV_PREFIX), candidates, n=1, cutoff=0.6):
            hint = f"did you mean {ENV_PREFIX}{close[0]}?"
        else:
            hint = "no setting has a similar name; they are listed in contracts/settings/"
        lines.append(f"{key} is not a setting ({hint})")
    return lines


_reported: set[str] = set()


def report_setting_warnings(report: Callable[[str], object], environ: Mapping[str, str] | None = None) -> list[str]:
    """Hands each :func:`setting_warnings` line of ``environ`` (default: this process's environment) to ``report``
    once per process: the replicas call it as they start, and a process that builds several (Serve's local testing
    mode) or rebuilds one says it once. Returns the lines handed over."""
    lines = [line for line in setting_warnings(os.environ if environ is None else environ) if line not in _reported]
    _reported.update(lines)
    for line in lines:
        report(line)
    return lines
