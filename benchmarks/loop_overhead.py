"""Time per `kgit evolve` attempt spent outside the model and the kernel.

Runs the LLM path of the loop (select -> design -> write -> evaluate -> commit) with an
instant scripted model on a fresh vector_add kernel repository, and splits each
attempt's wall time into: prompt building, edit parsing, git plumbing and archive
reads, worktree add/remove, candidate staging, the harness child process, and the
rest. The harness child's fixed start cost (python + torch + triton imports) is
measured on its own, since the child's time otherwise includes the kernel's checks
and timing loops.

    python benchmarks/loop_overhead.py                 # CPU: Triton interpreter, short timing
    python benchmarks/loop_overhead.py --gpu-timing    # on a GPU: kgit's default timing settings
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import yaml
from tabulate import tabulate

from kgit import config as config_mod
from kgit import evolve, workflow
from kgit.archive import repo as archive
from kgit.archive import trees
from kgit.evaluation import child
from kgit.scientist import design as design_mod
from kgit.scientist import edits, prompts
from kgit.scientist import select as select_mod
from kgit.scientist.llm import Reply

FAST_TIMING = {"target_rse": 0.5, "max_time_s": 0.05, "min_reps": 2, "warmup": 0}
BLOCKS = ["256", "512", "2048", "4096", "128", "8192", "64"]


class Profiler:
    """Exclusive time per category: a wrapped call's time minus its wrapped callees'."""

    def __init__(self):
        self.totals = defaultdict(float)
        self.local = threading.local()

    def wrap(self, owner, name, category):
        original = getattr(owner, name)
        profiler = self

        def timed(*args, **kwargs):
            cat = category(args) if callable(category) else category
            stack = profiler.local.__dict__.setdefault("stack", [])
            stack.append(0.0)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                nested = stack.pop()
                profiler.totals[cat] += elapsed - nested
                if stack:
                    stack[-1] += elapsed

        setattr(owner, name, timed)


class InstantModel:
    """Answers at once, in the real formats; each design proposes a new block size."""

    def __init__(self, baseline: str):
        self.baseline, self.n = baseline, 0

    def model(self, stage):
        return "bench/instant"

    def ask(self, stage, messages):
        if stage == "select":
            text = f'```json\n{{"base": "{self.baseline}", "reference": null, "reason": "baseline"}}\n```'
        elif stage == "design":
            plan = {"title": f"block {BLOCKS[self.n % len(BLOCKS)]}", "description": "d", "rubric": "r",
                    "gain_min": 0.0, "gain_max": 0.1, "innovation": 1}
            text = f'```json\n{json.dumps({"avenues": [], "plans": [plan], "chosen": [0]})}\n```'
        else:
            value = BLOCKS[self.n % len(BLOCKS)]
            self.n += 1
            text = ("kernel.py\n<<<<<<< SEARCH\nBLOCK_SIZE = 1024\n=======\n"
                    f"BLOCK_SIZE = {value}\n>>>>>>> REPLACE\n")
        return Reply(text, "bench/instant", 0, 0.0)


def git_category(args):
    return "worktree add/remove" if args and args[0][:1] == ["worktree"] else "git plumbing + archive reads"


def harness_start_s(repetitions=3) -> float:
    """The child's fixed cost: an isolated interpreter importing torch, triton and the harness."""
    env = child.child_env(Path(tempfile.mkdtemp()))
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        # One process's imports; an evaluation runs two (the judge's overlaps the runner's).
        subprocess.run([sys.executable, "-I", "-B", "-c", "import torch, triton, kgit_harness.runner"],
                       env=env, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=5)
    parser.add_argument("--gpu-timing", action="store_true", help="use kgit's default timing (for a GPU)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="kgit-loop-")) / "repo"
    root.mkdir(parents=True)
    for cmd in (["init", "-q", "-b", "main"], ["config", "user.name", "bench"], ["config", "user.email", "b@x"]):
        subprocess.run(["git", *cmd], cwd=root, check=True)
    data = yaml.safe_load(config_mod.default_text())
    if not args.gpu_timing:
        data["timing"] = FAST_TIMING
    data["evolve"].update(iterations=args.attempts, pick=1, attempts=1, knowledge=["triton"])
    workflow.init(root, "vector_add", config_text=yaml.safe_dump(data))
    repo, config = workflow.load(root)

    prof = Profiler()
    for module, name in [(prompts, "render"), (prompts, "knowledge"), (select_mod, "archive_table"),
                         (design_mod, "history")]:
        prof.wrap(module, name, "prompt building")
    prof.wrap(edits, "parse", "edit parsing")
    prof.wrap(edits, "apply", "edit parsing")
    prof.wrap(archive, "run_git", git_category)
    prof.wrap(trees, "read_files", "git plumbing + archive reads")
    prof.wrap(child, "stage_candidate", "candidate staging")
    # With warm evaluators (evaluator.warm, on in evolve) the pair's start-up happened
    # before its candidate arrived; what is timed here is from the candidate to the result.
    prof.wrap(child.Pair, "evaluate", "harness child (start + checks + timing)")

    client = InstantModel(repo.rev("kgit/baseline"))
    start = time.perf_counter()
    summary = evolve.evolve(repo, config, client=client)
    wall = time.perf_counter() - start
    n = len(summary.rows)
    if n == 0:
        # Every per-attempt figure below divides by the attempt count: say why there is none.
        sys.exit(f"no attempt was made, so there is nothing to divide by (evolve stopped: {summary.stop}). "
                 f"Run `kgit log` in {root} to see the baseline's result.")
    statuses = ", ".join(r.status for r in summary.rows)
    accounted = sum(prof.totals.values())
    prof.totals["other (python, threads, result handling)"] = wall - accounted
    start_s = harness_start_s()
    rows = [[k, f"{v / n * 1000:.1f}", f"{v / wall:.1%}"] for k, v in sorted(prof.totals.items(), key=lambda kv: -kv[1])]
    rows.append(["total per attempt", f"{wall / n * 1000:.1f}", "100%"])
    print(f"{n} attempts ({statuses}) on {summary.rows[0].model if n else '-'}; device: "
          f"{repo.read()[0].device}; timing: {'default' if args.gpu_timing else 'fast (CPU)'}")
    print(tabulate(rows, headers=["stage", "ms / attempt", "share"], tablefmt="simple"))
    child_s = prof.totals["harness child (start + checks + timing)"] / n
    share = f"{start_s / child_s:.0%} of the harness child's time" if child_s > 0 else \
        "no harness child ran (every attempt reused an earlier result)"
    print(f"\nharness start alone (python -I + torch + triton imports): {start_s * 1000:.0f} ms, {share}")
    overhead = wall / n - child_s + start_s
    print(f"outside the model and the kernel: {overhead * 1000:.0f} ms per attempt "
          "(everything but the harness child, plus the child's start)")


if __name__ == "__main__":
    main()
