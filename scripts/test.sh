#!/usr/bin/env bash
# Install kgit with its test dependencies into .venv (once), then run the test suite.
# GPU tests are skipped by the default marker expression; run them with: -m gpu
# Test files are spread over pytest-xdist workers, one per core, each file whole on one
# worker so its module fixtures are built once (tests/conftest.py says how many workers;
# -m gpu runs serially); -n 0 turns it off.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
exec "$VENV/bin/python" -m pytest -q -n auto --dist loadfile "$@"
