"""Does the timing process's own allocator state explain kgit's wall figure against upstream's?

On the H200 the shipped campaign's experiment 47 took 1724.9 us a call (geomean) under GPU
MODE's amd/eval.py and 689.4 us under kgit's gpumode-leaderboard-wall protocol, while the
baseline took 631.6 against 883.9 (docs/harness.md). Experiment 47 captures a CUDA graph on
every new input tuple, and `torch.cuda.graph` empties the caching allocator on each capture:
its cost is the cudaFree of every cached block the process holds. Upstream's timing process
makes each call's inputs, their clones and the check's temporaries itself, so its cache is full
of freed blocks; kgit's runner gets its inputs in the judge's arena and caches almost nothing.

This times the same fresh-input, wall-clock loop (synchronize, clock, call, synchronize, as
amd/eval.py's leaderboard mode) in one process four ways, per shape:

- upstream-like: each call's inputs made in this process just before it, checked after it,
  then dropped (what amd/eval.py does);
- + empty_cache: the same, with torch.cuda.empty_cache() before the clock starts;
- arena-like: every call's inputs made ahead, each in buffers of its own, none freed in between
  (what kgit's runner sees);
- upstream-like again: the first column repeated, for the run-to-run spread.

If the first column is far above the other two for experiment 47 and not for the baseline,
the cause is the process's allocator state, and a protocol that wants upstream's figure has to
reproduce it in the runner.

    python benchmarks/process_state.py                    # baseline and exp47, 3 shapes (H200)
    python benchmarks/process_state.py --kernels exp47 --reps 30

Needs a GPU: the interpreter on the CPU neither captures graphs nor caches device memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

from protocol_compare import PROBLEM_DIR, kernel_sources
from tabulate import tabulate

# A launch-bound shape, a mid one and a large one of the fp8 problem's benchmark set.
SHAPES = [(1024, 7168, 256, 5364), (6144, 4096, 512, 45245), (6144, 7168, 2048, 76547)]


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _clone(data):
    return tuple(x.clone() for x in data)


def upstream_like(torch, ref, kernel, shape, reps: int, empty_first: bool) -> float:
    m, n, k, seed = shape
    data = ref.generate_input(m, n, k, seed)
    check = _clone(data)
    ok, why = ref.check_implementation(check, kernel.custom_kernel(data))
    if not ok:
        raise SystemExit(f"the first call is wrong: {why}")
    times = []
    for _ in range(reps):
        seed += 13
        data = ref.generate_input(m, n, k, seed)
        check = _clone(data)
        if empty_first:
            torch.cuda.empty_cache()
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        out = kernel.custom_kernel(data)
        torch.cuda.synchronize()
        times.append(time.perf_counter_ns() - start)
        ok, why = ref.check_implementation(check, out)
        if not ok:
            raise SystemExit(f"a timed call is wrong: {why}")
        del out
    return statistics.fmean(times) / 1e3


def arena_like(torch, ref, kernel, shape, reps: int) -> float:
    m, n, k, seed = shape
    inputs = [ref.generate_input(m, n, k, seed + 13 * i) for i in range(reps + 1)]
    kernel.custom_kernel(inputs[0])
    times = []
    for data in inputs[1:]:
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        kernel.custom_kernel(data)
        torch.cuda.synchronize()
        times.append(time.perf_counter_ns() - start)
    return statistics.fmean(times) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", nargs="+", default=["baseline", "exp47"],
                        help="baseline, exp47, or paths to kernel files")
    parser.add_argument("--reps", type=int, default=20, help="timed calls per column and shape")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA or ROCm GPU: the interpreter neither captures graphs nor caches device memory")
    sys.path.insert(0, str(PROBLEM_DIR))
    ref = _module(PROBLEM_DIR / "reference.py", "fp8_reference")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, source in kernel_sources(args.kernels, Path(tmp)).items():
            path = Path(tmp) / f"{name}.py"
            path.write_text(source)
            kernel = _module(path, f"kernel_{name}")
            for shape in SHAPES:
                figures = [upstream_like(torch, ref, kernel, shape, args.reps, False),
                           upstream_like(torch, ref, kernel, shape, args.reps, True),
                           arena_like(torch, ref, kernel, shape, args.reps),
                           upstream_like(torch, ref, kernel, shape, args.reps, False)]
                rows.append([name, "x".join(map(str, shape[:3])), *(round(f, 1) for f in figures)])
                print(*rows[-1], flush=True)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}; mean us a call over {args.reps} calls")
    print(tabulate(rows, headers=["kernel", "shape", "upstream-like", "+ empty_cache first", "arena-like",
                                  "upstream-like again"]))


if __name__ == "__main__":
    main()
