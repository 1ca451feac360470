#!/usr/bin/env bash
# Sets up Khuluma on a fresh machine: system packages (when root), the virtualenv with every dependency,
# with --bench what the benchmarks (scripts/bench/) need as well (the `bench` extra; espeak-ng and sox make their
# speech), and with --test the test tools (which include the bench ones) and the official vulavula SDK in its own
# virtualenv (it pins pydantic v1). Idempotent: a second run only checks.
#   ./scripts/setup.sh [--bench] [--test]
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TEST=0
WITH_BENCH=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST=1; WITH_BENCH=1 ;;  # tests run bench code (scripts/bench/ helpers) and measure with psutil
    --bench) WITH_BENCH=1 ;;
    *) echo "usage: $0 [--bench] [--test]" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

# System packages: espeak-ng/sox make the speech of the tests and benches; PostgreSQL server binaries for the
# PostgreSQL tests; Debian's chromium for the playground's real-browser tests (Playwright drives it; no browser
# download).
need_apt=()
if [ "$WITH_BENCH" = 1 ]; then
  command -v espeak-ng >/dev/null || need_apt+=(espeak-ng)
  command -v sox >/dev/null || need_apt+=(sox libsox-fmt-all)
fi
if [ "$WITH_TEST" = 1 ]; then
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
  command -v chromium >/dev/null || need_apt+=(chromium)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> apt-get install ${need_apt[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "WARNING: missing system packages (${need_apt[*]}); install them with sudo apt-get install." >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
  .venv/bin/pip install -q -U pip wheel
fi
stamp=.venv/.khuluma-installed
extras="transformers"
[ "$WITH_BENCH" = 1 ] && extras="$extras,bench"
[ "$WITH_TEST" = 1 ] && extras="$extras,test"
hash="$(sha256sum pyproject.toml | cut -c1-16)"
# The stamp is "<hash of pyproject.toml>-<extras installed>": an install with more extras covers one with fewer
# (a test install covers a bench one, a bench install a plain one).
installed=0 stamp_hash="" stamp_extras=""
[ -f "$stamp" ] && IFS=- read -r stamp_hash stamp_extras < "$stamp"
if [ "$stamp_hash" = "$hash" ]; then
  installed=1
  for extra in ${extras//,/ }; do
    case ",$stamp_extras," in *",$extra,"*) ;; *) installed=0 ;; esac
  done
fi
if [ "$installed" = 0 ]; then
  echo "==> installing khuluma[$extras] (first time: a few minutes)"
  # torch==2.13.0 is the CPU wheel on this machine's disk; pinned so pip never pulls a CUDA build.
  .venv/bin/pip install -q -e ".[$extras]"
  echo "$hash-$extras" > "$stamp"
fi

if [ "$WITH_TEST" = 1 ] && [ ! -x .venv-sdk/bin/python ]; then
  echo "==> creating .venv-sdk with the official vulavula SDK (pydantic v1, kept apart)"
  "$PY" -m venv .venv-sdk
  .venv-sdk/bin/pip install -q "vulavula==0.4.3"
fi
echo "==> setup done"
