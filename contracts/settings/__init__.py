"""All configuration, one pydantic-settings tree: ``KHULUMA_`` environment variables (or a ``.env`` file).

Nested per capability: ``settings.speech.whisper_model`` is ``KHULUMA_SPEECH_WHISPER_MODEL`` (the section name,
``_``, the field name), ``settings.search.chunk_chars`` is ``KHULUMA_SEARCH_CHUNK_CHARS``. Service-wide fields
sit at the top (``KHULUMA_DATA_DIR``).

**Secrets** (:data:`SECRET_FIELDS`, typed ``SecretStr``) never travel through Ray: the app builder hands each
replica only the non-secret sections it needs (:meth:`Settings.for_replica`), and every process reads secrets from
its own environment or from the dotenv file named by ``KHULUMA_SECRETS_FILE`` (the operator provides it on every
node).

One module per capability holds its section (``text.py``, ``translation.py``, ``search.py``, ``llm.py``,
``speech.py``, ``jobs.py``, ``batch.py``, ``admission.py``); ``service.py`` the tree itself and the service-wide
fields; ``renames.py`` the sections and fields read under an old name too; ``variables.py`` reports the ``KHULUMA_*``
variables that no setting reads. Everything is imported from here: ``from contracts.settings import Settings``.
"""

from contracts.settings.admission import AdmissionSettings
from contracts.settings.batch import BatchSettings, S3Settings
from contracts.settings.jobs import JobsSettings, WebhooksSettings
from contracts.settings.llm import LLMSettings
from contracts.settings.renames import (
    ENV_PREFIX,
    RENAMED_SECTIONS,
    merge_mappings,
    new_section_names,
    renamed_variable,
    with_new_names,
)
from contracts.settings.search import SearchSettings
from contracts.settings.service import SECRET_FIELDS, SECRETS_FILE_ENV, Settings, deep_merge, get_settings
from contracts.settings.speech import SpeechSettings, WhisperSettings
from contracts.settings.text import EmbeddingsSettings, TextSettings
from contracts.settings.translation import TranslationSettings

__all__ = [
    "ENV_PREFIX",
    "RENAMED_SECTIONS",
    "SECRETS_FILE_ENV",
    "SECRET_FIELDS",
    "AdmissionSettings",
    "BatchSettings",
    "EmbeddingsSettings",
    "JobsSettings",
    "LLMSettings",
    "S3Settings",
    "SearchSettings",
    "Settings",
    "SpeechSettings",
    "TextSettings",
    "TranslationSettings",
    "WebhooksSettings",
    "WhisperSettings",
    "deep_merge",
    "get_settings",
    "merge_mappings",
    "new_section_names",
    "renamed_variable",
    "with_new_names",
]
