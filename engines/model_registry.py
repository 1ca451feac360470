"""Installed models: a JSON registry under ``<data_dir>/models/``, downloads, conversion and name resolution.

``<data_dir>/models/registry.json`` maps a model name to ``{capability, path, backend, source, quantization,
added_at}``. ``capability`` is one of translation | whisper | ner | embeddings | sentiment | speech | llm so
every model family is installed and listed the same way (``khuluma models pull|add|list``). ``speech`` is the CTC
speech family (``engines/speech/ctc/``): Omnilingual ASR CTC in sherpa-onnx's ONNX layout (backend
``sherpa-onnx``), MMS with its adapters or a wav2vec2 fine-tune (backend ``transformers``); such a model is
registered as it is, never converted (CTranslate2 would drop MMS's adapters), and validated by
``engines.speech.ctc.layout.inspect``.

- :func:`pull` downloads a Hugging Face repository with ``huggingface_hub`` (progress bars on the terminal) and
  converts it to CTranslate2 (int8 by default) where CTranslate2 can run it.
- :func:`add_local` registers a local CTranslate2 directory as it is, or converts a Hugging Face directory.
- :func:`resolve` turns a setting value (registered name, Hugging Face id of a pulled model, CTranslate2
  directory, Hugging Face directory) into a :class:`ModelEntry`; it never downloads.

Nothing here knows HTTP: failures are :class:`ModelError` with a message meant for the operator.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from contracts.errors import Unavailable
from contracts.installs import install_hint
from engines.speech.ctc import layout as ctc_layout

Capability = Literal["translation", "whisper", "ner", "embeddings", "sentiment", "speech", "llm"]
CAPABILITIES: tuple[str, ...] = ("translation", "whisper", "ner", "embeddings", "sentiment", "speech", "llm")
Backend = Literal["ctranslate2", "transformers", "sherpa-onnx"]
SPEECH = "speech"  # the CTC speech family: registered as downloaded, never converted
REGISTRY_FILE = "registry.json"
LLM_CONTEXT_FILE = "khuluma_llm.json"  # engines.llm.tokenizer.CONTEXT_FILE


class ModelError(Exception):
    """A model cannot be found, downloaded, converted or loaded; the message says what to do."""


# Licences under which a model may not be used commercially: `khuluma models pull` asks for --accept-licence.
NON_COMMERCIAL_LICENCES = ("CC-BY-NC-4.0", "CC-BY-NC-SA-4.0", "CC-BY-NC-ND-4.0", "Qwen-Research")


@dataclass(frozen=True)
class KnownModel:
    """A model `khuluma models pull` knows by a short name: where it comes from, its licence (shown before any
    download) and what its publisher measured (``published``: the figure and its source, never ours)."""

    hf_id: str
    capability: Capability
    licence: str
    note: str = ""
    published: str = ""
    # how `khuluma models pull` installs it: None converts to CTranslate2 where it can, "transformers" keeps the
    # checkpoint (the NER and sentiment classifiers, MMS), "sherpa-onnx" as downloaded (Omnilingual CTC)
    backend: Backend | None = None
    files: tuple[str, ...] = ()  # what to download (where the repository's files exist), instead of the default set
    # the service's languages the model was trained on: where the service routes it (NER, sentiment, speech), or
    # for a language model those it writes well enough to answer in, per its publisher
    languages: tuple[str, ...] = ()
    # its publisher's figure per language (the metric, then (code, value) pairs): on /api/v1/models as published
    published_metric: str = ""
    published_figures: tuple[tuple[str, float], ...] = ()

    def published_figure(self, code: str) -> float | None:
        return dict(self.published_figures).get(code)

    @property
    def non_commercial(self) -> bool:
        return self.licence in NON_COMMERCIAL_LICENCES


# The South African languages (ISO 639-3, as the service and MMS write them) a speech model may cover.
SA_SPEECH_CODES = ("afr", "eng", "nbl", "nso", "sot", "ssw", "tsn", "tso", "ven", "xho", "zul")
# Those Meta's Omnilingual ASR lists among its 1,600+ languages (facebookresearch/omnilingual-asr,
# per_language_results_table_7B_llm_asr.csv: no sot, ssw, ven or nbl).
OMNILINGUAL_SA = ("afr", "eng", "nso", "tsn", "tso", "xho", "zul")
OMNILINGUAL_7B_CER = (("afr", 4.7), ("eng", 3.0), ("nso", 5.3), ("tsn", 6.7), ("tso", 0.8), ("xho", 4.9), ("zul", 17.9))
OMNILINGUAL_METRIC = "CER % of Meta's 7B LLM-ASR model (the CTC models err more; none is published for them)"
OMNILINGUAL_PUBLISHED = (
    "Meta publishes per-language CER only for its 7B LLM-ASR model, not for the CTC models "
    "(facebookresearch/omnilingual-asr, per_language_results_table_7B_llm_asr.csv): afr 4.7, eng 3.0, nso 5.3, "
    "tsn 6.7, tso 0.8, xho 4.9, zul 17.9; a CTC model of 300M or 1B parameters errs more than that"
)

_MASAKHANER_SCORES = (("xho", 0.900), ("tsn", 0.903), ("sna", 0.965))


def _omnilingual(hf_id: str, size: str, parameters: str) -> KnownModel:
    """One of Meta's Omnilingual ASR CTC models in sherpa-onnx's int8 ONNX export."""
    return KnownModel(
        hf_id,
        "speech",
        "Apache-2.0",
        f"{size} (int8 ONNX, sherpa-onnx's export of omniASR_CTC_{parameters}); 1,600+ languages, language-agnostic",
        OMNILINGUAL_PUBLISHED,
        backend="sherpa-onnx",
        files=("model.int8.onnx", "tokens.txt", "README.md", "LICENSE"),
        languages=OMNILINGUAL_SA,
        published_metric=OMNILINGUAL_METRIC,
        published_figures=OMNILINGUAL_7B_CER,
    )


# Short names `khuluma models pull` accepts besides any Hugging Face id. Other capabilities add theirs here.
KNOWN_MODELS: dict[str, KnownModel] = {
    "masakhaner-afroxlmr-large": KnownModel(
        "masakhane/afroxlmr-large-ner-masakhaner-1.0_2.0",
        "ner",
        "AFL-3.0",
        "about 2.2 GB download; XLM-R large token classifier, run by transformers",
        "F1 on the MasakhaNER 2.0 test split (the model's test_result files): xho 0.900, tsn 0.903, sna 0.965",
        languages=("zul", "xho", "tsn", "sna", "swh"),
        published_metric="F1",
        published_figures=_MASAKHANER_SCORES,
        backend="transformers",
    ),
    "afrisenti-afroxlmr-large": KnownModel(
        "Davlan/afrisenti-twitter-sentiment-afroxlmr-large",
        "sentiment",
        "Apache-2.0",
        "about 2.2 GB download; XLM-R large sequence classifier (positive / neutral / negative), run by transformers",
        "trained on AfriSenti tweets in 12 languages (arXiv:2302.08956); its card gives no figure for Xitsonga or "
        "Swahili",
        languages=("tso", "swh"),
        backend="transformers",
    ),
    "madlad400-3b-mt": KnownModel(
        "google/madlad400-3b-mt",
        "translation",
        "Apache-2.0",
        "about 12 GB download, about 3 GB as CTranslate2 int8; commercial use allowed (NLLB's licence forbids it)",
        "FLORES-200 results in the MADLAD-400 paper (arXiv:2309.04662); no per-language figure recorded here",
    ),
    "nllb-200-distilled-600M": KnownModel(
        "facebook/nllb-200-distilled-600M",
        "translation",
        "CC-BY-NC-4.0",
        "about 2.5 GB download, 0.6 GB as CTranslate2 int8",
    ),
    "nllb-200-distilled-1.3B": KnownModel(
        "facebook/nllb-200-distilled-1.3B",
        "translation",
        "CC-BY-NC-4.0",
        "about 5.5 GB download, 1.4 GB as CTranslate2 int8",
    ),
    "nllb-200-1.3B": KnownModel(
        "facebook/nllb-200-1.3B", "translation", "CC-BY-NC-4.0", "about 5.5 GB download, 1.4 GB as CTranslate2 int8"
    ),
    "nllb-200-3.3B": KnownModel(
        "facebook/nllb-200-3.3B", "translation", "CC-BY-NC-4.0", "about 17.6 GB download, 3.3 GB as CTranslate2 int8"
    ),
    # CTC speech (engines/speech/ctc/): Meta's Omnilingual ASR CTC as sherpa-onnx's int8 ONNX export, and MMS.
    "omnilingual-ctc-300m": _omnilingual(
        "csukuangfj2/sherpa-onnx-omnilingual-asr-1600-languages-300M-ctc-int8-2025-11-12", "about 365 MB", "300M"
    ),
    "omnilingual-ctc-1b": _omnilingual(
        "csukuangfj/sherpa-onnx-omnilingual-asr-1600-languages-1B-ctc-int8-2025-11-12", "about 1.03 GB", "1B"
    ),
    "mms-1b-all": KnownModel(
        "facebook/mms-1b-all",
        "speech",
        "CC-BY-NC-4.0",
        "about 3.9 GB (the 1B wav2vec2) plus about 9 MB per language adapter; only the South African languages' "
        "adapters are downloaded",
        "CER per language on FLEURS and on MMS-lab test data in the MMS paper's appendix (Pratap et al. 2023, "
        "'Scaling Speech Technology to 1,000+ Languages', arXiv:2305.13516); the figures are not copied here",
        backend="transformers",
        files=(
            "config.json",
            "preprocessor_config.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "vocab.json",
            "model.safetensors",
            "README.md",
            *(f"adapter.{code}.safetensors" for code in SA_SPEECH_CODES),
        ),
        languages=SA_SPEECH_CODES,
    ),
    # Instruction-tuned language models for the ask and chat routes (`llm`): small enough for a CPU or one GPU.
    "qwen2.5-0.5b-instruct": KnownModel(
        "Qwen/Qwen2.5-0.5B-Instruct",
        "llm",
        "Apache-2.0",
        "about 1 GB download, 0.5 GB as CTranslate2 int8; 32k-token context; fits a CPU",
        languages=("eng", "fra"),
    ),
    "qwen2.5-1.5b-instruct": KnownModel(
        "Qwen/Qwen2.5-1.5B-Instruct",
        "llm",
        "Apache-2.0",
        "about 3.1 GB download, 1.6 GB as CTranslate2 int8; 32k-token context; a CPU (slower) or one GPU",
        languages=("eng", "fra"),
    ),
    "qwen2.5-3b-instruct": KnownModel(
        "Qwen/Qwen2.5-3B-Instruct",
        "llm",
        "Qwen-Research",
        "about 6.2 GB download, 3.1 GB as CTranslate2 int8; 32k-token context; one GPU",
        languages=("eng", "fra"),
    ),
    "llama-3.2-1b-instruct": KnownModel(
        "meta-llama/Llama-3.2-1B-Instruct",
        "llm",
        "Llama-3.2-Community",
        "about 2.5 GB download, 1.3 GB as CTranslate2 int8; 128k-token context; a gated repository (accept Meta's "
        "licence on huggingface.co and log in first)",
        languages=("eng", "fra"),
    ),
    "inkubalm-0.4b": KnownModel(
        "lelapa/InkubaLM-0.4B",
        "llm",
        "CC-BY-NC-4.0",
        "about 0.5 GB download; trained on isiZulu, isiXhosa, Swahili, Hausa and Yoruba with English and French; a "
        "base model, not instruction-tuned (it continues text more than it follows the grounding instruction); "
        "2,048-token context, so few passages fit; converted as Llama (its configuration's model type)",
        languages=("zul", "xho", "swh", "eng", "fra"),
    ),
}

# Files a converted directory keeps from its source (tokenizer, feature extractor), per capability.
COPY_FILES: dict[str, tuple[str, ...]] = {
    "translation": (
        "sentencepiece.bpe.model",
        "spiece.model",  # T5 / MADLAD-400
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ),
    "whisper": ("tokenizer.json", "preprocessor_config.json", "vocabulary.json"),
    # the tokenizer and the chat template (in tokenizer_config.json, or a file of its own in newer repositories)
    "llm": (
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
        "chat_template.jinja",
    ),
}
_WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)


@dataclass(frozen=True)
class ModelEntry:
    name: str
    capability: str
    path: str
    backend: str  # ctranslate2 | transformers | sherpa-onnx
    source: str  # Hugging Face id or the directory it came from
    quantization: str | None = None
    added_at: str = ""


def model_format(path: Path) -> Backend | None:
    """``sherpa-onnx`` for a CTC model in sherpa-onnx's ONNX layout (``model.int8.onnx`` or ``model.onnx`` with
    ``tokens.txt``), ``ctranslate2`` for a converted directory, ``transformers`` for a Hugging Face checkpoint, else
    None."""
    if not path.is_dir():
        return None
    if (path / ctc_layout.TOKENS).is_file() and any((path / f).is_file() for f in ctc_layout.ONNX_MODELS):
        return "sherpa-onnx"
    if (path / "model.bin").is_file() and (path / "config.json").is_file():
        return "ctranslate2"
    if (path / "config.json").is_file() and any((path / f).is_file() for f in _WEIGHT_FILES):
        return "transformers"
    return None


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "model"


class ModelRegistry:
    """The registry file of one data directory; safe against concurrent CLI processes (file lock)."""

    def __init__(self, data_dir: Path | str) -> None:
        self.models_dir = Path(data_dir) / "models"
        self.file = self.models_dir / REGISTRY_FILE

    @contextlib.contextmanager
    def _locked(self, name: str = ".registry.lock") -> Iterator[None]:
        self.models_dir.mkdir(parents=True, exist_ok=True)
        with open(self.models_dir / name, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def conversion_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while a replica converts a checkpoint, so replicas sharing a data dir convert it once."""
        return self._locked(".convert.lock")

    def _read(self) -> dict[str, dict]:
        try:
            return json.loads(self.file.read_text())
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError as exc:
            raise ModelError(f"The model registry {self.file} is not valid JSON ({exc}); fix or remove it.") from exc

    def _write(self, data: dict[str, dict]) -> None:
        tmp = self.file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.file)

    def list(self, capability: str | None = None) -> list[ModelEntry]:
        entries = [
            ModelEntry(name=name, **{k: v for k, v in d.items() if k != "name"})
            for name, d in sorted(self._read().items())
        ]
        return [e for e in entries if capability is None or e.capability == capability]

    def get(self, ref: str, capability: str | None = None) -> ModelEntry | None:
        """By registered name, or by the Hugging Face id / directory it was installed from."""
        entries = self.list(capability)
        for entry in entries:
            if entry.name == ref:
                return entry
        for entry in entries:
            if entry.source == ref:
                return entry
        return None

    def register(self, entry: ModelEntry) -> ModelEntry:
        if entry.capability not in CAPABILITIES:
            raise ModelError(f"Unknown capability {entry.capability!r}; one of {', '.join(CAPABILITIES)}.")
        entry = ModelEntry(
            **{
                **asdict(entry),
                "path": str(Path(entry.path).resolve()),
                "added_at": entry.added_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        with self._locked():
            data = self._read()
            data[entry.name] = {k: v for k, v in asdict(entry).items() if k != "name"}
            self._write(data)
        return entry

    def remove(self, name: str, delete_files: bool = False) -> ModelEntry:
        with self._locked():
            data = self._read()
            if name not in data:
                raise ModelError(f"No model named {name!r} is registered.")
            entry = ModelEntry(name=name, **data.pop(name))
            self._write(data)
        path = Path(entry.path)
        if delete_files and path.is_relative_to(self.models_dir.resolve()):
            shutil.rmtree(path, ignore_errors=True)
        return entry


def convert_to_ctranslate2(
    src: Path, dest: Path, capability: str, quantization: str | None = "int8", force: bool = True
) -> Path:
    """Convert a Hugging Face checkpoint with CTranslate2's TransformersConverter (needs transformers+torch)."""
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError as exc:  # the converter imports transformers and torch
        raise ModelError(
            "Converting a Hugging Face checkpoint to CTranslate2 needs the `transformers` extra: "
            "pip install 'khuluma[transformers]' (or convert elsewhere with ct2-transformers-converter "
            "and `khuluma models add` the result)."
        ) from exc
    copy = [f for f in COPY_FILES.get(capability, ()) if (src / f).is_file()]
    tmp = dest.with_name(dest.name + ".converting")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        TransformersConverter(str(src), copy_files=copy or None).convert(
            str(tmp), quantization=quantization, force=True
        )
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelError(f"CTranslate2 cannot convert {src}: {exc}") from exc
    if capability == "llm":
        _record_context_window(src, tmp)
    if dest.exists():
        if not force:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ModelError(f"{dest} exists already.")
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest


def _record_context_window(src: Path, dest: Path) -> None:
    """A language model's context window (its checkpoint's ``max_position_embeddings``) beside the converted model:
    CTranslate2's own config.json does not keep it (``engines/llm/tokenizer.py`` reads it)."""
    try:
        window = json.loads((src / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return
    if isinstance(window, int) and window > 0:
        (dest / LLM_CONTEXT_FILE).write_text(json.dumps({"context_window": window}) + "\n")


def add_local(
    registry: ModelRegistry,
    path: Path,
    name: str | None = None,
    capability: str = "translation",
    quantization: str | None = "int8",
    convert: bool = True,
    source: str | None = None,
) -> ModelEntry:
    """Register a local directory: CTranslate2 as is; Hugging Face converted into ``models/<name>``.

    With ``convert=False``, or when CTranslate2 has no converter for the architecture, the Hugging Face directory
    is registered for the ``transformers`` backend instead.
    """
    path = Path(path).expanduser().resolve()
    if capability == SPEECH:
        return add_speech(registry, path, name, source)
    fmt = model_format(path)
    if fmt is None:
        raise ModelError(
            f"{path} is neither a CTranslate2 model directory (model.bin + config.json) nor a "
            f"Hugging Face checkpoint (config.json + model weights)."
        )
    name = safe_name(name or path.name)
    source = source or str(path)
    if fmt == "ctranslate2":
        return registry.register(ModelEntry(name, capability, str(path), "ctranslate2", source))
    if convert:
        dest = registry.models_dir / name
        if dest.resolve() == path:
            raise ModelError(f"{path} is where the converted model would go; pass another --name.")
        try:
            convert_to_ctranslate2(path, dest, capability, quantization)
            return registry.register(ModelEntry(name, capability, str(dest), "ctranslate2", source, quantization))
        except ModelError as exc:
            if "No conversion is registered" not in str(exc):
                raise
    return registry.register(ModelEntry(name, capability, str(path), "transformers", source))


def speech_layout(path: Path) -> ctc_layout.Layout:
    """The CTC layout of a speech model directory, or :class:`ModelError` saying what it must hold."""
    try:
        return ctc_layout.inspect(path)
    except Unavailable as exc:
        raise ModelError(exc.detail) from None


def add_speech(registry: ModelRegistry, path: Path, name: str | None = None, source: str | None = None) -> ModelEntry:
    """Register a local CTC speech model as it is (its runtime is the backend); nothing is converted or copied."""
    path = Path(path).expanduser().resolve()
    layout = speech_layout(path)
    entry = ModelEntry(safe_name(name or path.name), SPEECH, str(path), layout.runtime, source or str(path))
    return registry.register(entry)


def _download_patterns(repo_id: str, revision: str | None) -> list[str]:
    """Config, tokenizer (and chat template) and ONE copy of the weights (safetensors preferred over .bin)."""
    from huggingface_hub import HfApi

    files = [s.rfilename for s in HfApi().model_info(repo_id, revision=revision).siblings or []]
    weights = (
        ["*.safetensors", "*.safetensors.index.json"]
        if any(f.endswith(".safetensors") for f in files)
        else ["*.bin", "*.bin.index.json"]
    )
    return ["*.json", "*.model", "*.txt", "*.tiktoken", "*.jinja", *weights]  # .jinja: a chat template's own file


def _listed_files(known: KnownModel, repo_id: str, revision: str | None) -> list[str]:
    """The catalogue entry's files that the repository has (an MMS adapter Meta did not train is simply absent)."""
    from huggingface_hub import HfApi

    present = {s.rfilename for s in HfApi().model_info(repo_id, revision=revision).siblings or []}
    wanted = [f for f in known.files if f in present]
    if "model.safetensors" in known.files and "model.safetensors" not in present and "pytorch_model.bin" in present:
        wanted.append("pytorch_model.bin")
    return wanted


def catalogued(ref: str) -> KnownModel | None:
    """The catalogue entry named ``ref`` by its short name or its Hugging Face id."""
    return KNOWN_MODELS.get(ref) or next((k for k in KNOWN_MODELS.values() if k.hf_id == ref), None)


def check_licence(ref: str, accept_licence: bool) -> KnownModel | None:
    """The catalogue entry of ``ref`` (None for a plain Hugging Face id), or :class:`ModelError` when its licence
    forbids commercial use and ``accept_licence`` was not given: nothing is downloaded before that is settled."""
    known = catalogued(ref)
    if known is not None and known.non_commercial and not accept_licence:
        raise ModelError(
            f"{ref} ({known.hf_id}) is licensed {known.licence}: no commercial use. Pass --accept-licence to "
            f"confirm that your use is allowed under it."
        )
    return known


def pull(
    registry: ModelRegistry,
    ref: str,
    name: str | None = None,
    capability: str | None = None,
    quantization: str | None = "int8",
    backend: Backend | None = None,
    revision: str | None = None,
    keep_download: bool = False,
    accept_licence: bool = False,
) -> ModelEntry:
    """Download ``ref`` (a short name of :data:`KNOWN_MODELS` or a Hugging Face id), convert and register it. A
    catalogue model under a non-commercial licence needs ``accept_licence`` (:func:`check_licence`); ``backend``
    unset: the catalogue's (transformers for the NER and sentiment classifiers), else ctranslate2."""
    known = check_licence(ref, accept_licence)
    backend = backend or (known.backend if known and known.backend else "ctranslate2")
    repo_id = known.hf_id if known else ref
    capability = capability or (known.capability if known else "translation")
    if "/" not in repo_id:
        raise ModelError(
            f"Unknown model {ref!r}: give a Hugging Face id (owner/name) or one of {', '.join(KNOWN_MODELS)}."
        )
    # a catalogue model is registered under its short name, which the settings may then name
    name = safe_name(name or (ref if ref in KNOWN_MODELS else repo_id.rsplit("/", 1)[-1]))
    download_dir = registry.models_dir / ".downloads" / safe_name(repo_id.replace("/", "--"))
    try:
        from huggingface_hub import snapshot_download

        if known is not None and known.files:
            patterns = _listed_files(known, repo_id, revision)
        elif capability == SPEECH:  # any other speech repository: no ONNX data files or adapters beyond these
            patterns = [*_download_patterns(repo_id, revision), "*.onnx"]
        else:
            patterns = _download_patterns(repo_id, revision)
        snapshot_download(repo_id, revision=revision, local_dir=download_dir, allow_patterns=patterns)
    except Exception as exc:  # offline, unknown repo, gated repo, disk full ...
        raise ModelError(
            f"Could not download {repo_id} from Hugging Face: {type(exc).__name__}: {str(exc)[:300]}. "
            f"If this machine is offline, download it on a machine with access (`hf download {repo_id} "
            f"--local-dir {name}`), copy the directory here and run `khuluma models add <dir> --name {name}`."
        ) from exc
    if capability == SPEECH:  # used as downloaded: checked, moved under its name, registered with its runtime
        layout = speech_layout(download_dir)
        dest = registry.models_dir / name
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(download_dir, dest)
        return registry.register(ModelEntry(name, SPEECH, str(dest), layout.runtime, repo_id))
    if backend == "transformers":
        dest = registry.models_dir / name
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(download_dir, dest)
        return registry.register(ModelEntry(name, capability, str(dest), "transformers", repo_id))
    entry = add_local(registry, download_dir, name, capability, quantization, convert=True, source=repo_id)
    if entry.backend == "transformers":  # CTranslate2 cannot run it: keep the checkpoint under its name
        dest = registry.models_dir / name
        os.replace(download_dir, dest)
        entry = registry.register(ModelEntry(name, capability, str(dest), "transformers", repo_id))
    elif not keep_download:
        shutil.rmtree(download_dir, ignore_errors=True)
    return entry


def resolve(
    registry: ModelRegistry, ref: str, capability: str = "translation", prefer: Backend = "ctranslate2"
) -> ModelEntry:
    """Find the model a setting names. Never downloads; a Hugging Face directory is converted (once) and
    registered, unless ``prefer`` is ``transformers``."""
    known = KNOWN_MODELS.get(ref)
    entry = registry.get(ref, capability) or (registry.get(known.hf_id, capability) if known else None)
    if entry is not None:
        if model_format(Path(entry.path)) is None:
            raise ModelError(
                f"Model {entry.name!r} is registered at {entry.path}, but no model is there any "
                f"more. Reinstall it: {install_hint(capability)}."
            )
        return entry
    path = Path(ref).expanduser()
    if capability == SPEECH:  # never converted: a CTC directory is used as it is
        layout = speech_layout(path) if path.exists() else None
        if layout is not None:
            return ModelEntry(path.resolve().name, SPEECH, str(path.resolve()), layout.runtime, str(path.resolve()))
    fmt = model_format(path)
    if fmt in ("ctranslate2", "sherpa-onnx") or (fmt == "transformers" and prefer == "transformers"):
        return ModelEntry(path.resolve().name, capability, str(path.resolve()), fmt, str(path.resolve()))
    if fmt == "transformers":
        source = str(path.resolve())
        with registry.conversion_lock():
            for existing in registry.list(capability):  # converted before (maybe by another replica)
                if existing.source == source and model_format(Path(existing.path)):
                    return existing
            name = safe_name(path.resolve().name)
            if registry.get(name) is not None:
                name = f"{name}-{hashlib.sha1(source.encode()).hexdigest()[:8]}"
            return add_local(registry, path, name, capability)
    if path.exists():
        raise ModelError(
            f"{path} is not a model directory (expected a CTranslate2 model.bin or a Hugging Face checkpoint)."
        )
    installed = ", ".join(e.name for e in registry.list(capability)) or "none"
    how = (
        f"`khuluma models pull {ref}`, then restart or redeploy the service"
        if "/" in ref or ref in KNOWN_MODELS
        else install_hint(capability)
    )
    raise ModelError(
        f"Model {ref!r} is not installed (installed {capability} models: {installed}; "
        f"registry {registry.file}). Install it: {how}."
    )
