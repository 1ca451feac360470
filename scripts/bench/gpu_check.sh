#!/usr/bin/env bash
# The speech benches on a GPU machine (issue #29): files through Whisper one window at a time vs batched, and live
# streams held at real time through the streaming engine, on CUDA. NOT RUN YET: written and checked by reading only
# (no GPU was lent to the session that wrote it). docs/speech.md, "Batching on a GPU" and "Streaming latency".
# The CTC step (issue #37, also not run yet): the Omnilingual-300M-shaped int8 ONNX through the service's CTC engine
# on onnxruntime-gpu's CUDA provider (bench_ctc.py --device cuda), 1 and 4 streams. The model travels as a skeleton
# (its graph and small tensors, 1.2 MB; scripts/bench/_ctc_models.strip_weights) and is filled with random weights
# there (inflate): no PyTorch on that machine, and 64 MiB per transfer. It runs last: onnxruntime-gpu replaces the
# CPU onnxruntime package (the VAD of the steps before uses it). onnxruntime-gpu's wheel is built for CUDA 12; like
# CTranslate2 it gets the cuBLAS 13 links below, and may need more CUDA 12 libraries than the machine has: then the
# step fails and says so (providers and the error in $OUT/ctc.log).
#
# The device machine (NVIDIA H100, CUDA 13 libraries, Python 3.12 with numpy, onnxruntime, tokenizers,
# huggingface-hub, typer, rich, psutil; nothing can be fetched there) gets only the working tree plus carried
# paths, at most 64 MiB a call, and keeps what a call wrote while it stays warm (about 30 s between calls). So:
#
#   1. here (the dev machine: the venv, espeak-ng, the offline model, a registry for `pip download`):
#        scripts/bench/gpu_check.sh prepare          # -> gpu/part.00, gpu/part.01, ... (gpu/ is git-ignored)
#   2. there, one device `run` per part, back to back (carry ["gpu/part.NN"]), then the benches:
#        bash scripts/bench/gpu_check.sh receive     # each call: moves the carried part to /root/khuluma-gpu
#        bash scripts/bench/gpu_check.sh run         # the last call (timeout_s 600): unpack, install, bench
#      `run` writes $OUT/batch.json, $OUT/stream.json, $OUT/ctc.json, $OUT/gpu_util.txt (nvidia-smi samples during
#      the benches: where the GPU is busy) and $OUT/env.txt.
#
# CTranslate2 4.8.x's wheels are built for CUDA 12 and load libcublas.so.12/libcublasLt.so.12; the machine has only
# cuBLAS 13 (nvidia-cublas, cu13), which served every call CTranslate2 made in the 2026-11-25 check, through links
# named *.so.12 (the same trick here, in a private folder on LD_LIBRARY_PATH). cuDNN 9 (nvidia-cudnn-cu13) keeps
# its soname.
set -euo pipefail
cd "$(dirname "$0")/../.."
STORE=/root/khuluma-gpu
CT2=4.8.5
FW=1.2.1

case "${1:-}" in
prepare)
  rm -rf gpu && mkdir -p gpu/stage/wheels
  # wheels for the machine's Python 3.12 (x86_64), without dependencies it already has
  .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d gpu/stage/wheels "ctranslate2==$CT2" "faster-whisper==$FW" av soxr pydantic pydantic-core \
    pydantic-settings python-dotenv annotated-types typing-inspection fastapi starlette \
    onnxruntime-gpu onnx protobuf ml-dtypes
  # the audio and the windows, made here (espeak-ng is not there)
  .venv/bin/python - <<'PY'
import sys
from pathlib import Path
sys.path[:0] = [".", "scripts/bench"]
from bench_stream import UTTERANCE
from tests.speechdata import espeak
espeak(UTTERANCE, Path("gpu/stage/utterance.wav"))
PY
  .venv/bin/python scripts/bench/bench_whisper_batch.py --windows 16 --save-features gpu/stage/windows.npz
  # the offline whisper-base (float16 CTranslate2, 145 MB), joined as the service joins it
  .venv/bin/python -c "from pathlib import Path; from engines.speech.whisper_weights import ensure_whisper_base as e; \
print(e(Path('gpu/data')))" >gpu/model_path
  cp -r "$(cat gpu/model_path)" gpu/stage/whisper-base
  # the CTC step: the bench audio and its VAD chunks, and the Omnilingual-300M-shaped int8 model as a skeleton
  .venv/bin/python scripts/bench/bench_ctc.py --save-audio gpu/stage/ctc_audio.npz
  .venv/bin/python scripts/bench/bench_ctc.py --skip whisper,sherpa,mms --streams 1 --seconds 5 >/dev/null  # builds
  mkdir -p gpu/stage/omni-skeleton
  .venv/bin/python -c "import sys; sys.path.insert(0, 'scripts/bench'); from pathlib import Path; \
from _ctc_models import strip_weights; import tempfile; c = Path(tempfile.gettempdir()) / 'khuluma-bench-ctc/omni-300m'; \
strip_weights(c / 'model.int8.onnx', Path('gpu/stage/omni-skeleton/skeleton.onnx')); \
(Path('gpu/stage/omni-skeleton/tokens.txt')).write_bytes((c / 'tokens.txt').read_bytes())"
  tar -C gpu/stage -cf - . | split -b 60m -d - gpu/part.
  rm -rf gpu/stage gpu/data
  ls -la gpu/
  echo "carry each gpu/part.NN in its own device run: bash scripts/bench/gpu_check.sh receive; then ... run"
  ;;
receive)
  mkdir -p "$STORE"
  for part in gpu/part.*; do [ -f "$part" ] && cp "$part" "$STORE/" && echo "received $part"; done
  ls -la "$STORE"
  ;;
run)
  mkdir -p "$STORE" "${OUT:=/tmp/out}"
  for part in gpu/part.*; do [ -f "$part" ] && cp "$part" "$STORE/"; done  # the last part may travel with run
  cd "$STORE" && rm -rf stage && mkdir stage && cat part.* | tar -C stage -xf - && cd - >/dev/null
  W="$STORE/stage"
  python3 -m pip install --no-index --no-deps --quiet "$W"/wheels/*.whl
  # cuBLAS 13 under the CUDA 12 names CTranslate2 asks for
  # (pip's nvidia-cublas for cu13 in site-packages, else a system CUDA)
  SITE="$(python3 -c 'import site; print(" ".join(site.getsitepackages()))')"
  find_lib() { find $SITE /usr/local/cuda* /usr/lib/x86_64-linux-gnu -name "$1" 2>/dev/null | sort | head -1 || true; }
  CUBLAS="$(find_lib 'libcublas.so.13*')"
  CUBLASLT="$(find_lib 'libcublasLt.so.13*')"
  [ -n "$CUBLAS" ] && [ -n "$CUBLASLT" ] || { echo "no cuBLAS 13 found" >&2; exit 1; }
  mkdir -p "$STORE/cuda12"
  ln -sf "$CUBLAS" "$STORE/cuda12/libcublas.so.12"
  ln -sf "$CUBLASLT" "$STORE/cuda12/libcublasLt.so.12"
  CUDNN="$(find_lib 'libcudnn.so.9*')"
  export LD_LIBRARY_PATH="$STORE/cuda12:$(dirname "$CUBLAS")${CUDNN:+:$(dirname "$CUDNN")}:${LD_LIBRARY_PATH:-}"
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    echo "cublas: $CUBLAS / $CUBLASLT"
    python3 -c "import ctranslate2; print('ctranslate2', ctranslate2.__version__, 'cuda devices', \
ctranslate2.get_cuda_device_count(), 'compute types', sorted(ctranslate2.get_supported_compute_types('cuda')))"
  } | tee "$OUT/env.txt"
  # where the GPU is used: utilisation and memory every 0.5 s while the benches run
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 500 >"$OUT/gpu_util.txt" &
  SMI=$!
  trap 'kill $SMI 2>/dev/null || true' EXIT
  # files: the same 16 windows, one at a time vs batches (files/min = 60 / (seconds per window))
  echo "== windows: one at a time vs batched (bench_whisper_batch.py, cuda float16)"
  timeout 200 python3 scripts/bench/bench_whisper_batch.py --features "$W/windows.npz" --model-dir "$W/whisper-base" \
    --device cuda --sizes 1,4,8,16 --rounds 3 --json "$OUT/batch.json" || echo "batch bench failed: $?"
  echo "== live streams at real time through the streaming engine (bench_stream_engine.py, cuda float16)"
  timeout 300 python3 scripts/bench/bench_stream_engine.py --wav "$W/utterance.wav" --model-dir "$W/whisper-base" \
    --device cuda --streams 1 8 32 --json "$OUT/stream.json" || echo "stream bench failed: $?"
  echo "== CTC: Omnilingual-300M-shaped int8 ONNX through the CTC engine (bench_ctc.py, onnxruntime-gpu CUDA)"
  {
    python3 -m pip uninstall -y -q onnxruntime || true
    python3 -m pip install --no-index --no-deps --quiet --force-reinstall "$W"/wheels/onnxruntime_gpu-*.whl
    mkdir -p "$STORE/omni" && cp "$W/omni-skeleton/tokens.txt" "$STORE/omni/"
    python3 -c "import sys; sys.path.insert(0, 'scripts/bench'); from pathlib import Path; from _ctc_models import \
inflate; inflate(Path('$W/omni-skeleton/skeleton.onnx'), Path('$STORE/omni/model.int8.onnx'))"
    python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
    timeout 240 python3 scripts/bench/bench_ctc.py --omni "$STORE/omni" --audio "$W/ctc_audio.npz" --device cuda \
      --skip whisper,sherpa,mms --streams 1,4 --json "$OUT/ctc.json"
  } >"$OUT/ctc.log" 2>&1 || echo "ctc bench failed: $? (see ctc.log)"
  tail -20 "$OUT/ctc.log"
  ;;
*)
  sed -n '2,28p' "$0"
  exit 2
  ;;
esac
