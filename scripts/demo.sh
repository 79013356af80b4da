#!/usr/bin/env bash
# Install kgit into .venv and run the main job on a shipped problem: a kernel repository
# (vector_add unless you name another) in ~/kgit-demo (or $KGIT_DEMO_DIR), then
# `kgit evolve` with the built-in offline strategist (no LLM, no API key). Without a
# GPU the kernels run in Triton's CPU interpreter.
#   bash scripts/demo.sh [PROBLEM] [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
problem="${1:-vector_add}"
iterations="${2:-2}"
# Outside this checkout: a kernel repository is a git repository of its own.
demo="${KGIT_DEMO_DIR:-$HOME/kgit-demo}"
kgit="$VENV/bin/kgit"
if [ ! -f "$demo/.kgit.yaml" ]; then
    "$kgit" init "$demo" --problem "$problem"
fi
cd "$demo"
"$kgit" evolve -n "$iterations"
"$kgit" log
echo
echo "successful experiments: git -C $demo log --all --grep speedup --oneline"
git log --all --grep speedup --oneline
echo
echo "kgit is installed in $VENV. To type \`kgit ...\` yourself: source $VENV/bin/activate"
echo "(or call $kgit), then: cd $demo && kgit report --open"
