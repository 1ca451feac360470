"""CTC speech engines against Whisper base on the same audio, in one run: real-time factor and memory.

Models of the real architectures with random weights (the cost is the real model's; the words are meaningless),
built once into ``--cache`` (scripts/bench/_ctc_models.py):

- **omni-300m**: Omnilingual-300M-shaped (omniASR_CTC_300M's config) exported as sherpa-onnx exports it and
  quantised to int8 (``model.int8.onnx``, about 0.35 GB), run by the service's engine
  (``engines.speech.ctc.CTCRecognizer``: onnxruntime, VAD chunks packed into pieces, alignment, word confidences)
  and, as the peer, by sherpa-onnx's own ``OfflineRecognizer`` on the same pieces (text only);
- **mms-1b**: MMS-1B-shaped (``facebook/mms-1b-all``'s config: 48 layers, 1280 wide, adapters) ``Wav2Vec2ForCTC``
  in float32 through transformers, with three language adapters;
- **whisper-base**: the offline default (int8 CTranslate2, beam 5, word times) through ``WhisperRecognizer``.

Each engine transcribes the same espeak-ng English (VAD chunks from Silero, as the pipeline gives them) with 1 and
with N concurrent streams. Printed: RTF (wall time / audio time, all streams together), RTF per core (RTF x the
cores used: comparable across machines), each engine against Whisper base, the engine against bare sherpa-onnx, the
memory each model adds (RSS after load and one transcription, minus before, each in a fresh process) and, for MMS,
the time to switch adapters and the memory each further adapter adds. Goal (issue #37): omni-300m at RTF <= 0.3
for one stream on 2 cores.

    .venv/bin/python scripts/bench/bench_ctc.py [--seconds 20] [--streams 1,4] [--skip mms] [--cache DIR] [--json F]
    # on a GPU machine (scripts/bench/gpu_check.sh): a given model directory and saved audio, on CUDA
    python3 scripts/bench/bench_ctc.py --omni DIR --audio audio.npz --device cuda --skip whisper,sherpa,mms

Building the models takes a few minutes the first time (MMS-1B: about 4 GB of float32 safetensors in the cache).
Run it alone: ``flock /work/notes/bench.lock ...`` on a shared machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # as `khuluma serve` runs its replicas

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
from _ctc_models import (  # noqa: E402
    export_waveform_model,
    mms_1b_all_config,
    omnilingual_300m_config,
    quantize_int8,
    write_tokens,
)
from _load import json_option, write_json  # noqa: E402
from _speech import CALL_PHRASES, espeak  # noqa: E402

SR = 16_000
ADAPTERS = ("zul", "xho", "sot")


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


# --------------------------------------------------------------------------- models (built once)


def build_omni(cache: Path) -> Path:
    dest = cache / "omni-300m"
    if (dest / "model.int8.onnx").is_file():
        return dest
    import torch
    from transformers import Wav2Vec2ForCTC

    tmp = cache / "omni-300m.building"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.manual_seed(0)
    config = omnilingual_300m_config()
    model = Wav2Vec2ForCTC(config).eval()
    print(f"omni-300m: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, exporting", flush=True)
    export_waveform_model(model, tmp / "model.onnx", comment="Omnilingual-300M-shaped, random weights")
    del model
    quantize_int8(tmp / "model.onnx", tmp / "model.int8.onnx")
    (tmp / "model.onnx").unlink()
    for leftover in tmp.glob("*.data"):
        leftover.unlink()
    write_tokens(tmp / "tokens.txt", config.vocab_size)
    os.replace(tmp, dest)
    return dest


def build_mms(cache: Path) -> Path:
    dest = cache / "mms-1b"
    if (dest / "model.safetensors").is_file():
        return dest
    import torch
    from safetensors.torch import save_file
    from transformers import Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC

    tmp = cache / "mms-1b.building"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.manual_seed(0)
    model = Wav2Vec2ForCTC(mms_1b_all_config()).eval()
    print(f"mms-1b: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, saving", flush=True)
    vocab = {}
    for index, lang in enumerate(ADAPTERS):
        torch.manual_seed(100 + index)
        for module in model.modules():
            if type(module).__name__ == "Wav2Vec2AttnAdapterLayer":
                module.linear_1.reset_parameters()
                module.linear_2.reset_parameters()
        model.lm_head.reset_parameters()
        save_file(
            {k: v.detach().clone().contiguous() for k, v in model._get_adapters().items()},
            str(tmp / f"adapter.{lang}.safetensors"),
        )
        tokens = ["<pad>", "<s>", "</s>", "<unk>", "|", *(chr(97 + i % 26) + str(i // 26) for i in range(149))]
        vocab[lang] = {t: i for i, t in enumerate(tokens)}
    model.save_pretrained(tmp)
    del model
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SR, padding_value=0.0, do_normalize=True).save_pretrained(
        tmp
    )
    (tmp / "vocab.json").write_text(json.dumps(vocab))
    (tmp / "tokenizer_config.json").write_text(json.dumps({"word_delimiter_token": "|", "pad_token": "<pad>"}))
    os.replace(tmp, dest)
    return dest


# --------------------------------------------------------------------------- audio


def make_audio(seconds: float, workdir: Path) -> tuple[np.ndarray, list[dict[str, int]]]:
    import soundfile as sf
    import soxr

    from engines.speech.vad import speech_chunks

    parts: list[np.ndarray] = []
    total = 0.0
    index = 0
    while total < seconds:
        wav = espeak(CALL_PHRASES[index % len(CALL_PHRASES)], workdir / f"s{index}.wav")
        samples, rate = sf.read(str(wav), dtype="float32")
        samples = soxr.resample(samples, rate, SR).astype(np.float32)
        parts += [samples, np.zeros(int(0.6 * SR), np.float32)]
        total += samples.size / SR + 0.6
        index += 1
    audio = np.concatenate(parts)[: int(seconds * SR)]
    return audio, speech_chunks(audio)


# --------------------------------------------------------------------------- running


def concurrently(call: Callable[[], Any], streams: int) -> float:
    """Wall seconds for ``streams`` concurrent calls."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(streams)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def threads_for(streams: int, cores: int) -> int:
    """Threads per call: every core for one stream, each stream its share beyond that."""
    return max(1, cores // min(streams, cores))


def probe_memory(kind: str, path: str, audio_npz: str) -> None:
    """In a fresh process: the RSS one model adds once loaded and after one transcription (printed as JSON)."""
    saved = np.load(audio_npz)
    audio, chunks = saved["audio"], [{"start": int(a), "end": int(b)} for a, b in saved["chunks"]]
    before = rss_mb()
    if kind == "whisper":
        from engines.speech.whisper.recognizer import WhisperRecognizer

        whisper = WhisperRecognizer(path, cpu_threads=2)
        list(whisper.transcribe(audio, whisper.route("eng"), chunks))
    else:
        from engines.speech.ctc.recognizer import CTCRecognizer

        recognizer = CTCRecognizer(path, cpu_threads=2)
        recognizer.transcribe(audio, chunks, language="zul")
    print(json.dumps({"memory MB": round(rss_mb() - before)}))


def memory_of(kind: str, path: Path, audio_npz: Path) -> int | None:
    import subprocess

    done = subprocess.run(
        [sys.executable, __file__, "--probe-memory", kind, str(path), "--audio", str(audio_npz)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    try:
        return int(json.loads(done.stdout.strip().splitlines()[-1])["memory MB"])
    except (ValueError, IndexError, KeyError):
        print(f"  memory probe of {kind} failed: {done.stderr[-500:]}")
        return None


def measure(
    name: str, make: Callable[[int], tuple[Callable[[], Any], Any]], streams: list[int], cores: int, audio_s: float
) -> dict[str, Any]:
    row: dict[str, Any] = {"engine": name}
    for n in streams:
        call, keep = make(threads_for(n, cores))
        call()  # load, first call (arenas, caches)
        wall = concurrently(call, n)
        rtf = wall / (audio_s * n)
        row[f"RTF {n}"] = round(rtf, 3)
        row[f"RTF/core {n}"] = round(rtf * min(cores, n * threads_for(n, cores)), 3)
        print(
            f"  {name}: {n} stream(s), {threads_for(n, cores)} thread(s) each: {wall:.1f} s, RTF {rtf:.3f}", flush=True
        )
        del call, keep
        gc.collect()
    return row


def main() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="audio length (espeak-ng English with pauses)")
    parser.add_argument("--streams", default=f"1,{2 * cores}")
    parser.add_argument("--skip", default="", help="comma-separated: omni, sherpa, mms, whisper")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "khuluma-bench-ctc"))
    parser.add_argument("--omni", help="an Omnilingual-layout directory to run instead of building one")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the CTC engines; gpu_check.sh)")
    parser.add_argument("--save-audio", help="write the audio and its VAD chunks to this .npz and stop")
    parser.add_argument("--audio", help="the audio and chunks of --save-audio (a machine without espeak-ng)")
    parser.add_argument("--probe-memory", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    json_option(parser)
    args = parser.parse_args()
    if args.probe_memory:
        probe_memory(*args.probe_memory, args.audio)
        return
    skip = set(filter(None, args.skip.split(",")))
    streams = [int(s) for s in args.streams.split(",")]
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="khuluma-bench-ctc-"))
    if args.audio:
        saved = np.load(args.audio)
        audio = saved["audio"]
        chunks = [{"start": int(a), "end": int(b)} for a, b in saved["chunks"]]
    else:
        audio, chunks = make_audio(args.seconds, workdir)
    saved_audio = Path(args.save_audio or workdir / "audio.npz")
    np.savez(saved_audio, audio=audio, chunks=np.array([[c["start"], c["end"]] for c in chunks]))
    if args.save_audio:
        return
    audio_s = audio.size / SR
    speech_s = sum(c["end"] - c["start"] for c in chunks) / SR
    print(f"audio {audio_s:.1f} s ({speech_s:.1f} s of speech in {len(chunks)} chunks), {cores} cores", flush=True)
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}

    if "whisper" not in skip:
        from engines.speech.whisper.recognizer import WhisperRecognizer
        from engines.speech.whisper.weights import ensure_whisper_base

        base = ensure_whisper_base(cache / "data")

        def whisper(threads: int) -> tuple[Callable[[], Any], Any]:
            decodes = max(1, cores // threads)
            recognizer = WhisperRecognizer(base, cpu_threads=threads, parallel_decodes=decodes)
            route = recognizer.route("eng")
            return lambda: list(recognizer.transcribe(audio, route, chunks)), recognizer

        rows.append(measure("whisper-base (int8, beam 5)", whisper, streams, cores, audio_s))
        rows[-1]["memory MB"] = memory_of("whisper", base, saved_audio)

    if "omni" not in skip:
        from engines.speech.ctc.recognizer import CTCRecognizer

        omni = Path(args.omni) if args.omni else build_omni(cache)

        def engine(threads: int) -> tuple[Callable[[], Any], Any]:
            recognizer = CTCRecognizer(omni, cpu_threads=threads, device=args.device)
            return lambda: recognizer.transcribe(audio, chunks, language="zul"), recognizer

        rows.append(measure("omni-300m int8 (service engine)", engine, streams, cores, audio_s))
        rows[-1]["memory MB"] = memory_of("ctc", omni, saved_audio)
        if "sherpa" not in skip:
            import sherpa_onnx

            from engines.speech.ctc import decoding as ctc_decoding

            pieces = ctc_decoding.pieces(audio, chunks, 30 * SR)

            def bare(threads: int) -> tuple[Callable[[], Any], Any]:
                recognizer = sherpa_onnx.OfflineRecognizer.from_omnilingual_asr_ctc(
                    model=str(omni / "model.int8.onnx"), tokens=str(omni / "tokens.txt"), num_threads=threads
                )

                def call() -> list[str]:
                    out = []
                    for piece in pieces:
                        stream = recognizer.create_stream()
                        stream.accept_waveform(SR, piece.audio)
                        recognizer.decode_stream(stream)
                        out.append(stream.result.text)
                    return out

                return call, recognizer

            rows.append(measure("omni-300m int8 (bare sherpa-onnx)", bare, streams, cores, audio_s))

    if "mms" not in skip:
        from engines.speech.ctc.recognizer import CTCRecognizer

        mms = build_mms(cache)
        holder: dict[str, Any] = {}

        def transformers_engine(threads: int) -> tuple[Callable[[], Any], Any]:
            recognizer = holder.get("mms") or CTCRecognizer(mms, cpu_threads=threads, device=args.device)
            holder["mms"] = recognizer
            import torch

            torch.set_num_threads(threads)
            return lambda: recognizer.transcribe(audio, chunks, language="zul"), recognizer

        rows.append(measure("mms-1b fp32 (transformers)", transformers_engine, streams, cores, audio_s))
        rows[-1]["memory MB"] = memory_of("ctc", mms, saved_audio)
        recognizer = holder["mms"]
        short = audio[chunks[0]["start"] : chunks[0]["end"]]
        adapters: dict[str, float] = {}
        for lang in ADAPTERS[1:]:
            before = rss_mb()
            recognizer.quick_transcript(short, language=lang)
            adapters[lang] = round(rss_mb() - before)
        started = time.perf_counter()
        switches = 6
        for i in range(switches):
            recognizer.quick_transcript(short[: SR // 2], language=ADAPTERS[i % 2])
        per_call = (time.perf_counter() - started) / switches
        started = time.perf_counter()
        for _ in range(switches):
            recognizer.quick_transcript(short[: SR // 2], language=ADAPTERS[0])
        same = (time.perf_counter() - started) / switches
        extra["mms adapter switch s"] = round(per_call - same, 3)
        extra["mms memory per further adapter MB"] = adapters
        print(f"  mms: switching adapters costs {per_call - same:.3f} s a call; memory per adapter {adapters} MB")

    whisper_row = next((r for r in rows if r["engine"].startswith("whisper")), None)
    bare_row = next((r for r in rows if "bare" in r["engine"]), None)
    print()
    header = ["engine", "memory MB", *(f"RTF {n}" for n in streams), *(f"RTF/core {n}" for n in streams)]
    if whisper_row:
        header += [f"vs whisper {n}" for n in streams]
    print(" | ".join(header))
    for row in rows:
        if whisper_row:
            for n in streams:
                row[f"vs whisper {n}"] = f"{whisper_row[f'RTF {n}'] / row[f'RTF {n}']:.2f}x"
        print(" | ".join(str(row.get(h, "")) for h in header))
    engine_row = next((r for r in rows if "service engine" in r["engine"]), None)
    if engine_row and bare_row:
        for n in streams:
            extra[f"engine vs bare sherpa-onnx {n}"] = round(bare_row[f"RTF {n}"] / engine_row[f"RTF {n}"], 2)
        print("engine / bare sherpa-onnx speed:", {n: extra[f"engine vs bare sherpa-onnx {n}"] for n in streams})
    if engine_row:
        one = engine_row[f"RTF {streams[0]}"]
        print(f"goal RTF <= 0.3 for one stream (omni-300m): {'met' if one <= 0.3 else 'NOT met'} ({one})")
    for key, value in extra.items():
        print(f"{key}: {value}")
    write_json(args.json, {"audio_seconds": audio_s, "cores": cores, "rows": rows, **extra})
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
