#!/usr/bin/env bash
# Install kgit with its test dependencies into .venv (once), check the code with ruff and
# mypy (configured in pyproject.toml; seconds), then run the test suite.
# GPU tests are skipped by the default marker expression; run them with: -m gpu
# The day-to-day lane leaves out the end-to-end runs marked slow: bash scripts/test.sh --fast
# (the same as -m "not gpu and not slow": a -m of your own replaces the default "not gpu").
# Test files are spread over pytest-xdist workers, one per core, each file whole on one
# worker so its module fixtures are built once (tests/conftest.py says how many workers;
# -m gpu runs serially); -n 0 turns it off.
set -euo pipefail
cd "$(dirname "$0")/.."
lane=()
if [ "${1:-}" = "--fast" ]; then
    shift
    lane=(-m "not gpu and not slow")
fi
source scripts/venv.sh
echo "==> ruff check" >&2
"$VENV/bin/ruff" check --quiet kgit harness tests benchmarks scripts
echo "==> mypy" >&2
"$VENV/bin/python" -m mypy
exec "$VENV/bin/python" -m pytest -q -n auto --dist loadfile "${lane[@]}" "$@"
