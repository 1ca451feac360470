"""Any Hugging Face token-classification model (e.g. an XLM-R fine-tuned on MasakhaNER), configured by id or
directory (``text.ner_model``; needs the ``transformers`` extra)."""

from __future__ import annotations

import threading
import warnings

from engines.text.ner.entities import Entity, entity_at


class TransformersNER:
    """A Hugging Face token-classification model run by transformers' own ``token-classification`` pipeline:
    windows of ``max_length`` tokens overlapping by ``stride`` over long texts, one tag per word (its first
    sub-token, ``aggregation_strategy="first"``), B-/I- tags grouped into entities. Where windows overlap the
    pipeline keeps the longest of the overlapping entities, so an entity longer than the overlap can come out
    cut at a window's edge (the service sends sentences: ``EntityRecogniser.recognise_routed``)."""

    def __init__(self, model: str, device: str | None = None, max_length: int = 512, stride: int = 64) -> None:
        from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

        tokenizer = AutoTokenizer.from_pretrained(model)
        if not getattr(tokenizer, "is_fast", False):  # the pipeline needs offsets for windows and words
            raise ValueError(f"NER model {model!r} needs a fast tokenizer (for character offsets)")
        # the pipeline cuts windows at the tokenizer's model_max_length
        self.max_length = min(max_length, int(getattr(tokenizer, "model_max_length", max_length) or max_length))
        tokenizer.model_max_length = self.max_length
        # windows overlap by `stride` tokens; it must stay below the window's content length
        content = self.max_length - tokenizer.num_special_tokens_to_add()
        self.stride = max(0, min(stride, content // 2))
        self._pipeline = pipeline(
            "token-classification",
            model=AutoModelForTokenClassification.from_pretrained(model).eval(),
            tokenizer=tokenizer,
            device=device,
            aggregation_strategy="first",
            stride=self.stride,
        )
        # SentencePiece tokenizers (XLM-R) mark no continuation: the pipeline then takes a token right after a
        # non-space as the same word, and says so on every call
        warnings.filterwarnings("ignore", "Tokenizer does not support real words", UserWarning)
        self.device = device or "cpu"
        self.name = model
        self._lock = threading.Lock()  # one forward at a time on the shared model

    def recognise(self, texts: list[str]) -> list[list[Entity]]:
        with self._lock:
            found = [self._pipeline(text) if text.strip() else [] for text in texts]
        out: list[list[Entity]] = []
        for text, groups in zip(texts, found):
            ents = [entity_at(text, str(g["entity_group"]), int(g["start"]), int(g["end"])) for g in groups]
            out.append([e for e in ents if e is not None])
        return out
