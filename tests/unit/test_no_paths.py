"""No model that crosses between processes carries a filesystem path: on a cluster the ingress, the replicas and
the Ray tasks share no disk. Every pydantic model in ``contracts/`` (what typed handles send and return) is
checked, field by field, recursively."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from pathlib import PurePath

from pydantic import BaseModel

import contracts
from contracts.settings import Settings

PATHLIKE_NAMES = ("path", "file_path", "filepath", "local_path", "dir", "directory", "folder")


def _models() -> list[type[BaseModel]]:
    found = []
    for info in pkgutil.iter_modules(contracts.__path__):
        module = importlib.import_module(f"contracts.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseModel) and obj.__module__ == module.__name__ and not _is_settings(obj):
                found.append(obj)
    return found


def _is_settings(cls: type) -> bool:  # the settings tree names directories on purpose; it is not sent in calls
    return issubclass(cls, Settings) or cls.__module__ == "contracts.settings"


def _types(annotation: object) -> list[object]:
    args = typing.get_args(annotation)
    return [annotation, *[t for a in args for t in _types(a)]]


def test_no_contract_model_carries_a_path() -> None:
    models = _models()
    assert len(models) > 20  # the check really looks at the contracts
    offenders = []
    for model in models:
        for name, field in model.model_fields.items():
            if name.lower() in PATHLIKE_NAMES or name.lower().endswith("_path"):
                offenders.append(f"{model.__name__}.{name}")
            for t in _types(field.annotation):
                if isinstance(t, type) and issubclass(t, PurePath):
                    offenders.append(f"{model.__name__}.{name}: {t.__name__}")
    assert not offenders, f"paths between processes: {offenders}"
