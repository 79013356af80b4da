"""What a warm pair's profiler warm-up (kernelsplit.warm_up) costs later launches, per way of doing it.

A runner started ahead of need loads the profiler before the candidate arrives, so that the
per-kernel split does not pay for it after the timing (about 4 s on the H200). A session
with CUDA activity leaves CUPTI's callbacks behind it, and every later launch pays for them,
timed calls included. For each warm-up (none, a session with CPU activity only, a session
with CUDA activity), in a process of its own, this prints a small Triton kernel's device
time (events) and launch time (host) before and after the warm-up, and what a CUDA
profiler session (the split's) costs after it.

    python benchmarks/profiler_warmup.py [--calls 400]

Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tabulate import tabulate

KERNEL = Path(__file__).resolve().parents[1] / "harness" / "problems" / "vector_add" / "kernel.py"
MODES = ["none", "cpu", "cuda"]


def _one(mode: str, calls: int) -> list:
    import torch
    from torch.profiler import ProfilerActivity, profile

    spec = importlib.util.spec_from_file_location("vector_add_kernel", KERNEL)
    assert spec and spec.loader
    kernel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernel)
    data = (torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda"),
            torch.empty(1 << 20, device="cuda"))

    def bench() -> tuple[float, float]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        events, host = [], []
        for _ in range(calls):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            start.record()
            kernel.custom_kernel(data)
            end.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            events.append(start.elapsed_time(end) * 1e3)
            host.append((t1 - t0) * 1e6)
        return statistics.median(events), statistics.median(host)

    bench()
    before = bench()
    t0 = time.perf_counter()
    if mode != "none":
        activity = ProfilerActivity.CPU if mode == "cpu" else ProfilerActivity.CUDA
        with profile(activities=[activity]):
            torch.cuda._sleep(1)
            torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    after = bench()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]):
        kernel.custom_kernel(data)
        torch.cuda.synchronize()
    split = time.perf_counter() - t0
    return [mode, round(warm, 2), round(before[0], 2), round(after[0], 2), round(before[1], 1), round(after[1], 1),
            round(split, 2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one process's row
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(_one(args.mode, args.calls)))
        return
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU: CUPTI is what is measured")
    rows = []
    for mode in MODES:
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--calls", str(args.calls)],
                             check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; medians of {args.calls} calls, 1M-element vector_add")
    print(tabulate(rows, headers=["warm-up", "its s", "events us before", "after", "host us before", "after",
                                  "CUDA session after, s"]))


if __name__ == "__main__":
    main()
