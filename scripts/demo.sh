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
if ! git -C "$demo" rev-parse -q --verify refs/tags/kgit/baseline >/dev/null 2>&1; then
    # No archive yet; an earlier demo that stopped before its first commit left only files.
    force=()
    [ -e "$demo/.kgit.yaml" ] && force=(--force)
    "$kgit" init "$demo" --problem "$problem" "${force[@]}"
fi
cd "$demo"
echo "==> kgit evolve -n $iterations: $iterations iteration(s) of the offline strategist (no LLM)"
"$kgit" evolve -n "$iterations"
"$kgit" log
echo
speedups="$(git log --all --grep speedup --oneline)"
if [ -n "$speedups" ]; then
    echo "Real speedups (beyond the noise, on a GPU): git -C $demo log --all --grep speedup --oneline"
    echo "$speedups"
else
    echo "No speedup is claimed: without a GPU the kernels ran in Triton's interpreter on the CPU, which"
    echo "shows that they are correct, not how fast they are. On a GPU, \`git log --all --grep speedup\`"
    echo "lists the real ones (\`kgit remeasure --all\` there measures these)."
fi
echo
echo "What this showed: kgit evolve tried $problem's marked tunables with the offline strategist; every"
echo "experiment is a branch kgit/N-... of $demo, one commit per attempt (failures too), and the"
echo "table above is \`kgit log\`."
echo "Next: source $VENV/bin/activate (or call $kgit), then cd $demo and try"
echo "  kgit show 1; kgit report --open; kgit evolve --model anthropic/claude-sonnet-4-5 -n 3 (an LLM, its key"
echo "  in ANTHROPIC_API_KEY); docs/evolve.md says more."
