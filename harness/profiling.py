"""The program a hardware profiler runs: the candidate on the problem's benchmark shapes.

Run as `python -I -B -m kgit_harness.profiling --problem DIR --candidate DIR --plan FILE`
under Nsight Compute or rocprofv3 (kgit/evaluation/profile.py builds the command).
It makes every shape's input, calls the candidate once per shape (compiling and
autotuning; its Triton launches are captured, so the plan says how many launches of
which kernels each shape makes), then calls it again per shape inside
cudaProfilerStart/Stop, the pass the profiler is meant to see. The plan is written
before the second pass, so kgit can tell the rows of that pass from the first.

This runs candidate code: kgit starts it with the evaluation's allowlisted
environment in a scratch folder, never in its own process.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kgit_harness import checking, problem, targets


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kgit_harness.profiling")
    parser.add_argument("--problem", required=True)
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--plan", required=True)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("kgit profile needs a GPU: torch sees none on this machine.", file=sys.stderr)
        return 2
    task = problem.load_task(Path(args.problem))
    reference = problem.load_module(Path(args.problem) / "reference.py", "_kgit_profile_reference")
    sys.path.insert(0, args.candidate)
    kernel = problem.load_module(Path(args.candidate) / task.files[0], "kernel_under_test").custom_kernel
    shapes = task.shapes("benchmarks", True)
    inputs, plan = [], {"device": torch.cuda.get_device_name(), "shapes": []}
    for shape in shapes:
        data = checking.make_input(reference, shape, shape.get("seed"))
        with targets.capture() as launches:
            kernel(data)
        torch.cuda.synchronize()
        plan["shapes"].append({"key": problem.shape_key(shape), "launches": launches.total,
                               "kernels": sorted({v.kernel for v in launches.variants}),
                               "shape": {k: v for k, v in shape.items() if k != "seed"}})
        inputs.append(data)
    Path(args.plan).write_text(json.dumps(plan))
    torch.cuda.profiler.start()
    for data in inputs:
        kernel(data)
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"kgit profiled {len(inputs)} shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
