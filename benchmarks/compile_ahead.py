"""What compiling a candidate's launches ahead (harness/precompile.py) saves its first calls, on a GPU.

For a problem's kernel, in fresh processes with a fresh Triton cache each, after kgit's own
warm-up (jitwarm, as a warm runner has it): the first call on every test shape, timed
without anything ahead ("control"), and after `precompile.compile_ahead` on CPU tensors of
the same layouts ("ahead"). Prints, per run, the compile_ahead report and wall time, the
first calls' seconds and Triton's compile() calls during them (a cache hit still calls it,
for milliseconds). Needs a GPU: the point is the device's own compiler.

    python benchmarks/compile_ahead.py                                   # fp8_blockscale_gemm's baseline, 2 runs each
    python benchmarks/compile_ahead.py --problem vector_add --runs 3
    python benchmarks/compile_ahead.py --kernel my_kernel.py --problem fp8_blockscale_gemm
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate


def one(problem_name: str, kernel_path: str | None, ahead: bool) -> dict:
    """In this (fresh) process: the first calls on the test shapes, with or without compile_ahead."""
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kgit-compile-ahead-")
    import torch
    import triton.compiler as triton_compiler

    from kgit_harness import jitwarm, precompile, problem

    folder = problem.shipped()[problem_name]
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "_kgit_bench_reference")
    kernel = problem.load_module(Path(kernel_path) if kernel_path else folder / "kernel.py", "_kgit_bench_kernel")
    jitwarm.before_device()
    torch.empty(1, device="cuda")
    jitwarm.after_device(torch)
    inputs = [reference.generate_input(**shape) for shape in task.shapes("tests", True)]
    torch.cuda.synchronize()

    compiles: list[float] = []
    compile_fn = triton_compiler.compile

    def counted(*args, **kwargs):
        started = time.perf_counter()
        try:
            return compile_fn(*args, **kwargs)
        finally:
            compiles.append(time.perf_counter() - started)

    triton_compiler.compile = counted  # JITFunction binds it on its first run, after this
    out: dict = {"shapes": len(inputs)}
    if ahead:
        def on_cpu(x):
            if isinstance(x, torch.Tensor):
                return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cpu")
            return type(x)(on_cpu(y) for y in x) if isinstance(x, (tuple, list)) else x

        started = time.perf_counter()
        out["report"] = precompile.compile_ahead(kernel.custom_kernel, [on_cpu(d) for d in inputs])
        out["ahead_s"] = time.perf_counter() - started
        compiles.clear()
    started = time.perf_counter()
    for data in inputs:
        kernel.custom_kernel(data)
    torch.cuda.synchronize()
    out["first_calls_s"] = time.perf_counter() - started
    out["compiles"] = [round(c, 3) for c in compiles]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="fp8_blockscale_gemm")
    parser.add_argument("--kernel", help="the candidate's kernel.py (default: the problem's baseline)")
    parser.add_argument("--runs", type=int, default=2, help="fresh processes per setting, alternating")
    parser.add_argument("--one", choices=["control", "ahead"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.problem, args.kernel, args.one == "ahead")))
        return
    rows = []
    for run in range(args.runs):
        for setting in ("control", "ahead"):
            command = [sys.executable, __file__, "--problem", args.problem, "--one", setting]
            if args.kernel:
                command += ["--kernel", args.kernel]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                sys.exit(f"{setting} run failed:\n{done.stderr[-3000:]}")
            r = json.loads(done.stdout.strip().splitlines()[-1])
            report = r.get("report") or {}
            rows.append([run + 1, setting, r["shapes"], f"{r['ahead_s']:.3f}" if "ahead_s" in r else "-",
                         ", ".join(f"{k} {v}" for k, v in report.items() if k != "failed") or "-",
                         f"{r['first_calls_s']:.3f}", " ".join(f"{c:.3f}" for c in r["compiles"]) or "-"])
    print(f"{args.problem}, {args.kernel or 'its baseline'}: the first call on each test shape, fresh Triton cache")
    print(tabulate(rows, headers=["run", "setting", "test shapes", "compile_ahead s", "its report", "first calls s",
                                  "compile() calls during them, s"], tablefmt="github"))


if __name__ == "__main__":
    main()
