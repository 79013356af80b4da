"""Where one evaluation's wall time goes, cold and warm, and how it compares with other kgits.

For each problem it makes a throwaway kernel repository and evaluates its baseline:

- cold: a judge/runner pair started for the candidate (what `kgit eval` does);
- warm: a pair started ahead of need (what `kgit evolve` keeps per slot), handed the
  candidate once its start-up is over (`--warm-wait` seconds later);
- warm + next (`--beside`): the same, with the next spare started as the candidate
  arrives, as `kgit evolve` does: its device contexts held at its gate while the timed
  loop runs, and, for comparison, made whenever it gets there;

and prints, from the marks the judge and runner leave in the result (`phases`,
harness/phases.py), the seconds of each stage: the judge's and the runner's start-up
(Python, torch, triton, device context), the problem and reference, the wait for the
runner, the candidate's import, the checks (input generation, candidate calls, compare),
the timed loop (with the target cross-compiles beside it), the result. The last lines
are the wall time from the moment the candidate was there to the result in kgit's hands.

`--compare NAME=KGIT` adds the wall time of `KGIT eval --json` in a repository that
KGIT initialised, for another kgit (an older commit's venv: `--compare before=/tmp/old/.venv/bin/kgit`).

    python benchmarks/eval_breakdown.py                              # vector_add and softmax, default timing
    python benchmarks/eval_breakdown.py --problems vector_add --repeats 3 --compare main=/work/main/.venv/bin/kgit
    python benchmarks/eval_breakdown.py --problems vector_add --repeats 3 --beside   # the next spare beside it
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import tabulate as tabulate_mod
import yaml
from bench_repo import FAST_TIMING, make_repo
from tabulate import tabulate

from kgit import config as config_mod
from kgit.archive.repo import BASELINE_TAG, Repo
from kgit.evaluation import backends, child, gpus

tabulate_mod.PRESERVE_WHITESPACE = True  # the stages nest by indentation

# (row, first mark, second mark); marks are seconds after kgit started the judge.
START_ROWS = [
    ("judge: python + harness import", None, ("judge", "judge up")),
    ("judge: torch import", ("judge", "runner spawned"), ("judge", "torch imported")),
    ("judge: triton import", ("judge", "torch imported"), ("judge", "imports done")),
    ("judge: waiting for the runner to reach the gate", ("judge", "imports done"), ("judge", "at gate")),
    ("judge: waiting at the gate (warm pairs)", ("judge", "at gate"), ("judge", "gate opened")),
    ("judge: device context", ("judge", "gate opened"), ("judge", "device ready")),
    ("runner: python + harness import", ("judge", "runner spawned"), ("runner", "runner up")),
    ("runner: confine (namespaces, mounts)", ("runner", "runner up"), ("runner", "runner confined")),
    ("runner: torch import", ("runner", "runner confined"), ("runner", "runner torch imported")),
    ("runner: triton import", ("runner", "runner torch imported"), ("runner", "runner triton imported")),
    ("runner: profiler loaded (warm pairs, GPU)", ("runner", "runner triton imported"), ("runner", "runner profiler ready")),
    ("runner: Triton's driver helper (warm pairs, GPU)", ("runner", "runner profiler ready"),
     ("runner", "runner jit helper ready")),
    ("runner: waiting at the gate (warm pairs)", ("runner", "runner jit helper ready"), ("runner", "runner gate opened")),
    ("runner: device context", ("runner", "runner gate opened"), ("runner", "runner device ready")),
    ("runner: Triton compiler's first run (warm pairs, GPU)", ("runner", "runner device ready"),
     ("runner", "runner jit warmed")),
]
EVAL_ROWS = [
    ("waiting for the judge's start-up", ("kgit", "candidate sent"), ("judge", "candidate arrived")),
    ("problem, reference, needs check", ("judge", "candidate arrived"), ("judge", "reference ready")),
    ("waiting for the runner's start-up", ("judge", "reference ready"), ("judge", "runner ready")),
    ("candidate import", ("judge", "runner ready"), ("judge", "candidate imported")),
    ("checks (inputs, calls incl. JIT, compare)", ("judge", "candidate imported"), ("judge", "checked")),
    ("timed loop (target builds beside it)", ("judge", "checked"), ("judge", "timed")),
    ("  benchmark shapes timed", ("judge", "checked"), ("judge", "benchmarks timed")),
    ("  per-kernel split (profiled calls)", ("judge", "benchmarks timed"), ("judge", "kernels split")),
    ("target facts collected, runner closed", ("judge", "timed"), ("judge", "result")),
]




def _at(phases: dict, where):
    if where is None:
        return 0.0
    side, name = where
    return phases.get(side, {}).get(name)


def one(repo: Repo, config, env: dict, warm_wait: float | None, beside: str = "") -> dict:
    """One evaluation of the baseline; its phases and kgit-side wall times.

    `beside`: "held" or "free" starts the next spare as the candidate arrives (as `kgit
    evolve` does), its device contexts held at its gate while the timed loop runs or not."""
    with repo.checkout_copy(repo.rev(BASELINE_TAG)) as path:
        state = repo.state / "scratch"
        pair = child.Pair.ahead(config, state, env, warm=bool(warm_wait))  # cold: used at once, as kgit does
        if warm_wait:
            pair.open_gate()  # as kgit's spares have it when no evaluation on the device is timing
            time.sleep(warm_wait)
        arrived = time.monotonic()
        spares = backends.WarmPairs() if beside else None
        try:
            if spares is not None:
                spares.refill("slot", config, state, env, device="this")
            quiet = spares.quiet("this") if beside == "held" else None
            doc = child.evaluate_tree(path, config, state_dir=state, devices_env=env, pair=pair, quiet=quiet)
            done = time.monotonic()
        finally:
            if spares is not None:
                spares.close()
    phases = doc.get("phases") or {}
    reps = sum(int(s.get("n") or 0) for s in doc.get("shapes") or [])
    return {"status": doc["status"], "phases": phases, "critical_s": done - arrived, "reps": reps,
            "spawn_to_result_s": done - pair.spawned_at, "result_mark": _at(phases, ("judge", "result")),
            "to_kgit_s": (done - pair.spawned_at) - (_at(phases, ("judge", "result")) or 0.0),
            "precompile": doc.get("precompile")}


def rows_of(runs: list[dict]) -> list[list]:
    def med(values):
        values = [v for v in values if v is not None]
        return f"{statistics.median(values):.2f}" if values else "-"

    def span(a, b):
        return [(_at(r["phases"], b) - _at(r["phases"], a)) if _at(r["phases"], a) is not None
                and _at(r["phases"], b) is not None else None for r in runs]

    def parts(prefix: str, indent: str, names=None) -> list[list]:
        """A row per span of the judge's named `prefix`... (all of them, sorted, unless `names`)."""
        names = names or sorted({k for r in runs for k in r["phases"].get("spans", {}) if k.startswith(prefix)})
        return [[indent + k[len(prefix):], med([r["phases"].get("spans", {}).get(k) for r in runs])] for k in names]

    out = [["start-up (off the critical path when warm)", ""]]
    out += [["  " + name, med(span(a, b))] for name, a, b in START_ROWS]
    out.append(["evaluation (from the candidate's arrival)", ""])
    for name, a, b in EVAL_ROWS:
        out.append(["  " + name, med(span(a, b))])
        if name.startswith("timed loop"):  # more repetitions (a noisy shape) or slower ones?
            out.append(["    timed repetitions (all shapes)", med([r["reps"] or None for r in runs])])
        if name.endswith("shapes timed"):
            out += parts("timing: ", "      ")
        if name.startswith("problem"):
            out += parts("problem: ", "    ")
        if name.startswith("checks"):
            out += parts("checks: ", "    ", ["checks: compiles side by side", "checks: inputs",
                                                 "checks: candidate calls", "checks: compare"])
    out.append(["  result to kgit (pipe, kill, output)", med([r["to_kgit_s"] for r in runs])])
    out.append(["wall: candidate there -> result in kgit", med([r["critical_s"] for r in runs])])
    out.append(["wall: judge spawned -> result in kgit", med([r["spawn_to_result_s"] for r in runs])])
    return out


def compare(kgit: str, problem: str, fast: bool, repeats: int, tmp: Path) -> tuple[list[float], list]:
    """Wall times of `KGIT eval --json` (and the eval_s it reports) in a repo that KGIT made."""
    root = tmp / f"cmp-{abs(hash(kgit)) % 10**6}-{problem}"
    subprocess.run([kgit, "init", str(root), "--problem", problem], check=True, capture_output=True)
    if fast:
        path = root / ".kgit.yaml"
        data = yaml.safe_load(path.read_text())
        data["timing"] = dict(FAST_TIMING)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        subprocess.run(["git", "-C", str(root), "commit", "-qam", "fast timing"], check=True)
    walls, evals = [], []
    for _ in range(repeats):
        started = time.monotonic()
        proc = subprocess.run([kgit, "eval", "--json"], cwd=root, capture_output=True, text=True)
        walls.append(time.monotonic() - started)
        try:
            evals.append(json.loads(proc.stdout).get("eval_s"))
        except json.JSONDecodeError:
            evals.append(None)
    return walls, evals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", default=["vector_add", "softmax"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--fast", action="store_true", help="short timing settings (as in the tests)")
    parser.add_argument("--protocol", help="time under this timing protocol instead of each problem's own")
    parser.add_argument("--warm-wait", type=float, default=15.0,
                        help="seconds a warm pair gets to start before its candidate arrives")
    parser.add_argument("--beside", action="store_true",
                        help="also warm with the next spare starting beside it, its device contexts held while timing and not")
    parser.add_argument("--compare", action="append", default=[], metavar="NAME=KGIT",
                        help="also time `KGIT eval --json` (another kgit's executable)")
    args = parser.parse_args()

    host = gpus.discover()
    env = gpus.pin_env(host, host.ids[0] if host.ids else None)
    print(f"host: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, GPUs {list(host.ids) or 'none'}; "
          f"timing {'fast' if args.fast else 'default'}; median of {args.repeats}")
    with tempfile.TemporaryDirectory(prefix="kgit-breakdown-") as tmp:
        for problem in args.problems:
            def edit(data):
                if args.protocol:
                    data["timing"]["protocol"] = args.protocol

            repo = Repo(make_repo(Path(tmp) / problem, problem, args.fast, edit))
            config = config_mod.load(repo.root)
            cold = [one(repo, config, env, None) for _ in range(args.repeats)]
            warm = [one(repo, config, env, args.warm_wait) for _ in range(args.repeats)]
            columns = [cold, warm]
            headers = ["stage", "cold", f"warm (started {args.warm_wait:g} s ahead)"]
            if args.beside:
                # Interleaved, so that both see the same load.
                held, free = [], []
                for _ in range(args.repeats):
                    held.append(one(repo, config, env, args.warm_wait, "held"))
                    free.append(one(repo, config, env, args.warm_wait, "free"))
                columns += [held, free]
                headers += ["warm + next spare, held while timing", "warm + next spare, not held"]
            statuses = sorted({r["status"] for column in columns for r in column})
            tables = [rows_of(column) for column in columns]
            table = [[row[0]] + [t[i][1] for t in tables] for i, row in enumerate(tables[0])]
            print(f"\n{problem} (statuses: {', '.join(statuses)}), seconds; load {os.getloadavg()[0]:.1f} now")
            print(tabulate(table, headers=headers, tablefmt="github"))
            for name, column in zip(headers[1:], columns):
                reports = [r["precompile"] for r in column if r["precompile"]]
                if reports:  # the runner's own account of the compiles ahead (GPU only)
                    print(f"compiles ahead, {name}: {reports}")
            for spec in args.compare:
                name, _, kgit = spec.partition("=")
                walls, evals = compare(kgit, problem, args.fast, args.repeats, Path(tmp))
                ev = [e for e in evals if e is not None]
                print(f"{name}: `kgit eval` wall {statistics.median(walls):.2f} s, harness eval_s "
                      f"{statistics.median(ev) if ev else '-'} ({kgit})")


if __name__ == "__main__":
    main()
