"""What the sandbox costs: wall time of one evaluation under each `evaluator.sandbox` mode,
and of the confinement steps alone.

    python benchmarks/sandbox_overhead.py [--runs 5] [--problem vector_add]

Prints a table. Runs are interleaved (auto, off, auto, off, ...) so that load from other
processes falls on both modes alike. The second table times `confine.apply` plus a
trivial script under the same command line an evaluation uses, without torch: the
fixed cost of the namespaces, the trusted init and the mounts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import fast_config_text  # noqa: E402
from kgit import config as config_mod  # noqa: E402
from kgit.evaluation import child as evaluate, sandbox  # noqa: E402
from kgit_harness import problem as problem_mod  # noqa: E402

CONFINE_ONLY = "import json, sys\nfrom kgit_harness import confine\nconfine.apply(json.loads(sys.argv[1]))\n"


def one_evaluation(problem: str, mode: str) -> float:
    config = config_mod.parse(fast_config_text(evaluator={"sandbox": mode}))
    scratch = Path(tempfile.mkdtemp(prefix="kgit-bench-"))
    try:
        shutil.copytree(problem_mod.shipped()[problem], scratch / "problem")
        (scratch / "candidate").mkdir()
        shutil.copy(scratch / "problem" / "kernel.py", scratch / "candidate" / "kernel.py")
        started = time.monotonic()
        doc = evaluate.run_child(scratch / "problem", scratch / "candidate", config, scratch)
        elapsed = time.monotonic() - started
        if doc["status"] != "ok":
            raise SystemExit(f"{mode}: the baseline did not pass: {doc['status']} {doc.get('error')}")
        return elapsed
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def confine_only(mode: str) -> float:
    isolation = sandbox.plan(mode)
    scratch = Path(tempfile.mkdtemp(prefix="kgit-bench-"))
    (scratch / "candidate").mkdir()
    spec = {"candidate_dir": str(scratch / "candidate"), "sandbox": isolation.child_settings(scratch, 60, None)}
    life_r, life_w = os.pipe()
    cmd = isolation.command([sys.executable, "-I", "-B", "-c", CONFINE_ONLY, json.dumps(spec)], lifeline_fd=life_r)
    try:
        started = time.monotonic()
        subprocess.run(cmd, cwd=scratch, env=evaluate.child_env(scratch), pass_fds=(life_r,), check=True,
                       capture_output=True)
        return time.monotonic() - started
    finally:
        os.close(life_r)
        os.close(life_w)
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--problem", default="vector_add")
    args = parser.parse_args()
    modes = ["auto", "off"] if sandbox.probe()[0] else ["off"]
    print(f"host: {os.uname().nodename}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"namespaces: {sandbox.probe()[0]}, euid {os.geteuid()}")
    for title, measure in (("one evaluation of " + args.problem, lambda m: one_evaluation(args.problem, m)),
                           ("start-up and confinement only", confine_only)):
        times = {m: [] for m in modes}
        for _ in range(args.runs):
            for mode in modes:
                times[mode].append(measure(mode))
        print(f"\n{title} ({args.runs} runs each, wall seconds)")
        print(f"{'mode':6} {'median':>8} {'min':>8} {'max':>8}")
        for mode in modes:
            t = times[mode]
            print(f"{mode:6} {statistics.median(t):8.3f} {min(t):8.3f} {max(t):8.3f}")


if __name__ == "__main__":
    main()
