"""The catalogue: models `khuluma models pull` knows by a short name, with where each comes from, its licence
(shown before any download; a non-commercial one needs ``--accept-licence``) and what its publisher measured."""

from __future__ import annotations

from dataclasses import dataclass

from engines.models.registry import Backend, Capability, ModelError

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
    # CTC speech (engines/speech/ctc.py): Meta's Omnilingual ASR CTC as sherpa-onnx's int8 ONNX export, and MMS.
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
