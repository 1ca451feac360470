"""Settings that were renamed: a section read under its old name too, its fields under a prefix where it joined
another section, with a warning (:data:`RENAMED_SECTIONS`, :data:`MERGED_MAPS`), in a Serve config's settings and
in the ``KHULUMA_*`` variables."""

from __future__ import annotations

import json
import logging
from collections.abc import Container, Mapping
from typing import Any

_log = logging.getLogger("khuluma.settings")
ENV_PREFIX = "KHULUMA_"

# Settings sections that were renamed, old name -> (its section now, the prefix its fields take there): read under
# both (environment variables, dotenv files, a Serve config's settings), with a warning for the old one.
RENAMED_SECTIONS: dict[str, tuple[str, str]] = {
    "limits": ("admission", ""),
    "whisper": ("speech", "whisper_"),
    "transcription": ("speech", ""),
}
# A map field of a renamed section that joined a map of its new section (old section, field) -> field now: its
# entries are added to that map's, which win where both name a key.
MERGED_MAPS: dict[tuple[str, str], str] = {("whisper", "language_models"): "language_models"}


def _field_now(section: str, field: str) -> str:
    """The name in its section now of a field of the renamed ``section``."""
    return MERGED_MAPS.get((section, field)) or RENAMED_SECTIONS[section][1] + field


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
    """``changes`` with a renamed section under its name now (see :data:`RENAMED_SECTIONS`), its fields renamed and
    its maps merged (:data:`MERGED_MAPS`), with a warning; what the new section sets itself wins."""
    if not RENAMED_SECTIONS.keys() & changes.keys():
        return changes
    out: dict[str, Any] = {key: value for key, value in changes.items() if key not in RENAMED_SECTIONS}
    for key, value in changes.items():
        if key not in RENAMED_SECTIONS:
            continue
        new, prefix = RENAMED_SECTIONS[key]
        _log.warning(
            "settings: the section %r is now %r%s; read as that (rename it)",
            key,
            new,
            f" (its fields prefixed {prefix!r})" if prefix else "",
        )
        current = out.get(new)
        if not isinstance(value, dict) or (current is not None and not isinstance(current, dict)):
            out[new] = current if current is not None else value
            continue
        moved = {_field_now(key, field): item for field, item in value.items()}
        merged = dict(current or {})
        for field, item in moved.items():
            if isinstance(item, dict) and isinstance(merged.get(field), dict):
                merged[field] = {**item, **merged[field]}  # the new map's entries win
            else:
                merged.setdefault(field, item)
        out[new] = merged
    return out


def renamed_variable(name: str) -> str | None:
    """The variable a variable of a renamed section is now (``KHULUMA_LIMITS_LIVE_SESSIONS`` ->
    ``KHULUMA_ADMISSION_LIVE_SESSIONS``, ``KHULUMA_WHISPER_MODEL`` -> ``KHULUMA_SPEECH_WHISPER_MODEL``, in the case
    given), else None."""
    upper = name.upper()
    for old, (new, _prefix) in RENAMED_SECTIONS.items():
        before = f"{ENV_PREFIX}{old}".upper()
        if upper == before:
            renamed = f"{ENV_PREFIX}{new}".upper()
        elif upper.startswith(before + "_"):
            field = _field_now(old, upper[len(before) + 1 :].lower())
            renamed = f"{ENV_PREFIX}{new}_{field}".upper()
        else:
            continue
        return renamed if name.isupper() else renamed.lower()
    return None


def with_new_names(env: Mapping[str, str | None]) -> dict[str, str | None]:
    """``env`` with each variable of a renamed section also under its name now, unless that is set too; a merged
    map's JSON entries added to the new map's (whose entries win)."""
    out = dict(env)
    for name, value in env.items():
        new = renamed_variable(name)
        if new is None:
            continue
        if new not in env:
            out[new] = value
        elif _is_merged_map(name) and value:
            out[new] = _merged_json(value, env[new])
    return out


def _is_merged_map(name: str) -> bool:
    upper = name.upper()
    return any(upper == f"{ENV_PREFIX}{section}_{field}".upper() for section, field in MERGED_MAPS)


def _merged_json(old: str, new: str | None) -> str | None:
    try:
        before, now = json.loads(old), json.loads(new or "{}")
    except ValueError:
        return new  # the settings report the malformed one
    return json.dumps({**before, **now}) if isinstance(before, dict) and isinstance(now, dict) else new
