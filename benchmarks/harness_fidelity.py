"""How far the harness's timings can be trusted, on a GPU (written for the H200).

Three figures, each against its goal:

1. Agreement with triton.testing.do_bench on the shipped baselines: per benchmark
   shape, the harness's statistic over do_bench's (same statistic, do_bench flushes
   its cache before each call too). Goal: geometric mean within 3% of 1.
2. Repeatability: the same kernel evaluated twice, per shape |a - b| / a.
   Goal: under 0.5% (geometric mean over shapes).
3. Fixed overhead of one evaluation: the wall time of a full evaluation through
   kgit.evaluate.run_child (judge start, runner start, result) with the shortest timing
   settings, next to the bare `python -I -c "import torch, triton"` start.

The harness runs through kgit.evaluate.run_child, exactly as `kgit try` runs it (a
judge process and its runner, docs/harness.md), with the default timing settings of
.kgit.yaml unless given others. Per shape it also prints the judge's own clock over
back-to-back calls next to the runner's events, which clock ranked the shape (`events`,
or `judge` for a launch-bound shape), and the flushed events' own ratio to do_bench.

    python benchmarks/harness_fidelity.py                       # vector_add and softmax
    python benchmarks/harness_fidelity.py --problems vector_add --stat median
    python benchmarks/harness_fidelity.py --wall-only           # figure 3 alone; runs on the CPU too
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from kgit import config as config_mod
from kgit.evaluation import child
from kgit_harness import problem as problem_mod


def evaluate_baseline(name: str, config) -> dict:
    folder = problem_mod.shipped()[name]
    task = problem_mod.load_task(folder)
    scratch = Path(tempfile.mkdtemp(prefix="fidelity-"))
    try:
        shutil.copytree(folder, scratch / "problem")
        (scratch / "candidate").mkdir()
        for f in task.files:
            shutil.copy2(folder / f, scratch / "candidate" / f)
        doc = child.run_child(scratch / "problem", scratch / "candidate", config, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if doc["status"] != "ok":
        sys.exit(f"{name}: the baseline did not pass ({doc['status']} {doc.get('reason') or ''}):\n"
                 f"{doc.get('error')}\n{doc.get('stderr', '')[-2000:]}")
    return doc


def do_bench_us(name: str, shape: dict, stat: str) -> float:
    import torch
    import triton.testing

    folder = problem_mod.shipped()[name]
    namespace, reference = {}, {}
    exec(compile((folder / "kernel.py").read_text(), str(folder / "kernel.py"), "exec"), namespace)
    exec(compile((folder / "reference.py").read_text(), str(folder / "reference.py"), "exec"), reference)
    data = reference["generate_input"](**shape)
    kernel = namespace["custom_kernel"]
    kernel(data)
    torch.cuda.synchronize()
    return triton.testing.do_bench(lambda: kernel(data), warmup=100, rep=500, return_mode=stat) * 1e3


def wall_times(config, repeats: int, cpu: list | None = None) -> list[float]:
    """Seconds for whole vector_add evaluations with the shortest timing settings.

    `cpu`, if given, receives each evaluation's CPU seconds (user + system, of every
    process it started): the figure that decides the wall time on a saturated host.
    """
    fast = replace(config, timing=replace(config.timing, min_reps=1, warmup=0, max_time_s=0.0))
    walls = []
    for _ in range(repeats):
        before = os.times()
        started = time.perf_counter()
        evaluate_baseline("vector_add", fast)
        walls.append(time.perf_counter() - started)
        after = os.times()
        if cpu is not None:
            cpu.append(after.children_user + after.children_system - before.children_user - before.children_system)
    return walls


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def import_floor_s() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-c", "import torch, triton; torch.cuda.init()"], check=True)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", default=["vector_add", "softmax"])
    parser.add_argument("--stat", choices=["mean", "median", "min"], default="mean",
                        help="statistic compared (the problems rank by mean)")
    parser.add_argument("--wall-only", action="store_true",
                        help="only the wall time of one vector_add evaluation (works without a GPU)")
    parser.add_argument("--repeats", type=int, default=3, help="evaluations for the wall time (best of)")
    parser.add_argument("--no-wall", action="store_true", help="skip the wall-time figures (about half a minute)")
    parser.add_argument("--targets", nargs="*", metavar="TARGET",
                        help="build targets compiled beside the evaluation (default: the problem's; none: no "
                             "cross-compiles, to see what they cost the timing)")
    args = parser.parse_args()

    import torch

    config = config_mod.parse(config_mod.default_text())
    if args.targets is not None:
        config = replace(config, targets=list(args.targets))
    if args.wall_only:
        cpu = []
        walls = wall_times(config, args.repeats, cpu)
        print(f"one evaluation, vector_add, shortest timing, on {'the GPU' if torch.cuda.is_available() else 'the CPU'}: "
              f"best {min(walls):.2f} s, median {sorted(walls)[len(walls) // 2]:.2f} s of {len(walls)} "
              f"({', '.join(f'{w:.2f}' for w in walls)}); CPU seconds of its processes: median "
              f"{sorted(cpu)[len(cpu) // 2]:.2f} ({', '.join(f'{c:.2f}' for c in cpu)}); {os.cpu_count()} cores, "
              f"load {os.getloadavg()[0]:.1f}")
        return

    if not torch.cuda.is_available():
        sys.exit("harness_fidelity needs a CUDA or ROCm GPU: interpreter timings on the CPU are not meaningful "
                 "(--wall-only runs without one).")
    from tabulate import tabulate
    print(f"device: {torch.cuda.get_device_name()}; timing {config.timing}; statistic: {args.stat}\n")

    rows, ratios, spreads, large, event_ratios = [], [], [], [], []
    for name in args.problems:
        first, second = evaluate_baseline(name, config), evaluate_baseline(name, config)
        again = {s["key"]: s for s in second["shapes"]}
        task = problem_mod.load_task(problem_mod.shipped()[name])
        for shape, entry in zip(task.benchmarks, first["shapes"]):
            ours = entry[f"{args.stat}_us"]
            events = entry.get(f"events_{args.stat}_us", ours)
            theirs = do_bench_us(name, shape, args.stat)
            other = again[entry["key"]][f"{args.stat}_us"]
            ratio, spread = ours / theirs, abs(ours - other) / ours
            ratios.append(ratio)
            spreads.append(spread)
            event_ratios.append(events / theirs)
            if theirs >= 20.0:
                large.append(ratio)
            rows.append([name, entry["key"], entry.get("clock"), f"{ours:.2f}", f"{theirs:.2f}", f"{ratio:.3f}",
                         f"{events / theirs:.3f}", f"{other:.2f}", f"{100 * spread:.2f}%", entry["n"],
                         f"{entry.get('sol_us') or 0:.2f}", f"{entry.get('host_batch_us', 0):.2f}",
                         f"{entry.get('copy_us', 0):.2f}", f"{entry.get('runner_batch_host_us', 0):.2f}",
                         f"{entry.get('runner_batch_launch_us', 0):.2f}", f"{entry.get('runner_batch_span_us', 0):.2f}",
                         f"{entry.get('runner_batch_served_us', 0):.2f}"])
    print(tabulate(rows, headers=["problem", "shape", "clock", "harness us", "do_bench us", "ratio",
                                  "events / do_bench", "2nd run us", "run-to-run", "n", "speed of light us",
                                  "judge batch us", "judge copy us", "runner batch host us", "launch us",
                                  "device span us", "served us"]))
    judged = [r for r in rows if r[2] == "judge"]
    if judged:
        print(f"\n{len(judged)} shape(s) ranked by the judge's clock (launch-bound: the host launches slower "
              f"than the GPU runs them; their figure includes the launch): "
              + ", ".join(f"{r[0]} {r[1]}" for r in judged))

    agreement = geomean(ratios)
    repeat = geomean(max(s, 1e-6) for s in spreads)
    walls = [math.nan] if args.no_wall else wall_times(config, args.repeats)
    floor = math.nan if args.no_wall else min(import_floor_s() for _ in range(3))
    print()
    print(tabulate([
        ["agreement with do_bench (geomean ratio)", f"{agreement:.4f}", "within 0.97..1.03",
         "ok" if abs(agreement - 1) <= 0.03 else "MISSED"],
        ["agreement, shapes of 20 us and more by do_bench", f"{geomean(large):.4f}" if large else "-",
         "within 0.97..1.03", "ok" if large and abs(geomean(large) - 1) <= 0.03 else "MISSED" if large else ""],
        ["agreement of the flushed events alone (every shape)", f"{geomean(event_ratios):.4f}", "-", ""],
        ["worst shape ratio", f"{min(ratios, key=lambda r: -abs(r - 1)):.4f}", "-", ""],
        ["repeatability (geomean |a-b|/a)", f"{100 * repeat:.2f}%", "< 0.5%", "ok" if repeat < 0.005 else "MISSED"],
        ["one evaluation, vector_add, 1 rep (best of 3)", f"{min(walls):.2f} s", "-", ""],
        ["python -I + import torch, triton + CUDA init", f"{floor:.2f} s", "-", ""],
    ], headers=["figure", "value", "goal", ""]))


if __name__ == "__main__":
    main()
