#!/usr/bin/env bash
# Sets up everything the tests need, then runs the whole test suite. Extra args go to pytest.
#
# The static checks (import-linter's layer contracts, ruff check, ruff format --check, mypy) are NOT run here as
# separate steps: they run inside pytest, in tests/unit/test_layers.py (marker `lint` for ruff/mypy). One runner
# means one report and one closing "N passed, N failed" line for CI, a lint failure does not hide the test
# results, and `pytest tests/unit/test_layers.py` reproduces CI's checks exactly. To run them alone:
#   .venv/bin/lint-imports && .venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
exec .venv/bin/python -m pytest -q -ra -p no:cacheprovider "$@"
