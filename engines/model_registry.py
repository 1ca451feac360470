"""The names of ``engines/models/`` that ``engines/llm/tokenizer.py`` and ``deployments/llm.py`` still import from
here. TODO(merge): once those two files import from ``engines.models`` (they belong to the knowledge-base branch
of issue #45, which this branch leaves alone), delete this module."""

from engines.models.catalogue import catalogued
from engines.models.install import LLM_CONTEXT_FILE
from engines.models.registry import ModelEntry, ModelError, ModelRegistry
from engines.models.resolve import resolve

__all__ = ["LLM_CONTEXT_FILE", "ModelEntry", "ModelError", "ModelRegistry", "catalogued", "resolve"]
