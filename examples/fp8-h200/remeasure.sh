#!/usr/bin/env bash
# Re-measure the shipped campaign under the fp8 problem's protocol (GPU MODE's leaderboard wall
# clock) on this host's GPU, in a throwaway copy of the archive, and print what kgit then ranks.
#   examples/fp8-h200/remeasure.sh              every correct attempt (about 40 evaluations)
#   examples/fp8-h200/remeasure.sh 0 47         the baseline (0 = kgit/baseline) and experiment 47
# The notes it writes stay in the copy (printed at the end); the bundle is not changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${KGIT_REMEASURE_DIR:-$(mktemp -d)}"
protocol="${KGIT_PROTOCOL:-gpumode-leaderboard-wall}"
git init -q -b unborn "$work/fp8"
cd "$work/fp8"
git fetch -q "$here/kgit-fp8.bundle" 'refs/*:refs/*'
git checkout -q master
revs=()
for rev in "$@"; do
    if [[ "$rev" == 0 ]]; then revs+=(kgit/baseline); else revs+=("$rev"); fi
done
if ((${#revs[@]} == 0)); then
    kgit remeasure --all --protocol "$protocol"
else
    kgit remeasure --protocol "$protocol" "${revs[@]}"
fi
kgit log --devices
kgit best
echo "archive with the new notes: $work/fp8"
