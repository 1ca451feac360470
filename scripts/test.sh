#!/usr/bin/env bash
# Sets up everything the tests need, then runs the whole test suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
exec .venv/bin/python -m pytest -q -ra -p no:cacheprovider "$@"
