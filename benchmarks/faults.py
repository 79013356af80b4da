"""Fault-injection figures: kill -9 at random moments, and each kernel fault class.

Part 1 kills the whole process group of `kgit record` or `kgit evolve` (offline
model) at a random moment of its run, N times, on one kernel repository. A trial
survives when, right after the kill, `git fsck` is clean, every commit reachable
before the kill still is, no process of the run is left and the archive lock is free;
and the next kgit command (the next trial) works. "Attempts lost" counts attempt
commits seen on kgit/* branches before the kill that are gone after it: the goal is 0.
A final uninterrupted `kgit evolve` must succeed and leave no worktree behind.

Part 2 evaluates one hostile candidate per fault class (tests/hostile_kernels.py) and
checks it becomes the expected status with no process left over.

    python benchmarks/faults.py                # 20 kills, CPU (Triton interpreter)
    python benchmarks/faults.py -n 50 --json   # more trials, machine-readable output
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hostile_kernels import stage  # noqa: E402

from kgit import config as config_mod  # noqa: E402
from kgit import workflow
from kgit.archive.repo import Repo  # noqa: E402
from kgit.errors import LockedError  # noqa: E402
from kgit.evaluation import child  # noqa: E402

KGIT = str(Path(sys.executable).with_name("kgit"))
FAST_TIMING = {"target_rse": 0.5, "max_time_s": 0.05, "min_reps": 2, "warmup": 0}
BLOCKS = ["128", "256", "512", "2048", "4096", "8192"]


def git(repo, *args, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=check)


def config_text(gpu: bool) -> str:
    data = yaml.safe_load(config_mod.default_text())
    if not gpu:
        data["timing"] = dict(FAST_TIMING)
    data["evolve"]["pick"] = 2
    return yaml.safe_dump(data, sort_keys=False)


def processes_under(path: Path) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                if str(path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                continue
    return found


def reachable(repo) -> set[str]:
    """Commits reachable from refs. Not `--all`: that also counts the HEADs of leftover
    worktrees, whose provisional commits are meant to go when the worktrees are cleaned."""
    return set(git(repo, "rev-list", "--branches", "--tags", "--glob=refs/notes/*", "HEAD").stdout.split())


def attempt_commits(repo) -> set[str]:
    return set(git(repo, "rev-list", "--branches=kgit/*", "--not", "kgit/baseline").stdout.split())


def prepare_record(repo: Path):
    """A new experiment branch with an edited kernel, ready for `kgit record`."""
    r = Repo(repo)
    workflow.start(r, f"block size {random.choice(BLOCKS)} trial {random.getrandbits(24):x}", checkout=True)
    kernel = repo / "kernel.py"
    current = re.search(r"BLOCK_SIZE = (\d+)", kernel.read_text()).group(1)
    # A value other than the base's: `kgit record` refuses an unchanged kernel.
    value = random.choice([b for b in BLOCKS if b != current])
    text = re.sub(r"BLOCK_SIZE = \d+", f"BLOCK_SIZE = {value}", kernel.read_text())
    kernel.write_text(text)


def commit_work_tree(repo: Path):
    """Leave the work tree clean for the next `kgit try` (a killed record leaves the edit)."""
    if git(repo, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        git(repo, "commit", "-qam", "benchmark: keep the edited kernel")


def kill_trial(repo: Path, command: list[str], duration: float) -> dict:
    before = reachable(repo)
    proc = subprocess.Popen([KGIT, *command], cwd=repo, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    delay = random.uniform(0.0, duration)
    time.sleep(delay)
    seen = attempt_commits(repo)
    finished_first = proc.poll() is not None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()
    problems = []
    fsck = git(repo, "fsck", "--no-progress", check=False)
    if fsck.returncode != 0 or re.search(r"^(error|missing|broken|bad)", fsck.stdout + fsck.stderr, re.M):
        problems.append("fsck: " + (fsck.stdout + fsck.stderr).strip()[:200])
    after = reachable(repo)
    lost = len(seen - after)
    if before - after:
        problems.append(f"{len(before - after)} commits unreachable")
    deadline = time.monotonic() + 10
    while processes_under(repo) and time.monotonic() < deadline:
        time.sleep(0.1)
    if processes_under(repo):
        problems.append(f"orphans: {processes_under(repo)}")
    try:
        with Repo(repo).lock("benchmark"):
            pass
    except LockedError as e:
        problems.append(f"stale lock: {e}")
    return {"command": command[0], "delay_s": round(delay, 2), "finished_before_kill": finished_first,
            "attempts_lost": lost, "problems": problems}


def run_kills(trials: int, gpu: bool, seed: int) -> list[dict]:
    random.seed(seed)
    root = Path(tempfile.mkdtemp(prefix="kgit-faults-"))
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Fault Benchmark")
    git(repo, "config", "user.email", "faults@localhost")
    workflow.init(repo, "vector_add", config_text=config_text(gpu))
    commit_work_tree(repo)

    # One uninterrupted run of each command sets the window the kills land in.
    durations = {}
    prepare_record(repo)
    started = time.monotonic()
    subprocess.run([KGIT, "record"], cwd=repo, capture_output=True)
    durations["record"] = time.monotonic() - started
    git(repo, "checkout", "-q", "main")
    started = time.monotonic()
    subprocess.run([KGIT, "evolve", "-n", "1"], cwd=repo, capture_output=True)
    durations["evolve"] = time.monotonic() - started

    results = []
    for i in range(trials):
        kind = "record" if i % 2 == 0 else "evolve"
        commit_work_tree(repo)
        git(repo, "checkout", "-q", "main")
        if kind == "record":
            prepare_record(repo)
            result = kill_trial(repo, ["record"], durations["record"])
        else:
            result = kill_trial(repo, ["evolve", "-n", "1"], durations["evolve"])
        results.append(result)
        mark = "ok" if not result["problems"] else "; ".join(result["problems"])
        print(f"  kill {i + 1}/{trials}: {kind} after {result['delay_s']:.2f} s: {mark}", file=sys.stderr)

    # The next run cleans up after all of those and completes.
    commit_work_tree(repo)
    git(repo, "checkout", "-q", "main")
    final = subprocess.run([KGIT, "evolve", "-n", "1"], cwd=repo, capture_output=True, text=True)
    state = repo / ".git" / "kgit"
    leftovers = [p.name for sub in ("worktrees", "scratch") if (state / sub).exists() for p in (state / sub).iterdir()]
    problems = []
    if final.returncode != 0:
        problems.append("final evolve failed: " + final.stderr.strip()[-300:])
    if leftovers:
        problems.append(f"leftovers after the final run: {leftovers}")
    results.append({"command": "final evolve", "delay_s": None, "finished_before_kill": True,
                    "attempts_lost": 0, "problems": problems})
    return results


FAULT_CLASSES = [
    # name, action in the candidate, config overrides, expected statuses
    ("segfault", "hostile.segfault()", {}, {"crash"}),
    ("infinite loop", "hostile.spin()", {"timeout_s": 20}, {"timeout"}),
    ("huge allocation", "hostile.hog(64)", {"max_memory_gb": 2}, {"runtime-error"}),
    ("enormous output", "hostile.shout(256)", {"max_output_bytes": 20000}, {"ok"}),
    ("detached process", "hostile.escape('4242.4242', detach=True)", {}, {"ok"}),
]


def run_fault_classes(gpu: bool) -> list[dict]:
    rows = []
    for name, action, overrides, statuses in FAULT_CLASSES:
        with tempfile.TemporaryDirectory(prefix="kgit-fault-") as tmp:
            problem_dir, candidate_dir, scratch = stage(Path(tmp), action)
            data = yaml.safe_load(config_text(gpu))
            data["evaluator"].update(overrides)
            config = config_mod.parse(yaml.safe_dump(data))
            started = time.monotonic()
            doc = child.run_child(problem_dir, candidate_dir, config, scratch)
            wall = time.monotonic() - started
            time.sleep(0.5)
            orphans = processes_under(scratch) + list(processes_under(Path("4242.4242")))
            for pid in orphans:
                os.kill(pid, signal.SIGKILL)
            excerpt = [line for line in (doc.get("error") or "").strip().splitlines() if line.strip()]
            rows.append({"fault": name, "status": doc["status"], "expected": sorted(statuses),
                         "survived": doc["status"] in statuses and not orphans, "orphans": len(orphans),
                         "wall_s": round(wall, 1), "stdout_kept": len(doc["stdout"]),
                         "excerpt": excerpt[-1][:90] if excerpt else ""})
            print(f"  {name}: {doc['status']} in {wall:.1f} s", file=sys.stderr)
    return rows


def sandbox_overhead(repeats: int, gpu: bool) -> dict:
    """Median wall time of one baseline evaluation with the sandbox on and off."""
    from kgit_harness import problem as problem_mod

    source = (problem_mod.shipped()["vector_add"] / "kernel.py").read_text()
    times = {"auto": [], "off": []}
    for _ in range(repeats):
        for mode in times:
            with tempfile.TemporaryDirectory(prefix="kgit-overhead-") as tmp:
                problem_dir, candidate_dir, scratch = stage(Path(tmp), "pass")
                (candidate_dir / "kernel.py").write_text(source)
                data = yaml.safe_load(config_text(gpu))
                data["evaluator"]["sandbox"] = mode
                started = time.monotonic()
                doc = child.run_child(problem_dir, candidate_dir, config_mod.parse(yaml.safe_dump(data)), scratch)
                times[mode].append(time.monotonic() - started)
                assert doc["status"] == "ok", doc.get("error")
    return {mode: round(sorted(v)[len(v) // 2], 3) for mode, v in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--trials", type=int, default=20, help="kill -9 trials (half record, half evolve)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gpu", action="store_true", help="kgit's default timing settings (on a GPU)")
    parser.add_argument("--overhead", type=int, default=3, metavar="N",
                        help="time N baseline evaluations with the sandbox on and off (0: skip)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    print(f"sandbox here: {json.dumps(__import__('kgit.evaluation.sandbox', fromlist=['describe']).describe())}", file=sys.stderr)
    kills = run_kills(args.trials, args.gpu, args.seed)
    faults = run_fault_classes(args.gpu)
    overhead = sandbox_overhead(args.overhead, args.gpu) if args.overhead else {}
    if args.json:
        print(json.dumps({"kills": kills, "faults": faults, "overhead_s": overhead}, indent=2))
        return
    table = []
    for command in ("record", "evolve", "final evolve"):
        mine = [r for r in kills if r["command"] == command]
        table.append([f"kill -9 {command}" if command != "final evolve" else "next run after all kills",
                      len(mine), sum(not r["problems"] for r in mine), sum(r["attempts_lost"] for r in mine)])
    for row in faults:
        table.append([f"{row['fault']} -> {row['status']}", 1, int(row["survived"]), 0])
    print(tabulate(table, headers=["trial", "trials", "survived", "attempts lost"]))
    print()
    print(tabulate([[r["fault"], r["status"], r["wall_s"], r["orphans"], r["stdout_kept"], r["excerpt"]] for r in faults],
                   headers=["fault", "status", "wall s", "orphans", "stdout kept", "excerpt"]))
    if overhead:
        print(f"\none baseline evaluation, median of {args.overhead}: sandbox auto {overhead['auto']:.2f} s, "
              f"off {overhead['off']:.2f} s")
    failed = [r for r in kills if r["problems"]] + [r for r in faults if not r["survived"]]
    for r in failed:
        print("FAILED:", json.dumps(r))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
