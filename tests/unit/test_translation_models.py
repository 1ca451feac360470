"""Model registry, resolution of the `translation_model` setting and `khuluma models ...` on tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.models.install import add_local
from engines.models.registry import ModelEntry, ModelError, ModelRegistry, model_format
from engines.models.resolve import resolve
from tests.tools import khuluma_models

ROOT = Path(__file__).resolve().parents[2]


def test_formats_are_recognised(tiny_nllb, tmp_path: Path):
    assert model_format(tiny_nllb.hf) == "transformers"
    assert model_format(tiny_nllb.ct2) == "ctranslate2"
    assert model_format(tmp_path) is None
    assert (tiny_nllb.ct2 / "sentencepiece.bpe.model").is_file()  # the tokenizer travels with the conversion


def test_add_registers_ctranslate2_dir_and_converts_hf_dir(tiny_nllb, tmp_path: Path):
    registry = ModelRegistry(tmp_path)
    ct2 = add_local(registry, tiny_nllb.ct2, name="tiny")
    assert ct2.backend == "ctranslate2" and Path(ct2.path) == tiny_nllb.ct2.resolve()
    converted = add_local(registry, tiny_nllb.hf, name="tiny-int8")
    assert converted.backend == "ctranslate2" and converted.quantization == "int8"
    assert Path(converted.path) == (tmp_path / "models" / "tiny-int8").resolve()
    assert model_format(Path(converted.path)) == "ctranslate2"
    assert json.loads((Path(converted.path) / "config.json").read_text())["decoder_start_token"] == "</s>"
    hf = add_local(registry, tiny_nllb.hf, name="tiny-hf", convert=False)
    assert hf.backend == "transformers"
    data = json.loads((tmp_path / "models" / "registry.json").read_text())
    assert set(data) == {"tiny", "tiny-int8", "tiny-hf"}
    assert data["tiny-int8"]["source"] == str(tiny_nllb.hf.resolve())
    assert data["tiny"]["capability"] == "translation"
    assert registry.get(str(tiny_nllb.hf.resolve())).name in ("tiny-int8", "tiny-hf")
    registry.remove("tiny-int8", delete_files=True)
    assert not Path(converted.path).exists() and registry.get("tiny-int8") is None
    with pytest.raises(ModelError, match="neither"):
        add_local(registry, tmp_path, name="nothing")
    with pytest.raises(ModelError, match="capability"):
        registry.register(ModelEntry("x", "poetry", str(tiny_nllb.ct2), "ctranslate2", "x"))


def test_resolve_setting_values(tiny_nllb, tmp_path: Path):
    registry = ModelRegistry(tmp_path)
    add_local(registry, tiny_nllb.ct2, name="tiny")
    assert resolve(registry, "tiny").path == str(tiny_nllb.ct2.resolve())
    assert resolve(registry, str(tiny_nllb.ct2)).backend == "ctranslate2"
    assert resolve(registry, str(tiny_nllb.hf), prefer="transformers").backend == "transformers"
    converted = resolve(registry, str(tiny_nllb.hf))  # an HF directory is converted once and registered
    assert converted.backend == "ctranslate2" and registry.get(converted.name) is not None
    assert resolve(registry, str(tiny_nllb.hf)).path == converted.path
    with pytest.raises(ModelError) as missing:
        resolve(registry, "facebook/nllb-200-distilled-600M")
    assert "khuluma models pull facebook/nllb-200-distilled-600M" in str(missing.value)
    assert "tiny" in str(missing.value)  # lists what is installed
    with pytest.raises(ModelError, match="KHULUMA_TRANSLATION_MODEL"):
        resolve(registry, "no-such-model")


def test_registered_model_whose_files_vanished(tiny_nllb, tmp_path: Path):
    registry = ModelRegistry(tmp_path)
    registry.register(ModelEntry("gone", "translation", str(tmp_path / "gone"), "ctranslate2", "x"))
    with pytest.raises(ModelError, match="no model is there"):
        resolve(registry, "gone")


def test_cli_add_list_and_offline_pull(tiny_nllb, tmp_path: Path):
    added = khuluma_models(tmp_path, "add", str(tiny_nllb.hf), "--name", "tiny")
    assert added.returncode == 0, added.stderr + added.stdout
    assert "KHULUMA_TRANSLATION_MODEL=tiny" in added.stdout
    assert model_format(tmp_path / "models" / "tiny") == "ctranslate2"
    listing = khuluma_models(tmp_path, "list")
    assert listing.returncode == 0 and "tiny" in listing.stdout and "ctranslate2" in listing.stdout
    assert "facebook/nllb-200-distilled-600M" in listing.stdout  # what can be pulled
    unaccepted = khuluma_models(tmp_path, "pull", "nllb-200-distilled-600M", HF_HUB_OFFLINE="1")
    assert unaccepted.returncode == 1
    out = " ".join(unaccepted.stdout.split())
    assert "CC-BY-NC-4.0" in out and "--accept-licence" in out and "Could not download" not in out
    offline = khuluma_models(tmp_path, "pull", "nllb-200-distilled-600M", "--accept-licence", HF_HUB_OFFLINE="1")
    assert offline.returncode == 1
    out = " ".join(offline.stdout.split())
    assert "Could not download facebook/nllb-200-distilled-600M" in out and "khuluma models add" in out
    bad = khuluma_models(tmp_path, "add", str(tmp_path / "nowhere"))
    assert bad.returncode == 1 and "neither" in " ".join(bad.stdout.split())
