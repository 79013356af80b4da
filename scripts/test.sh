#!/usr/bin/env bash
# Install kgit with its test dependencies into .venv (once), then run the test suite.
# GPU tests are skipped by the default marker expression; run them with: -m gpu
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
exec "$VENV/bin/python" -m pytest -q "$@"
