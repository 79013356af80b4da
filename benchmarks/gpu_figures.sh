#!/usr/bin/env bash
# Every GPU figure the timing, trust and cost work asks for, in one run on a GPU host, each
# step's output kept under OUT (default ./gpu-figures) and its seconds printed. On an H200 the
# whole takes about 40 minutes; name steps to run fewer:
#   benchmarks/gpu_figures.sh [OUT] [STEP ...]
# steps: gpu-tests protocols breakdown evolve-rate adaptive fidelity campaign process-state profiler-warmup
#        costs-detail (default: all)
#   gpu-tests    pytest -m gpu (over 400 s; on a machine that allows 10 minutes a command, run its
#                two halves in two commands: gpu-tests-trust, then gpu-tests-rest)
#   gpu-tests-trust  the cheats, sandbox, protocols, racing and kernel-split gpu tests (about 390 s)
#   gpu-tests-rest   the other gpu tests (real problems, profiles, targets, backends, report, fp8, evolve)
#   protocols    the fp8 baseline and the shipped campaign's best under each kgit protocol and
#                under GPU MODE's amd/eval.py (KGIT_UPSTREAM: a reference-kernels checkout,
#                default ../shared/upstream/gpumode), the judge's per-call costs, the plot
#   breakdown    one evaluation stage by stage, cold and warm: vector_add and fp8
#   evolve-rate  seconds per fp8 attempt in an offline `kgit evolve -n 6`, and 4 stopped
#                attempts run again in full (what racing threw away); then -n 6 with three
#                warm pairs ahead per slot instead of two (--spares 3)
#   adaptive     the breakdown and the evolve rate of fp8 under `kgit-adaptive` (the protocol
#                the cost issue's 10.9 s was measured under), -n 3 to keep it short
#   fidelity     kgit's figures against plain timing loops, and their repeatability
#   costs-detail  the fp8 baseline's first Triton calls in a fresh cache, cold and after kgit's
#                warm-up (jit_costs.py), with and without its launches compiled ahead
#                (compile_ahead.py), and each shape's spread of one call under its protocol
#                (shape_spread.py): where the checks' and the timed loop's seconds come from
#   campaign     the shipped campaign's baseline and experiment 47 re-measured under the fp8
#                problem's protocol (examples/fp8-h200/remeasure.sh 0 47)
#   process-state  the baseline and experiment 47 in upstream's loop, kgit's circumstances added one
#                at a time (two processes, the context switch, the allocator's state)
#   profiler-warmup  what the warm pair's profiler warm-up leaves on later launches, per way of doing it
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-figures}"
shift || true
steps=("$@")
((${#steps[@]})) || steps=(gpu-tests protocols breakdown evolve-rate adaptive fidelity campaign process-state profiler-warmup
                           costs-detail)
upstream="${KGIT_UPSTREAM:-../shared/upstream/gpumode}"
trust_tests=(tests/test_cheats.py tests/test_harness.py tests/test_sandbox.py tests/test_protocols.py
             tests/test_racing.py tests/test_kernelsplit.py)
mkdir -p "$out"
python -c 'import torch; print("device:", torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (figures below are the interpreter'"'"'s, not a GPU'"'"'s)")'

run() {  # run NAME COMMAND...: its output to the terminal and to OUT/NAME.txt, then its seconds
    local name=$1 start=$SECONDS
    shift
    echo "== $name: $*"
    "$@" 2>&1 | tee "$out/$name.txt"
    echo "== $name: exit ${PIPESTATUS[0]}, $((SECONDS - start)) s"
}

for step in "${steps[@]}"; do
    case "$step" in
        gpu-tests) run gpu-tests python -m pytest -m gpu -q -p no:cacheprovider tests/ ;;
        gpu-tests-trust) run gpu-tests-trust python -m pytest -m gpu -q -p no:cacheprovider "${trust_tests[@]}" ;;
        gpu-tests-rest) run gpu-tests-rest python -m pytest -m gpu -q -p no:cacheprovider tests/ \
                            $(printf -- '--ignore=%s ' "${trust_tests[@]}") ;;
        protocols)
            run protocols python benchmarks/protocol_compare.py --upstream "$upstream" --costs \
                --protocols gpumode-leaderboard-wall gpumode-leaderboard-events kgit-adaptive \
                --json "$out/protocols.json"
            run protocol-plot python benchmarks/protocol_plot.py "$out/protocols.json" -o "$out/protocols.png" ;;
        breakdown)
            run breakdown python benchmarks/eval_breakdown.py --problems vector_add fp8_blockscale_gemm \
                --repeats 2 --warm-wait 8 ;;
        evolve-rate)
            run evolve-rate python benchmarks/evolve_rate.py --problem fp8_blockscale_gemm -n 6 --warm on \
                --rerun-stopped 4
            run evolve-rate-spares3 python benchmarks/evolve_rate.py --problem fp8_blockscale_gemm -n 6 \
                --warm on --spares 3 ;;
        adaptive)
            run breakdown-adaptive python benchmarks/eval_breakdown.py --problems fp8_blockscale_gemm \
                --repeats 1 --warm-wait 8 --protocol kgit-adaptive
            run evolve-rate-adaptive python benchmarks/evolve_rate.py --problem fp8_blockscale_gemm -n 3 \
                --warm on --protocol kgit-adaptive ;;
        fidelity) run fidelity python benchmarks/harness_fidelity.py ;;
        costs-detail)
            run jit-costs-cold python benchmarks/jit_costs.py --problem fp8_blockscale_gemm
            run jit-costs-warm python benchmarks/jit_costs.py --problem fp8_blockscale_gemm --warm
            run compile-ahead python benchmarks/compile_ahead.py --problem fp8_blockscale_gemm
            run shape-spread python benchmarks/shape_spread.py --problem fp8_blockscale_gemm --runs 2 ;;
        process-state) run process-state python benchmarks/process_state.py ;;
        profiler-warmup) run profiler-warmup python benchmarks/profiler_warmup.py ;;
        campaign) KGIT_REMEASURE_DIR="$(mktemp -d)" run campaign examples/fp8-h200/remeasure.sh 0 47 ;;
        *) echo "unknown step '$step'; the steps are: gpu-tests gpu-tests-trust gpu-tests-rest protocols breakdown evolve-rate adaptive fidelity campaign process-state profiler-warmup costs-detail" >&2
           exit 2 ;;
    esac
done
