"""The fixed cost of the sandbox layer: `unshare`, the trusted init, `confine.apply`.

    python benchmarks/sandbox_overhead.py [--runs 10]

Times a trivial script started exactly as an evaluation starts the harness
(`Isolation.command` + `confine.apply`, without torch or a candidate), under each
`evaluator.sandbox` mode, interleaved so that load from other processes falls on all
modes alike, and prints a table. The cost of a whole evaluation with the sandbox on
and off is measured by `benchmarks/faults.py --overhead N`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kgit.cleanup import remove_tree
from kgit.evaluation import child, sandbox

CONFINE_ONLY = "import json, sys\nfrom kgit_harness import confine\nconfine.apply(json.loads(sys.argv[1]))\n"


def start_and_confine(mode: str) -> float:
    isolation = sandbox.plan(mode)
    scratch = Path(tempfile.mkdtemp(prefix="kgit-bench-"))
    (scratch / "candidate").mkdir()
    spec = {"candidate_dir": str(scratch / "candidate"), "sandbox": isolation.child_settings(scratch, 60, None)}
    life_r, life_w = os.pipe()
    cmd = isolation.command([sys.executable, "-I", "-B", "-c", CONFINE_ONLY, json.dumps(spec)], lifeline_fd=life_r)
    try:
        started = time.monotonic()
        subprocess.run(cmd, cwd=scratch, env=child.child_env(scratch), pass_fds=(life_r,), check=True,
                       capture_output=True)
        return time.monotonic() - started
    finally:
        os.close(life_r)
        os.close(life_w)
        remove_tree(scratch)
        for folder in set(spec["sandbox"]["cgroups"].values()):
            sandbox.cgroups.remove(folder)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    available, why = sandbox.probe()
    modes = ["auto", "off"] if available else ["off"]
    print(f"host: {os.uname().nodename}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, euid {os.geteuid()}, "
          f"namespaces: {available or why}")
    times = {m: [] for m in modes}
    for _ in range(args.runs):
        for mode in modes:
            times[mode].append(start_and_confine(mode))
    print(f"\nstart-up and confinement, {args.runs} runs each, wall seconds")
    print(f"{'mode':6} {'median':>8} {'min':>8} {'max':>8}")
    for mode in modes:
        t = times[mode]
        print(f"{mode:6} {statistics.median(t):8.3f} {min(t):8.3f} {max(t):8.3f}")


if __name__ == "__main__":
    main()
