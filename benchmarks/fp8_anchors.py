"""The anchor table of the fp8_blockscale_gemm problem, re-measured in one run.

On one GPU, over the problem's 18 benchmark shapes (geometric mean of per-shape means):

  reference      dequantize + fp32 matmul (reference.py's ref_kernel)
  baseline       the shipped Triton kernel, as shipped
  swept          the same kernel, best of a small grid of tile sizes, warps and stages
  K-major        A and B copied to K-major first (copies timed), then the kernel, swept
  K-major kernel the same, the kernel alone on inputs already K-major
  cuBLASLt       torch._scaled_mm with one scale per tensor (no block scales): an
                 optimistic vendor ceiling, not a solution of the problem
  floor          2mnk at the fp8 rate measured here with _scaled_mm on 8192^3

and beside them kgit's own figure for the baseline, through kgit.evaluate (the child
harness: fresh inputs, L2 flush, re-checks), as `kgit init` would measure it.

    python benchmarks/fp8_anchors.py [--json anchors.json]

Every Triton variant's output is checked with the problem's check_implementation
before it is timed. Finishes in about 5 minutes on an H200. Without a GPU it runs a
smoke version (interpreter, the problem's CPU shapes, two configurations) whose
timings mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Figures an earlier H200 run of this script gave (us, geomean of the 18 benchmarks), printed for comparison.
EARLIER_H200 = {"reference": 1018, "baseline": 456, "swept": 377, "K-major": 172, "cuBLASLt": 44, "floor": 26}
# (BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES, GROUP_M); the first is kernel.py's default.
# Kept small so the whole run fits in about 5 minutes: every entry compiles once per layout.
GRID = [
    (64, 128, 128, 4, 3, 8), (128, 128, 128, 8, 3, 8), (128, 128, 128, 4, 4, 8), (64, 256, 128, 8, 3, 8),
    (128, 256, 128, 8, 3, 8), (64, 128, 128, 4, 5, 8), (128, 64, 128, 4, 4, 8), (128, 128, 64, 4, 4, 8),
]
FLUSH_BYTES = 256 * 1024 * 1024
TUNABLES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "NUM_WARPS", "NUM_STAGES", "GROUP_M")


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Timer:
    """Device events around each call with L2 flushed first; the host clock on the CPU."""

    def __init__(self, torch, budget_s: float):
        self.torch, self.budget_s = torch, budget_s
        self.gpu = torch.cuda.is_available()
        if self.gpu:
            self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def mean_us(self, fn, warmup: int = 2, min_reps: int = 5, max_reps: int = 200) -> float:
        torch = self.torch
        for _ in range(warmup):
            fn()
        times = []
        started = time.perf_counter()
        while len(times) < min_reps or (len(times) < max_reps and time.perf_counter() - started < self.budget_s):
            if self.gpu:
                self.flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) * 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
        return statistics.fmean(times)


def geomean(values):
    values = [v for v in values if v is not None]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def configure(kernel, config):
    for name, value in zip(TUNABLES, config):
        setattr(kernel, name, value)


def sweep(torch, timer, ref, kernel, data, pristine, grid, prepare=None) -> dict:
    """Mean time of the kernel on `prepare(data)` per configuration of `grid`; failing ones are left out."""
    times = {}
    inputs = prepare(data) if prepare else data
    for config in grid:
        configure(kernel, config)
        try:
            out = kernel.custom_kernel(inputs)
            if timer.gpu:
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - e.g. out of shared memory for this tile: skip the config
            print(f"    config {config} failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}", file=sys.stderr)
            continue
        ok, message = ref.check_implementation(pristine, out)
        if not ok:
            print(f"    config {config} is WRONG, skipped: {message}", file=sys.stderr)
            continue
        times[config] = timer.mean_us(lambda: kernel.custom_kernel(inputs))
    return times


def best(times: dict) -> tuple[float | None, tuple | None]:
    config = min(times, key=times.get, default=None)
    return (times[config] if config else None), config


def k_major(data):
    a, b, a_scale, b_scale, c = data
    return a.contiguous(), b.contiguous(), a_scale, b_scale, c


def fp8_rate_tflops(torch, timer, fp8) -> float | None:
    if not timer.gpu:
        return None
    n = 8192
    a = torch.randn(n, n, device="cuda").to(fp8)
    b = torch.randn(n, n, device="cuda").to(fp8)
    one = torch.ones((), device="cuda")
    us = timer.mean_us(lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                       warmup=5, min_reps=20)
    return 2 * n ** 3 / us / 1e6


def vendor_figures(torch, timer, data, dims, rate) -> dict:
    """cuBLASLt on K-major copies with one scale per tensor, and the floor at the measured fp8 rate."""
    a, b = data[0].contiguous(), data[1].contiguous()
    one = torch.ones((), device="cuda")
    return {"cuBLASLt": timer.mean_us(
                lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)),
            "floor": 2 * dims["m"] * dims["n"] * dims["k"] / rate / 1e6}


def harness_figure(problem_dir: Path, on_gpu: bool) -> dict:
    import yaml

    from kgit import config as config_mod
    from kgit.evaluation import child

    data = yaml.safe_load(config_mod.default_text())
    if not on_gpu:
        data["timing"] = {"target_rse": 0.5, "max_time_s": 0.05, "min_reps": 2, "warmup": 0}
    config = config_mod.parse(yaml.safe_dump(data), "default configuration")
    with tempfile.TemporaryDirectory(prefix="fp8-anchors-") as scratch:
        scratch = Path(scratch)
        staged_problem, candidate = child.stage_candidate(problem_dir, ".", ["kernel.py"], scratch)
        return child.run_child(staged_problem, candidate, config, scratch)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="Also write every figure to this file.")
    parser.add_argument("--budget-s", type=float, default=0.05, help="Timing budget per measurement (s).")
    parser.add_argument("--vendor-only", action="store_true",
                        help="Only the cuBLASLt and floor figures per shape (under a minute on an H200).")
    args = parser.parse_args(argv)

    import torch

    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernel's @triton.jit runs
    from tabulate import tabulate

    from kgit_harness.problem import load_task, shape_key, shipped

    problem_dir = shipped()["fp8_blockscale_gemm"]
    ref = load(problem_dir / "reference.py", "fp8_reference")
    kernel = load(problem_dir / "kernel.py", "fp8_kernel")
    task = load_task(problem_dir)
    assert tuple(getattr(kernel, n) for n in TUNABLES) == GRID[0], "GRID[0] must be kernel.py's configuration"
    shapes = task.shapes("benchmarks", on_gpu)
    grid = GRID if on_gpu else GRID[:2]
    timer = Timer(torch, args.budget_s)
    device = torch.cuda.get_device_name() if on_gpu else "cpu (smoke run: timings mean nothing)"
    print(f"device: {device}; torch {torch.__version__}; {len(shapes)} shapes; {len(grid)} configurations swept",
          file=sys.stderr)
    started = time.perf_counter()

    rate = fp8_rate_tflops(torch, timer, ref.fp8_dtype())
    rows = []
    for shape in shapes:
        dims = {k: v for k, v in shape.items() if k != "seed"}
        data = ref.generate_input(**shape)
        pristine = tuple(t.clone() for t in data)
        row = {"key": shape_key(shape)}
        if args.vendor_only:
            if on_gpu:
                row.update(vendor_figures(torch, timer, data, dims, rate))
            rows.append(row)
            continue
        row["reference"] = timer.mean_us(lambda data=data: ref.ref_kernel(data))
        times = sweep(torch, timer, ref, kernel, data, pristine, grid)
        row["baseline"] = times.get(GRID[0])  # the grid starts with kernel.py's own configuration
        row["swept"], row["swept_config"] = best(times)
        row["K-major kernel"], config = best(sweep(torch, timer, ref, kernel, data, pristine, grid, k_major))
        row["K-major_config"] = config
        if config is not None:
            configure(kernel, config)
            row["K-major"] = timer.mean_us(lambda data=data: kernel.custom_kernel(k_major(data)))
        if on_gpu:
            row.update(vendor_figures(torch, timer, data, dims, rate))
        rows.append(row)
        print(f"  {row['key']}: " + ", ".join(f"{k} {row[k]:.1f}" for k in
                                              ("reference", "baseline", "swept", "K-major") if row.get(k)),
              file=sys.stderr)
        del data, pristine
    if args.vendor_only:
        names = ["cuBLASLt", "floor"]
        print(f"fp8_blockscale_gemm vendor figures on {device}; measured fp8 rate {rate or 0:.0f} TFLOP/s")
        print(tabulate([[r["key"]] + [r.get(n) for n in names] for r in rows]
                       + [["geomean"] + [geomean([r.get(n) for r in rows]) if on_gpu else None for n in names]],
                       headers=["shape"] + names, floatfmt=".1f", missingval="n/a"))
        return 0
    configure(kernel, GRID[0])
    sweep_s = time.perf_counter() - started

    doc = harness_figure(problem_dir, on_gpu)
    harness = {s["key"]: s.get("mean_us") for s in doc.get("shapes") or []}

    names = ["reference", "baseline", "swept", "K-major", "K-major kernel", "cuBLASLt", "floor"]
    summary = []
    for name in names:
        g = geomean([r.get(name) for r in rows]) if all(r.get(name) for r in rows) else None
        summary.append([name, g, EARLIER_H200.get(name), (geomean([r["baseline"] for r in rows]) / g) if g else None])
    summary.append(["kgit harness, baseline", doc.get("geomean_us"), EARLIER_H200["baseline"],
                    (geomean([r["baseline"] for r in rows]) / doc["geomean_us"]) if doc.get("geomean_us") else None])
    print(f"\nfp8_blockscale_gemm anchors on {device}" + (f"; measured fp8 rate {rate:.0f} TFLOP/s" if rate else ""))
    print(tabulate(summary, headers=["anchor", "geomean us", "earlier H200 run", "baseline / this"],
                   floatfmt=".1f", missingval="n/a"))
    if doc["status"] != "ok":
        print(f"\nthe harness run ended {doc['status']}: {(doc.get('error') or '')[:500]}")
    detail = [[r["key"]] + [r.get(n) for n in names] + [harness.get(r["key"])] for r in rows]
    print("\nper shape (mean us):")
    print(tabulate(detail, headers=["shape"] + names + ["harness"], floatfmt=".1f", missingval="n/a"))
    print("\nbest configurations (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, GROUP_M):")
    print(tabulate([[r["key"], r["swept_config"], r["K-major_config"]] for r in rows],
                   headers=["shape", "swept", "K-major"]))
    print(f"\nsweeps {sweep_s:.0f} s, harness run {doc.get('eval_s') or 0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"device": device, "fp8_tflops": rate, "rows": rows,
                                          "summary": summary, "harness": {k: doc.get(k) for k in (
                                              "status", "geomean_us", "shapes", "tests", "device", "eval_s")}},
                                         indent=2, default=str))
    return 0 if doc["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
