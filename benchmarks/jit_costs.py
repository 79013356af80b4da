"""What a runner's first calls of a Triton kernel cost in a fresh Triton cache, as each runner has one.

Runs in this process, with TRITON_CACHE_DIR a new empty folder (or --cache, to see a second
process on a filled one), and prints the seconds of: importing torch and triton, the device
context, Triton's driver helper (a C module the host's compiler builds), kgit's warm-up
compile (harness/jitwarm.py, with --warm), then the first call of the problem's baseline on
each of its test shapes, naming every C build (the driver helper, a kernel's launcher) that
happened inside. GPU only: Triton's interpreter compiles nothing.

    python benchmarks/jit_costs.py --problem fp8_blockscale_gemm            # cold, as a cold runner
    python benchmarks/jit_costs.py --problem fp8_blockscale_gemm --warm     # as a runner started ahead
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="fp8_blockscale_gemm")
    parser.add_argument("--cache", help="the Triton cache folder (default: a new empty one)")
    parser.add_argument("--warm", action="store_true", help="do kgit's warm-up first (harness/jitwarm.py)")
    args = parser.parse_args()
    os.environ["TRITON_CACHE_DIR"] = args.cache or tempfile.mkdtemp(prefix="kgit-jit-costs-")
    rows: list[tuple[str, float, str]] = []
    builds: list[str] = []  # the C builds (Triton's _build) inside the step being timed

    def timed(label, fn):
        builds.clear()
        t0 = time.perf_counter()
        value = fn()
        rows.append((label, time.perf_counter() - t0, ", ".join(builds)))
        return value

    torch = timed("import torch", lambda: __import__("torch"))
    if not torch.cuda.is_available():
        sys.exit("jit_costs.py needs a GPU: Triton's interpreter compiles nothing.")
    triton = timed("import triton", lambda: __import__("triton"))
    import triton.runtime.build as build

    original = build._build

    def counted(name, *a, **k):
        t0 = time.perf_counter()
        try:
            return original(name, *a, **k)
        finally:
            builds.append(f"{name} {time.perf_counter() - t0:.2f} s")

    build._build = counted
    for module in list(sys.modules.values()):  # modules that imported _build by name
        if getattr(module, "_build", None) is original and getattr(module, "__name__", "").startswith("triton"):
            module._build = counted
    from kgit_harness import jitwarm, problem

    if args.warm:
        timed("kgit warm-up: driver helper (before the device)", jitwarm.before_device)
    timed("device context", lambda: torch.empty(1, device="cuda"))
    if args.warm:
        timed("kgit warm-up: a compile for the device", lambda: jitwarm.after_device(torch))
    timed("driver helper", lambda: triton.runtime.driver.active.utils)
    folder = Path(__file__).resolve().parent.parent / "harness" / "problems" / args.problem
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "_jit_costs_reference")
    kernel = problem.load_module(folder / task.files[0], "_jit_costs_kernel")
    for shape in task.shapes("tests", on_gpu=True):
        data = reference.generate_input(**shape)
        torch.cuda.synchronize()

        def call():
            kernel.custom_kernel(data)
            torch.cuda.synchronize()

        timed(f"first call, {problem.shape_key(shape)}", call)
    print(f"Triton {triton.__version__}, {torch.cuda.get_device_name()}, cache {os.environ['TRITON_CACHE_DIR']}")
    width = max(len(label) for label, _, _ in rows)
    for label, seconds, built in rows:
        print(f"{label:<{width}}  {seconds:6.3f} s  {built}")
    print(f"{'all':<{width}}  {sum(s for _, s, _ in rows):6.3f} s")


if __name__ == "__main__":
    main()
