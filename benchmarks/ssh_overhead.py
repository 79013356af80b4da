"""What the ssh evaluator costs per evaluation: local against remote, on one machine.

The "remote box" is this machine's own sshd on 127.0.0.1 (tests/sshd.py), so the
difference between a remote and a local evaluation is the ssh path alone: connections,
the transfer, the remote `kgit eval-candidate` start. Each row is the wall time of
`kgit eval` of the baseline of a throwaway vector_add repository (fast timing), from
the process's start to its end, `--repeats` times, the rows interleaved:

- local: `evaluator.backend: local`;
- before: the worked example as docs/evaluators.md had it (a fixed remote folder made by
  one ssh call, filled by rsync, evaluated by a third connection), with `--before-kgit`
  (say, main's venv) on both sides when given;
- after: examples/evaluators/mi300-eval.sh (one connection: the folder as a tar on ssh's
  stdin, `kgit eval-candidate -` on the box).

    python benchmarks/ssh_overhead.py --repeats 5 --before-kgit /work/main/.venv/bin/kgit

Needs sshd (openssh-server) and, for the "before" row, rsync.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the throwaway sshd the tests use

from bench_repo import make_repo  # noqa: E402
from sshd import Sshd  # noqa: E402

# The worked example before: three ssh connections (one through rsync) and a fixed remote folder.
BEFORE = """#!/bin/sh
set -e
dir="/tmp/kgit-eval-gpu$2"
$KGIT_SSH mi300 "rm -rf $dir && mkdir -p $dir"
rsync -a -e "$KGIT_SSH" "$1"/ "mi300:$dir/"
exec $KGIT_SSH mi300 "HIP_VISIBLE_DEVICES=$2 $KGIT_REMOTE_KGIT eval-candidate $dir"
"""


def configure(repo: Path, evaluator: dict):
    data = yaml.safe_load((repo / ".kgit.yaml.orig").read_text())
    data["evaluator"].update(evaluator)
    (repo / ".kgit.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def timed_eval(kgit: str, repo: Path, env: dict) -> float:
    started = time.monotonic()
    done = subprocess.run([kgit, "eval", "--json", "kgit/baseline"], cwd=repo, env=env, capture_output=True,
                          text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{kgit} eval failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before-kgit", help="the kgit of the 'before' row on both sides (default: this one)")
    args = parser.parse_args()
    kgit = str(Path(sys.executable).with_name("kgit"))
    before_kgit = args.before_kgit or kgit
    if not shutil.which("rsync"):
        raise SystemExit("the 'before' row needs rsync: apt-get install rsync")
    with tempfile.TemporaryDirectory(prefix="kgit-ssh-bench-") as tmp:
        tmp = Path(tmp)
        box = Sshd(tmp / "sshd").start()
        try:
            repo = make_repo(tmp / "repo", "vector_add", fast=True)
            shutil.copy(repo / ".kgit.yaml", repo / ".kgit.yaml.orig")
            (repo / "before.sh").write_text(BEFORE)
            shutil.copy(ROOT / "examples" / "evaluators" / "mi300-eval.sh", repo / "after.sh")
            env = {**os.environ, "KGIT_SSH": box.ssh}
            command = {"backend": "command", "devices": [0], "pass_env": ["KGIT_SSH", "KGIT_REMOTE_KGIT"]}
            variants = [
                ("local", kgit, "-", {"backend": "local"}, {}),
                ("before: mkdir + rsync + ssh", before_kgit, "3", {**command, "command": "sh ./before.sh {candidate} {device}"},
                 {"KGIT_REMOTE_KGIT": before_kgit}),
                ("after: mi300-eval.sh", kgit, "1", {**command, "command": "./after.sh {device}"},
                 {"KGIT_REMOTE_KGIT": kgit}),
            ]
            walls: dict[str, list] = {name: [] for name, *_ in variants}
            for _ in range(args.repeats):
                for name, binary, _, evaluator, extra in variants:
                    configure(repo, evaluator)
                    walls[name].append(timed_eval(binary, repo, {**env, **extra}))
            connect = []
            for _ in range(args.repeats):
                started = time.monotonic()
                subprocess.run([*box.ssh.split(), "mi300", "true"], check=True)
                connect.append(time.monotonic() - started)
        finally:
            box.stop()
    local = statistics.median(walls["local"])
    rows = [[name, binary if binary != kgit else "this", conns, f"{statistics.median(walls[name]):.2f}",
             f"{min(walls[name]):.2f}", "" if name == "local" else f"{statistics.median(walls[name]) - local:+.2f}"]
            for name, binary, conns, _, _ in variants]
    print(tabulate(rows, headers=["evaluation", "kgit", "ssh connections", "median s", "min s",
                                  "overhead vs local (median)"]))
    print(f"\none ssh connection alone (`ssh mi300 true`): median {statistics.median(connect):.3f} s; "
          f"{args.repeats} repeats, interleaved")


if __name__ == "__main__":
    main()
