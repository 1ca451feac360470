"""Settings that were renamed: a section read under its old name too, with a warning
(:data:`RENAMED_SECTIONS`), in a Serve config's settings and in the ``KHULUMA_*`` variables."""

from __future__ import annotations

import logging
from collections.abc import Container, Mapping
from typing import Any

_log = logging.getLogger("khuluma.settings")
ENV_PREFIX = "KHULUMA_"

# Settings sections that were renamed, old name -> its name now: read under both (environment variables, dotenv
# files, a Serve config's settings), with a warning for the old one.
RENAMED_SECTIONS: dict[str, str] = {"limits": "admission"}


def merge_mappings(
    base: dict[str, Any], changes: dict[str, Any], nested: Container[str] | None = None
) -> dict[str, Any]:
    """``base`` with ``changes``: a key (of ``nested``, or any key) whose old and new values are both mappings is
    updated entry by entry; any other key is replaced. One level deep, as settings sections and Serve's deployment
    options (``ray_actor_options``) are."""
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and (nested is None or key in nested):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def new_section_names(changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` with a renamed section under its name now (see :data:`RENAMED_SECTIONS`), with a warning."""
    if not RENAMED_SECTIONS.keys() & changes.keys():
        return changes
    out: dict[str, Any] = {}
    for key, value in changes.items():
        new = RENAMED_SECTIONS.get(key)
        if new is None:
            out[key] = merge_mappings(out[key], value) if isinstance(out.get(key), dict) else value
            continue
        _log.warning("settings: the section %r is now %r; read as that (rename it)", key, new)
        old = out.get(new)
        out[new] = {**value, **old} if isinstance(value, dict) and isinstance(old, dict) else old or value
    return out


def renamed_variable(name: str) -> str | None:
    """The variable a variable of a renamed section is now (``KHULUMA_LIMITS_LIVE_SESSIONS`` ->
    ``KHULUMA_ADMISSION_LIVE_SESSIONS``, in the case given), else None."""
    upper = name.upper()
    for old, new in RENAMED_SECTIONS.items():
        before = f"{ENV_PREFIX}{old}".upper()
        if upper == before or upper.startswith(before + "_"):
            renamed = f"{ENV_PREFIX}{new}".upper() + upper[len(before) :]
            return renamed if name.isupper() else renamed.lower()
    return None


def with_new_names(env: Mapping[str, str | None]) -> dict[str, str | None]:
    """``env`` with each variable of a renamed section also under its name now, unless that is set too."""
    out = dict(env)
    for name, value in env.items():
        new = renamed_variable(name)
        if new is not None and new not in env:
            out[new] = value
    return out
