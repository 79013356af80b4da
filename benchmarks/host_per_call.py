"""Host time per call of a kernel file, outside the runner, bare and under the runner's guards (GPU).

    python benchmarks/host_per_call.py KERNEL.py [--problem fp8_blockscale_gemm] [--inputs 16]

On a launch-bound shape the judge's clock over back-to-back calls is the host's time per
call, so what the guards add to a wrapper's host work is added to its figure. For every
benchmark shape of the problem this calls the kernel back to back on `--inputs` input
tuples (as the judge's batch does: the same tuples each sample), median of 7, and prints
microseconds per call: the GPU time (triton.testing.do_bench), the host time and the
back-to-back wall time bare, with the audit hook installed, and under the guards every
call of the runner's has (one `armed()` for every kind of call).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from tabulate import tabulate

from kgit_harness import problem


def per_call(kernel, datas, armed=None) -> tuple[float, float]:
    """(host us, back-to-back wall us) per call, median of 7 passes over `datas`."""
    hosts, walls = [], []
    for _ in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if armed is None:
            for d in datas:
                kernel(d)
        else:
            with armed():
                for d in datas:
                    kernel(d)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        hosts.append((t1 - t0) * 1e6 / len(datas))
        walls.append((t2 - t0) * 1e6 / len(datas))
    return statistics.median(hosts), statistics.median(walls)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel", type=Path)
    parser.add_argument("--problem", default="fp8_blockscale_gemm")
    parser.add_argument("--inputs", type=int, default=16)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("host_per_call.py needs a GPU: back-to-back calls are launch-bound only there")
    from triton.testing import do_bench

    folder = problem.shipped()[args.problem]
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "reference_" + args.problem)
    candidate = problem.load_module(args.kernel, "candidate")
    cases = []
    for shape in task.benchmarks:
        sizes = {k: v for k, v in shape.items() if k != "seed"}
        datas = [reference.generate_input(**sizes, seed=int(shape.get("seed", 1)) + i) for i in range(args.inputs)]
        for d in datas[:3]:
            candidate.custom_kernel(d)
        cases.append((problem.shape_key(shape), datas))
    torch.cuda.synchronize()
    bare = [per_call(candidate.custom_kernel, d) for _, d in cases]
    from kgit_harness.guards import Guards

    guards = Guards(torch, list(task.forbidden or []), None)  # installs the audit hook for good
    guards.snapshot_threads()
    hook = [per_call(candidate.custom_kernel, d) for _, d in cases]
    guarded = [per_call(candidate.custom_kernel, d, guards.armed) for _, d in cases]
    gpu = [do_bench(lambda d=d: candidate.custom_kernel(d[0]), warmup=25, rep=100) * 1e3 for _, d in cases]
    rows = [[key, g, b[0], b[1], h[0], t[0], t[1]]
            for (key, _), g, b, h, t in zip(cases, gpu, bare, hook, guarded)]
    geo = ["geomean"] + [statistics.geometric_mean(column) for column in list(zip(*rows))[1:]]
    print(f"{args.kernel} on {torch.cuda.get_device_name()}, {args.inputs} input tuples, torch {torch.__version__}")
    print(tabulate(rows + [geo], floatfmt=".1f",
                   headers=["shape", "GPU (do_bench)", "bare host", "bare b2b", "audit hook host",
                            "guarded host", "guarded b2b"]))


if __name__ == "__main__":
    main()
