"""The CTC speech family (engines/speech/ctc*.py) without Ray: decoding and alignment on hand-made posteriors, the
letter-soup guards on real words and on soup, directory layouts, and the real loaders (onnxruntime, transformers,
sherpa-onnx as the reference) on tiny models the tests build (tests/speech_models.py). The weights are random:
the tests assert structure and routing, not words."""

from __future__ import annotations

import math
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from contracts.errors import TimedOut, Unavailable, UnsupportedLanguage
from engines.models.ctc_layout import SHERPA_ONNX, TRANSFORMERS, inspect
from engines.speech.ctc import decoding as ctc
from engines.speech.ctc import guards as ctc_guards
from engines.speech.ctc.recognizer import CTCRecognizer
from engines.speech.recognition import SpeechSegment
from tests.speech_models import ALPHABETS, TinyCTCModels, session_ctc_models, speechlike

SR = 16_000


@pytest.fixture(scope="session")
def ctc_models(tmp_path_factory: pytest.TempPathFactory) -> TinyCTCModels:
    return session_ctc_models(tmp_path_factory)


# --------------------------------------------------------------------------- decoding on hand-made posteriors

TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "|", "a", "b", "n", "u"]
VOCAB = ctc.Vocabulary.of(TOKENS, blank=0)


def posteriors(path: list[int], confidence: float = 0.9) -> np.ndarray:
    """Log-probabilities whose argmax follows ``path`` (one token id per frame)."""
    out = np.full((len(path), len(TOKENS)), (1 - confidence) / (len(TOKENS) - 1))
    out[np.arange(len(path)), path] = confidence
    return np.log(out).astype(np.float32)


def test_greedy_path_merges_repeats_drops_blanks_and_keeps_frames():
    path = [0, 7, 7, 0, 8, 0, 0, 6, 6, 6, 4, 5, 0, 5]  # n n _ u _ _ b b b | a _ a
    emissions = ctc.greedy_path(posteriors(path), VOCAB.blank)
    assert [(TOKENS[e.token], e.start, e.end) for e in emissions] == [
        ("n", 1, 3),
        ("u", 4, 5),
        ("b", 7, 10),
        ("|", 10, 11),
        ("a", 11, 12),
        ("a", 13, 14),  # a blank between two a's: two letters
    ]
    assert all(e.probability == pytest.approx(0.9, abs=1e-5) for e in emissions)
    assert ctc.text_of(emissions, VOCAB) == "nub aa"
    assert ctc.mean_logprob(emissions, VOCAB) == pytest.approx(math.log(0.9), abs=1e-5)  # the delimiter not counted
    assert ctc.greedy_path(np.zeros((0, len(TOKENS)), np.float32), 0) == []
    assert ctc.mean_logprob([], VOCAB) == float("-inf")


def test_special_tokens_are_never_text_and_subword_starts_begin_words():
    emissions = ctc.greedy_path(posteriors([5, 0, 3, 0, 6, 2, 1]), 0)  # a <unk> b </s> <s>
    assert ctc.text_of(emissions, VOCAB) == "ab"
    pieces = ctc.Vocabulary.of(["<blank>", "▁sa", "wu", "▁bona"], blank=0)
    out = np.log(np.full((4, 4), 0.01) + np.eye(4)[[1, 2, 0, 3]])
    assert ctc.text_of(ctc.greedy_path(out.astype(np.float32), 0), pieces) == "sawu bona"


def test_segments_are_timed_through_the_packing_one_per_chunk():
    audio = np.zeros(10 * SR, np.float32)
    chunks = [(SR, 2 * SR), (5 * SR, 6 * SR)]  # 1-2 s and 5-6 s of the audio
    packed = ctc.pack(audio, chunks)
    assert packed.at == (0, SR + ctc.GAP_SAMPLES) and packed.audio.size == 2 * SR + ctc.GAP_SAMPLES
    frames = packed.audio.size // 320
    path = [0] * frames
    path[10:12] = [7, 7]  # "n" at 0.20-0.24 s of the first chunk
    path[13] = 8  # "u"
    path[20] = 4
    path[22] = 5  # "a" at 0.44 s
    second = (SR + ctc.GAP_SAMPLES) // 320
    path[second + 5] = 6  # "b" 0.10 s into the second chunk
    path[second + 6] = 5
    segments = ctc.segments_of(ctc.greedy_path(posteriors(path), 0), VOCAB, packed, 320, offset=100.0)
    assert [s.text for s in segments] == ["nu a", "ba"]
    first, later = segments
    assert [w.word for w in first.words] == [" nu", " a"]
    assert (first.words[0].start, first.words[0].end) == (101.2, 101.28)
    assert (first.words[1].start, first.words[1].end) == (101.44, 101.46)
    assert (later.start, later.end) == (105.1, 105.14)
    assert first.avg_logprob == pytest.approx(math.log(0.9), abs=1e-5) and first.no_speech_prob == 0.0


def test_a_word_never_spans_two_chunks():
    audio = np.zeros(4 * SR, np.float32)
    packed = ctc.pack(audio, [(0, SR), (2 * SR, 3 * SR)])
    path = [0] * (packed.audio.size // 320)
    last_of_first = SR // 320 - 1
    path[last_of_first] = 7  # "n" at the end of the first chunk, "u" right after the gap: no delimiter between
    path[(SR + ctc.GAP_SAMPLES) // 320] = 8
    segments = ctc.segments_of(ctc.greedy_path(posteriors(path), 0), VOCAB, packed, 320, 0.0)
    assert [s.text for s in segments] == ["n", "u"] and segments[1].start == 2.0


def test_long_chunks_are_cut_at_their_quietest_point_and_pieces_stay_bounded():
    rng = np.random.default_rng(0)
    audio = (0.3 * rng.standard_normal(70 * SR)).astype(np.float32)
    audio[int(23.5 * SR) : int(23.6 * SR)] = 0.0  # a pause in the first part's second half
    parts = ctc.split_long(audio, (0, audio.size), 30 * SR)
    assert parts[0][1] == pytest.approx(23.5 * SR, abs=320) and parts[-1][1] == audio.size
    assert all(end - start <= 30 * SR for start, end in parts) and all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
    chunks = [{"start": 0, "end": audio.size}, {"start": 5, "end": 5}]  # an empty chunk is ignored
    pieces = ctc.pieces(audio, chunks, 30 * SR)
    assert all(p.audio.size <= 30 * SR for p in pieces) and sum(len(p.chunks) for p in pieces) == len(parts)
    tiny = ctc.pieces(audio, [{"start": 0, "end": 800}], 30 * SR)
    assert tiny[0].audio.size == ctc.MIN_PIECE_SAMPLES  # padded: the convolutions need some context


def test_frame_samples():
    assert ctc.frame_samples(16_000, 49) == 320  # wav2vec2 trims the last frames of a short input
    assert ctc.frame_samples(160_000, 499) == 320
    assert ctc.frame_samples(160_000, 250) == 640  # an adapter that halves the frames (w2v-BERT 2.0)


# --------------------------------------------------------------------------- letter-soup guards


def segment(text: str, seconds: float, avg_logprob: float = -0.1, start: float = 0.0) -> SpeechSegment:
    return SpeechSegment(start, start + seconds, text, [], avg_logprob, 0.0)


@pytest.mark.parametrize(
    "text",
    [
        "Sawubona baba, ngiyabonga kakhulu ngosizo lwakho namuhla",  # isiZulu
        "Molo sisi, ndiyabulela kakhulu ngokufika kwakho",  # isiXhosa
        "Ke a leboha haholo ka thuso ya hao kajeno",  # Sesotho: 'a' is a word of one letter
        "Ek het gister 'n boek by die biblioteek gaan haal",  # Afrikaans: 'n has no vowel
        "The meeting starts at nine in the morning",
        "Ndza khensa swinene hikwalaho ka mpfuno wa wena",  # Xitsonga
    ],
)
def test_real_sentences_pass(text: str):
    assert ctc_guards.judge(segment(text, len(text) / 14)) is None  # 14 letters a second: normal speech


@pytest.mark.parametrize(
    ("text", "seconds", "logprob", "reason"),
    [
        ("zpoypotooqotopopoaozaqozoaaoapoboazzlaaolzzqqpt", 1.0, -0.2, "letters per second"),
        ("h t h vh f zz v hv v hzwzvg", 3.0, -0.3, "without a vowel"),
        ("g p e g e eene a j g a a a", 3.0, -0.2, "of one letter"),
        ("ngiyabonga kakhulu baba", 2.0, -2.5, "mean letter probability"),
        ("Спасибо большое за помощь", 2.0, -0.2, "not in the Latin script"),
        ("... -- ?", 1.0, -0.2, "no letters"),
    ],
)
def test_letter_soup_is_dropped(text: str, seconds: float, logprob: float, reason: str):
    verdict = ctc_guards.judge(segment(text, seconds, logprob))
    assert verdict is not None and verdict.drop and verdict.problem == ctc_guards.LETTER_SOUP
    assert reason in verdict.reason


def test_screen_keeps_low_confidence_with_a_warning_and_names_the_times():
    good = segment("ngiyabonga kakhulu baba", 2.0)
    unsure = segment("ngiyabonga kakhulu baba", 2.0, -1.4, start=5.0)
    soups = [segment("h t h vh f zz v hv v", 2.0, start=60.0 + 10 * i) for i in range(6)]
    kept, warnings = ctc_guards.screen([good, unsure, *soups])
    assert kept == [good, unsure]
    assert len(warnings) == 2
    assert "6 segment(s) (1:00-1:02" in warnings[0] and "and 1 more" in warnings[0] and "letter-soup" in warnings[0]
    assert "0:05-0:07" in warnings[1] and "unreliable" in warnings[1]
    assert ctc_guards.screen([good]) == ([good], [])
    assert ctc_guards.judge(segment("   ", 1.0, -9.0)) is None  # empty text: nothing to judge


# --------------------------------------------------------------------------- layouts


def test_layouts_are_told_from_the_files(ctc_models):
    mms, omni, tuned = inspect(ctc_models.mms), inspect(ctc_models.omnilingual), inspect(ctc_models.finetune)
    assert (mms.runtime, mms.adapters, mms.architecture) == (TRANSFORMERS, ("xho", "zul"), "Wav2Vec2ForCTC")
    assert (omni.runtime, omni.model_file.name, omni.agnostic) == (SHERPA_ONNX, "model.int8.onnx", True)
    assert (tuned.runtime, tuned.adapters, tuned.agnostic) == (TRANSFORMERS, (), False)


def test_malformed_directories_say_what_they_must_hold(ctc_models, tmp_path: Path):
    with pytest.raises(Unavailable, match="does not exist"):
        inspect(tmp_path / "nowhere")
    with pytest.raises(Unavailable, match="not a CTC speech model directory"):
        inspect(tmp_path)
    onnx_only = tmp_path / "onnx"
    onnx_only.mkdir()
    shutil.copy(ctc_models.omnilingual / "model.int8.onnx", onnx_only)
    with pytest.raises(Unavailable, match=r"lacks tokens\.txt"):
        inspect(onnx_only)
    mms = tmp_path / "mms"
    shutil.copytree(ctc_models.mms, mms)
    shutil.copy(mms / "adapter.zul.safetensors", mms / "adapter.sot.safetensors")  # an adapter without a vocabulary
    with pytest.raises(Unavailable, match="missing: sot"):
        inspect(mms)
    (mms / "adapter.sot.safetensors").unlink()
    (mms / "preprocessor_config.json").unlink()  # optional: wav2vec2's feature extractor is the default
    assert inspect(mms).adapters == ("xho", "zul")
    (mms / "vocab.json").unlink()
    with pytest.raises(Unavailable, match=r"vocab\.json"):
        inspect(mms)
    not_ctc = tmp_path / "not-ctc"
    shutil.copytree(ctc_models.finetune, not_ctc)
    config = (not_ctc / "config.json").read_text().replace("Wav2Vec2ForCTC", "Wav2Vec2Model")
    (not_ctc / "config.json").write_text(config)
    with pytest.raises(Unavailable, match="names no CTC architecture"):
        inspect(not_ctc)


# --------------------------------------------------------------------------- the recognizer on tiny models


def two_chunks() -> tuple[np.ndarray, list[dict[str, int]]]:
    audio = np.concatenate(
        [np.zeros(SR // 2, np.float32), speechlike(3.0, 1), np.zeros(SR, np.float32), speechlike(2.0, 2)]
    )
    return audio, [{"start": SR // 2, "end": SR // 2 + 3 * SR}, {"start": int(4.5 * SR), "end": int(6.5 * SR)}]


def check_structure(segments: list[SpeechSegment], chunks: list[dict[str, int]], offset: float) -> None:
    assert segments, "the tiny models speak on speech-like audio"
    spans = [(offset + c["start"] / SR, offset + c["end"] / SR) for c in chunks]
    for s in segments:
        assert s.text == "".join(w.word for w in s.words).strip() and s.words
        assert any(lo - 1e-3 <= s.start <= s.end <= hi + 1e-3 for lo, hi in spans)  # inside one chunk
        assert all(w.word.startswith(" ") and w.text for w in s.words)
        assert all(s.start <= w.start < w.end <= s.end for w in s.words)
        assert all(0.0 < w.probability <= 1.0 for w in s.words)
        assert s.avg_logprob <= 0.0 and s.no_speech_prob == 0.0
    starts = [w.start for s in segments for w in s.words]
    assert starts == sorted(starts)


def test_mms_routes_each_language_to_its_adapter(ctc_models):
    recognizer = CTCRecognizer(ctc_models.mms, cpu_threads=1)
    assert recognizer.runtime == TRANSFORMERS and not recognizer.agnostic
    assert recognizer.languages == {"zul", "xho"} and recognizer.serves("zu") and not recognizer.serves("sot")
    audio, chunks = two_chunks()
    zul = recognizer.transcribe(audio, chunks, language="zul", offset=30.0)
    xho = recognizer.transcribe(audio, chunks, language="xho", offset=30.0)
    check_structure(zul, chunks, 30.0)
    check_structure(xho, chunks, 30.0)
    assert [s.text for s in zul] != [s.text for s in xho]  # another adapter and CTC head
    assert set("".join(s.text for s in zul)) <= set(ALPHABETS["zul"] + " ")  # each through its own CTC head
    assert set("".join(s.text for s in xho)) <= set(ALPHABETS["xho"] + " ")
    model = recognizer._model()
    assert len(model.vocabulary("xho")) == len(ALPHABETS["xho"]) + 5 != len(model.vocabulary("zul"))
    again = recognizer.transcribe(audio, chunks, language="isiZulu", offset=30.0)
    assert [s.text for s in again] == [s.text for s in zul]  # switching back restores zul exactly
    assert recognizer.transcribe(audio, chunks, language="cs-zul", offset=30.0)[0].text == zul[0].text
    with pytest.raises(UnsupportedLanguage, match="adapters: xho, zul"):
        recognizer.transcribe(audio, chunks, language="sot")
    with pytest.raises(UnsupportedLanguage, match="must be given"):
        recognizer.quick_transcript(audio)
    text, logprob = recognizer.quick_transcript(audio[chunks[0]["start"] : chunks[0]["end"]], language="xho")
    assert text and -5.0 < logprob <= 0.0
    assert recognizer.describe()["languages"] == ["xho", "zul"] and recognizer.describe()["loaded"] is True


def test_mms_calls_in_two_languages_at_once_get_their_own_adapter(ctc_models):
    recognizer = CTCRecognizer(ctc_models.mms, cpu_threads=1)
    audio, chunks = two_chunks()
    expected = {lang: recognizer.transcribe(audio, chunks, language=lang) for lang in ("zul", "xho")}
    results: list[tuple[str, list[str]]] = []
    errors: list[BaseException] = []

    def call(lang: str) -> None:
        try:
            results.append((lang, [s.text for s in recognizer.transcribe(audio, chunks, language=lang)]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=("zul" if i % 2 else "xho",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 8
    assert all(texts == [s.text for s in expected[lang]] for lang, texts in results)


def test_a_finetune_serves_its_one_language(ctc_models):
    routed = CTCRecognizer(ctc_models.finetune, language="zu", cpu_threads=1)
    assert routed.languages == {"zul"} and routed.describe()["languages"] == ["zul"]
    audio, chunks = two_chunks()
    check_structure(routed.transcribe(audio, chunks, language="zul"), chunks, 0.0)
    assert routed.transcribe(audio, chunks) == routed.transcribe(audio, chunks, language="zul")
    with pytest.raises(UnsupportedLanguage, match="not the language"):
        routed.transcribe(audio, chunks, language="xho")
    assert CTCRecognizer(ctc_models.finetune).languages is None  # unrouted: whatever it is routed for


def test_omnilingual_onnx_is_language_agnostic_and_agrees_with_sherpa_onnx(ctc_models):
    import sherpa_onnx

    recognizer = CTCRecognizer(ctc_models.omnilingual, cpu_threads=1)
    assert recognizer.runtime == SHERPA_ONNX and recognizer.agnostic and recognizer.languages is None
    assert recognizer.serves("zul") and recognizer.serves("tso")
    audio, chunks = two_chunks()
    segments = recognizer.transcribe(audio, chunks, language="tso", offset=2.0)
    check_structure(segments, chunks, 2.0)
    assert recognizer.transcribe(audio, chunks, offset=2.0) == segments  # the language changes nothing
    speech = speechlike(5.0, 3)
    text, logprob = recognizer.quick_transcript(speech)
    reference = sherpa_onnx.OfflineRecognizer.from_omnilingual_asr_ctc(
        model=str(ctc_models.omnilingual / "model.int8.onnx"),
        tokens=str(ctc_models.omnilingual / "tokens.txt"),
        num_threads=1,
    )
    stream = reference.create_stream()
    stream.accept_waveform(SR, speech)
    reference.decode_stream(stream)
    assert text and text == " ".join(stream.result.text.split())  # the same graph, input and greedy path
    assert -5.0 < logprob <= 0.0
    assert recognizer.quick_transcript(np.zeros(0, np.float32)) == ("", float("-inf"))


def test_long_speech_is_decoded_in_bounded_pieces(ctc_models):
    recognizer = CTCRecognizer(ctc_models.omnilingual, cpu_threads=1, max_seconds=10.0)
    audio = speechlike(25.0, 4)
    seen: list[int] = []
    model = recognizer._model()
    original = model.log_probs

    def spy(piece: np.ndarray, language: str | None) -> np.ndarray:
        seen.append(piece.size)
        return original(piece, language)

    model.log_probs = spy  # type: ignore[method-assign]
    segments = recognizer.transcribe(audio, [{"start": 0, "end": audio.size}])
    assert len(seen) == 3 and max(seen) <= 10 * SR
    assert segments[-1].end <= 25.0 and len(segments) == 3  # one chunk cut in three, one segment each


def test_deadline_and_empty_input(ctc_models):
    recognizer = CTCRecognizer(ctc_models.omnilingual, cpu_threads=1)
    audio, chunks = two_chunks()
    assert recognizer.transcribe(audio, []) == []
    with pytest.raises(TimedOut):
        recognizer.transcribe(audio, chunks, deadline=time.time() - 1)


def test_models_load_lazily_once_and_broken_files_are_unavailable(ctc_models, tmp_path: Path):
    recognizer = CTCRecognizer(ctc_models.finetune)
    assert recognizer.describe()["loaded"] is False  # construction checks the files only
    recognizer.load()
    model = recognizer._model()
    recognizer.load()
    assert recognizer._model() is model
    broken = tmp_path / "broken"
    shutil.copytree(ctc_models.omnilingual, broken)
    (broken / "model.int8.onnx").write_bytes(b"not an onnx file")
    late = CTCRecognizer(broken)
    with pytest.raises(Unavailable, match="not a loadable ONNX model"):
        late.quick_transcript(speechlike(1.0))
    mismatched = tmp_path / "mismatched"
    shutil.copytree(ctc_models.omnilingual, mismatched)
    (mismatched / "tokens.txt").write_text("<s> 0\n1\na 2\n")
    with pytest.raises(Unavailable, match="not of the same model"):
        CTCRecognizer(mismatched).quick_transcript(speechlike(1.0))
    with pytest.raises(Unavailable, match="does not exist"):
        CTCRecognizer(tmp_path / "nowhere")


def test_a_random_head_is_letter_soup_the_guards_drop(ctc_models):
    recognizer = CTCRecognizer(ctc_models.mute_finetune, cpu_threads=1)
    audio, chunks = two_chunks()
    segments = recognizer.transcribe(audio, chunks)
    assert segments and all(s.avg_logprob < ctc_guards.SOUP_LOGPROB for s in segments)
    kept, warnings = ctc_guards.screen(segments)
    assert kept == [] and "letter-soup" in warnings[0]
    speaking = CTCRecognizer(ctc_models.finetune, cpu_threads=1).transcribe(audio, chunks)
    assert ctc_guards.screen(speaking) == (speaking, [])  # a model that speaks passes


def test_a_gpu_that_is_not_there_fails_fast(ctc_models):
    for path in (ctc_models.omnilingual, ctc_models.finetune):
        with pytest.raises(Unavailable, match="GPU"):
            CTCRecognizer(path, device="cuda").load()


def test_a_stripped_model_inflates_to_the_same_graph(ctc_models, tmp_path: Path):
    """The GPU check ships the Omnilingual-shaped graph without its weights (scripts/bench/_ctc_models.py)."""
    from scripts.bench._ctc_models import inflate, strip_weights

    source = ctc_models.omnilingual / "model.int8.onnx"
    skeleton = strip_weights(source, tmp_path / "skeleton.onnx", above=64)  # the tiny model's weights are small
    import onnx

    from scripts.bench._ctc_models import STRIPPED

    stripped = [t for t in onnx.load(str(skeleton)).graph.initializer if t.doc_string == STRIPPED]
    assert stripped and all(not t.raw_data for t in stripped)
    rebuilt = tmp_path / "rebuilt"
    rebuilt.mkdir()
    inflate(skeleton, rebuilt / "model.int8.onnx")
    shutil.copy(ctc_models.omnilingual / "tokens.txt", rebuilt)
    speech = speechlike(3.0)
    original = CTCRecognizer(ctc_models.omnilingual)._model().log_probs(speech, None)
    again = CTCRecognizer(rebuilt)._model().log_probs(speech, None)
    assert again.shape == original.shape and not np.allclose(again, original)  # same graph, other weights


def test_a_fine_tune_saved_with_only_its_model_and_vocabulary_loads(ctc_models, tmp_path: Path) -> None:
    """``Wav2Vec2ForCTC.save_pretrained`` plus a vocab.json, nothing else: wav2vec2's feature extractor is assumed."""
    minimal = tmp_path / "minimal"
    minimal.mkdir()
    for name in ("config.json", "model.safetensors", "vocab.json"):
        shutil.copy(ctc_models.finetune / name, minimal / name)
    recognizer = CTCRecognizer(minimal, cpu_threads=1, language="zul")
    full = CTCRecognizer(ctc_models.finetune, cpu_threads=1, language="zul")
    speech = speechlike(2.0, seed=5)
    assert recognizer.quick_transcript(speech) == full.quick_transcript(speech)
