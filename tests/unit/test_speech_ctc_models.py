"""CTC speech models in the model registry and `khuluma models` (capability ``speech``): local directories are
registered as they are (never converted), their layout checked, the routing setting printed; the catalogue's
speech entries carry licence, published figures and the files a pull takes; nothing is downloaded here."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from engines.models import install
from engines.models.catalogue import KNOWN_MODELS, check_licence
from engines.models.install import add_local
from engines.models.registry import ModelError, ModelRegistry, model_format
from engines.models.resolve import resolve
from engines.speech.ctc.recognizer import CTCRecognizer
from tests.speech_models import TinyCTCModels, session_ctc_models
from tests.tools import khuluma_models

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ctc_models(tmp_path_factory: pytest.TempPathFactory) -> TinyCTCModels:
    return session_ctc_models(tmp_path_factory)


def test_speech_layouts_are_registered_as_they_are(ctc_models, tmp_path: Path):
    assert model_format(ctc_models.omnilingual) == "sherpa-onnx"
    assert model_format(ctc_models.mms) == "transformers"
    registry = ModelRegistry(tmp_path)
    omni = add_local(registry, ctc_models.omnilingual, name="omni", capability="speech")
    mms = add_local(registry, ctc_models.mms, capability="speech")
    assert (omni.backend, omni.capability, Path(omni.path)) == ("sherpa-onnx", "speech", ctc_models.omnilingual)
    assert (mms.name, mms.backend, Path(mms.path)) == ("mms", "transformers", ctc_models.mms)  # not converted
    assert not (tmp_path / "models" / "mms").exists()
    assert resolve(registry, "omni", "speech") == omni
    by_path = resolve(registry, str(ctc_models.finetune), "speech")
    assert (by_path.backend, Path(by_path.path)) == ("transformers", ctc_models.finetune)
    assert CTCRecognizer(resolve(registry, "mms", "speech").path).languages == {"zul", "xho"}
    with pytest.raises(ModelError, match="not a CTC speech model directory"):
        add_local(registry, tmp_path, capability="speech")
    with pytest.raises(ModelError, match=r"khuluma models pull omnilingual-ctc-300m"):
        resolve(registry, "not-installed", "speech")


def test_cli_add_prints_how_to_route_languages(ctc_models, tmp_path: Path):
    added = khuluma_models(tmp_path, "add", str(ctc_models.mms), "--capability", "speech", "--name", "tiny-mms")
    assert added.returncode == 0, added.stderr + added.stdout
    out = " ".join(added.stdout.split())
    assert "Installed tiny-mms (speech, transformers)" in out
    assert """KHULUMA_SPEECH_LANGUAGE_MODELS='{"xho": "tiny-mms", "zul": "tiny-mms"}'""" in out
    omni = khuluma_models(tmp_path, "add", str(ctc_models.omnilingual), "--capability", "speech", "--name", "omni")
    assert omni.returncode == 0 and "language-agnostic" in omni.stdout
    assert """KHULUMA_SPEECH_LANGUAGE_MODELS='{"zul": "omni"}'""" in " ".join(omni.stdout.split())
    listing = khuluma_models(tmp_path, "list", "--capability", "speech")
    assert listing.returncode == 0 and "tiny-mms" in listing.stdout and "sherpa-onnx" in listing.stdout
    assert "mms-1b-all" in listing.stdout and "omnilingual-ctc-300m" in listing.stdout
    bad = khuluma_models(tmp_path, "add", str(tmp_path), "--capability", "speech")
    assert bad.returncode == 1 and "tokens.txt" in " ".join(bad.stdout.split())


def test_cli_pull_shows_the_licence_first_and_never_works_offline(tmp_path: Path):
    refused = khuluma_models(tmp_path, "pull", "mms-1b-all", HF_HUB_OFFLINE="1")
    out = " ".join(refused.stdout.split())
    assert refused.returncode == 1 and "CC-BY-NC-4.0" in out and "--accept-licence" in out
    assert "Could not download" not in out and "arXiv:2305.13516" in out  # the published source, before any download
    offline = khuluma_models(tmp_path, "pull", "omnilingual-ctc-300m", HF_HUB_OFFLINE="1")
    out = " ".join(offline.stdout.split())
    assert offline.returncode == 1 and "Apache-2.0" in out and "zul 17.9" in out
    assert "Could not download csukuangfj2/sherpa-onnx-omnilingual-asr-1600-languages-300M-ctc-int8" in out


def test_catalogue_speech_entries():
    omni, big, mms = (KNOWN_MODELS[k] for k in ("omnilingual-ctc-300m", "omnilingual-ctc-1b", "mms-1b-all"))
    assert {omni.capability, big.capability, mms.capability} == {"speech"}
    assert (omni.backend, mms.backend) == ("sherpa-onnx", "transformers")
    assert not omni.non_commercial and mms.non_commercial
    assert check_licence("omnilingual-ctc-1b", accept_licence=False) is big
    with pytest.raises(ModelError, match="--accept-licence"):
        check_licence("facebook/mms-1b-all", accept_licence=False)
    assert set(omni.languages) == {"afr", "eng", "nso", "tsn", "tso", "xho", "zul"}
    assert "model.int8.onnx" in omni.files and "tokens.txt" in omni.files
    assert all(f"adapter.{c}.safetensors" in mms.files for c in ("zul", "xho", "nso", "tsn", "tso", "ssw", "ven"))
    assert not any(f.startswith("adapter.") and f.split(".")[1] not in mms.languages for f in mms.files)


def test_a_pull_takes_only_the_files_the_repository_has(monkeypatch: pytest.MonkeyPatch):
    files = ["config.json", "vocab.json", "pytorch_model.bin", "adapter.zul.safetensors", "adapter.fra.safetensors"]

    class Api:
        def model_info(self, repo_id: str, revision: str | None = None) -> SimpleNamespace:
            return SimpleNamespace(siblings=[SimpleNamespace(rfilename=f) for f in files])

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    wanted = install._listed_files(KNOWN_MODELS["mms-1b-all"], "facebook/mms-1b-all", None)
    assert sorted(wanted) == ["adapter.zul.safetensors", "config.json", "pytorch_model.bin", "vocab.json"]
