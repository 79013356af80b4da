"""Seconds per attempt of an offline `kgit evolve -n N`, with warm evaluators on and off.

Makes a throwaway kernel repository of a shipped problem (the default .kgit.yaml, the
offline strategist: no model, no network), runs `kgit evolve -n N` through the library
once per setting, and prints attempts, wall time, seconds per attempt, the statuses and
the best geomean the run found (on a GPU: racing must not throw winners away), each
status's evaluations and seconds (and where racing stopped the stopped ones), and the
seconds the attempts waited for their judge/runner pair's start-up (a warm spare that was
not ready yet: from kgit sending the candidate to the judge reading it, and the judge's
"reference ready" to "runner ready", summed), and how much of each
attempt's seconds were its evaluation (kgit's clock around it): the rest is the loop's own
work (git, the scientist's steps, racing's bookkeeping). With
`--rerun-stopped K`, up to K of the attempts that racing stopped are evaluated again in full
(no racing) and compared with the attempt each was raced against: how many racing would have
let through, had it run them to the end.

    python benchmarks/evolve_rate.py --problem vector_add -n 10 --fast          # CPU
    python benchmarks/evolve_rate.py --problem fp8_blockscale_gemm -n 6 --warm on --rerun-stopped 4   # H200
    python benchmarks/evolve_rate.py --problem fp8_blockscale_gemm -n 6 --warm on --spares 3   # more spares
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_repo import make_repo
from tabulate import tabulate

from kgit import evolve, workflow
from kgit.evaluation import backends, child
from kgit_harness import racing

# Stages of an evaluation by the judge's marks (as eval_breakdown.py names them), in seconds.
STAGES = {"checks (calls incl. JIT)": ("candidate imported", "checked"), "timed loop": ("checked", "timed")}
STAGE_NAMES = ["waited for start-up", *STAGES, "waited for target builds"]
PRECOMPILE = {"seconds": "runner's total", "fork_s": "fork", "dry_s": "dry calls", "slowest_compile_s": "slowest compile",
              "slowest_launcher_s": "slowest launcher", "early_launchers": "launchers built beside the compile"}


class StartupWaits:
    """Sums, over every evaluation of the run, how long it waited for its pair's start-up (the
    spans eval_breakdown.py calls "waiting for the judge's start-up" and "... the runner's")."""

    def __init__(self):
        self.waits: list[float] = []
        self.evaluating_s = 0.0  # kgit's clock around every evaluation, start-up waits included
        # (status, seconds, how far a race got, {stage: seconds} from the judge's marks)
        self.evaluations: list[tuple[str, float, str, dict]] = []
        self._evaluate = child.evaluate_tree

    def __enter__(self):
        def watched(*args, **kwargs):
            started = time.monotonic()
            try:
                doc = self._evaluate(*args, **kwargs)
            finally:
                self.evaluating_s += time.monotonic() - started
            race = doc.get("race")
            phases = doc.get("phases") or {}
            judge, sent = phases.get("judge") or {}, (phases.get("kgit") or {}).get("candidate sent")
            stages = {name: judge[b] - judge[a] for name, (a, b) in STAGES.items() if a in judge and b in judge}
            if "reference ready" in judge and "runner ready" in judge:
                wait = max(0.0, judge["runner ready"] - judge["reference ready"])
                if sent is not None and "candidate arrived" in judge:
                    wait += max(0.0, judge["candidate arrived"] - sent)
                self.waits.append(wait)
                stages["waited for start-up"] = wait
            # Where an attempt's timed loop went: its timed calls (every shape), and the judge's
            # spans inside the loop (more calls, or dearer ones?).
            stages["timed calls"] = sum(int(s.get("n") or 0) for s in doc.get("shapes") or [])
            stages["calls by shape"] = [int(s.get("n") or 0) for s in doc.get("shapes") or []]
            stages["retimed shapes"] = sum(1 for s in doc.get("shapes") or [] if s.get("retimed"))
            stages.update({k: v for k, v in (phases.get("spans") or {}).items()
                           if k.startswith(("timing: ", "checks: ", "problem: "))})
            # The runner's own account of its compiles ahead (harness/precompile.py), on a GPU.
            report = doc.get("precompile") or {}
            stages.update({f"precompile: {PRECOMPILE[k]}": v for k, v in report.items()
                           if k in PRECOMPILE and isinstance(v, (int, float))})
            built = doc.get("targets")
            if isinstance(built, dict) and isinstance(built.get("waited_s"), (int, float)):
                stages["waited for target builds"] = built["waited_s"]
            self.evaluations.append((doc.get("status"), time.monotonic() - started,
                                     racing.how_far(race) if isinstance(race, dict) else "", stages))
            return doc

        child.evaluate_tree = watched
        return self

    def __exit__(self, *exc):
        child.evaluate_tree = self._evaluate


def run_once(root: Path, problem: str, iterations: int, warm: bool, fast: bool, jobs: int, progress=None,
             protocol: str | None = None) -> dict:
    def edit(data):
        data["evaluator"]["warm"] = warm
        data["evolve"].update(iterations=iterations, jobs=jobs)
        if protocol:
            data["timing"]["protocol"] = protocol

    make_repo(root, problem, fast, edit)
    repo, config = workflow.load(root)
    started = time.monotonic()
    with StartupWaits() as waits:
        summary = evolve.evolve(repo, config, progress=progress)
    wall = time.monotonic() - started
    n = len(summary.rows)
    best = summary.best_after
    return {"warm": warm, "attempts": n, "wall_s": wall, "per_attempt_s": wall / n if n else None,
            "statuses": dict(Counter(r.status for r in summary.rows)),
            "best_geomean_us": getattr(best, "geomean_us", None), "baseline_geomean_us": getattr(
                summary.best_before, "geomean_us", None), "stop": summary.stop,
            "device": repo.read()[0].device, "waits": waits.waits, "evaluating_s": waits.evaluating_s,
            "evaluations": waits.evaluations}


def by_status(evaluations: list[tuple[str, float, str, dict]]) -> list[list]:
    """Rows: each status's evaluations, their seconds and the mean of each of STAGE_NAMES; for
    `stopped`, where the races stopped."""
    rows = []
    for status in sorted({e[0] for e in evaluations}):
        mine = [e for e in evaluations if e[0] == status]
        seconds = [e[1] for e in mine]
        where = Counter(e[2] for e in mine if e[2])
        stages = []
        for name in STAGE_NAMES:
            values = [e[3][name] for e in mine if name in e[3]]
            stages.append(f"{sum(values) / len(values):.2f}" if values else "-")
        rows.append([status, len(seconds), f"{sum(seconds) / len(seconds):.2f}", f"{min(seconds):.2f}",
                     f"{max(seconds):.2f}", *stages, "; ".join(f"{k} x{v}" for k, v in sorted(where.items())) or "-"])
    return rows


def spans_by_status(evaluations: list[tuple[str, float, str, dict]], prefixes: tuple[str, ...],
                    counts: tuple[str, ...] = ()) -> tuple[list[str], list[list]]:
    """(headers, rows): each status's mean of each of `counts` and mean seconds in each of the
    judge's spans named with one of `prefixes`, per evaluation."""
    names = sorted({k for e in evaluations for k in e[3] if k.startswith(prefixes)})
    rows = []
    for status in sorted({e[0] for e in evaluations}):
        mine = [e[3] for e in evaluations if e[0] == status]
        rows.append([status, *(f"{sum(m.get(k, 0) for m in mine) / len(mine):.2f}" for k in counts),
                     *(f"{sum(m.get(k, 0.0) for m in mine) / len(mine):.2f}" for k in names)])
    return ["status", *counts, *(k + " s" for k in names)], rows


def calls_by_shape(evaluations: list[tuple[str, float, str, dict]]) -> str:
    """The `ok` evaluations' mean timed calls on each benchmark shape, in timing order."""
    counts = [e[3]["calls by shape"] for e in evaluations if e[0] == "ok" and e[3].get("calls by shape")]
    if not counts:
        return "-"
    width = max(len(c) for c in counts)
    means = [sum(c[i] for c in counts if i < len(c)) / sum(1 for c in counts if i < len(c)) for i in range(width)]
    return ", ".join(f"{m:.0f}" for m in means)


def rerun_stopped(root: Path, count: int) -> list[list]:
    """Rows for up to `count` stopped attempts, each evaluated again in full beside the attempt
    its race named (Kgit-Stopped: "... x the time of <sha prefix>")."""
    repo, config = workflow.load(root)
    attempts = repo.read()
    rows = []
    for attempt in [a for a in attempts if a.status == "stopped"][:count]:
        prefix = attempt.trailers.get("Kgit-Stopped", [""])[-1].rsplit(" ", 1)[-1]
        incumbent = next((a for a in attempts if prefix and a.sha.startswith(prefix)), None)
        full = workflow.evaluate_rev(repo, config, attempt.sha)
        against = incumbent.geomean_us if incumbent is not None else None
        through = (full.status == "ok" and full.geomean_us is not None and against is not None
                   and full.geomean_us < against)
        rows.append([attempt.sha[:10], prefix or "-", f"{against:.2f}" if against else "-", full.status,
                     f"{full.geomean_us:.2f}" if full.geomean_us else "-", "yes" if through else "no"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="vector_add")
    parser.add_argument("-n", "--iterations", type=int, default=10)
    parser.add_argument("--warm", choices=["on", "off", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--fast", action="store_true", help="short timing settings (as in the tests)")
    parser.add_argument("--progress", action="store_true", help="print evolve's lines with the seconds since the start")
    parser.add_argument("--protocol", help="time under this timing protocol instead of the problem's own")
    parser.add_argument("--spares", type=int, metavar="N",
                        help="warm pairs kept ahead per GPU slot instead of kgit's (backends.SPARES)")
    parser.add_argument("--rerun-stopped", type=int, default=0, metavar="K",
                        help="evaluate up to K stopped attempts of the last run again in full")
    args = parser.parse_args()
    if args.spares is not None:
        backends.SPARES["gpu"] = args.spares
    t0 = time.monotonic()
    progress = (lambda line: print(f"{time.monotonic() - t0:7.1f}s {line}", flush=True)) if args.progress else None
    settings = {"on": [True], "off": [False], "both": [False, True]}[args.warm]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kgit-evolve-rate-") as tmp:
        for warm in settings:
            r = run_once(Path(tmp) / f"repo-{warm}", args.problem, args.iterations, warm, args.fast, args.jobs, progress,
                         args.protocol)
            speedup = (f"{r['baseline_geomean_us'] / r['best_geomean_us']:.3f}x"
                       if r["best_geomean_us"] and r["baseline_geomean_us"] else "-")
            rows.append(["on" if warm else "off", r["attempts"], f"{r['wall_s']:.1f}",
                         f"{r['per_attempt_s']:.2f}" if r["per_attempt_s"] else "-",
                         ", ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items())),
                         f"{r['best_geomean_us']:.2f}" if r["best_geomean_us"] else "-", speedup,
                         f"{r['evaluating_s'] / n:.2f}" if (n := r["attempts"]) else "-",
                         f"{sum(r['waits']):.1f} ({sum(w > 0.05 for w in r['waits'])} of {len(r['waits'])})"])
            device = r["device"]
            statuses = by_status(r["evaluations"])
            span_headers, spans = spans_by_status(r["evaluations"], ("timing: ",), ("timed calls", "retimed shapes"))
            check_headers, checks = spans_by_status(r["evaluations"], ("problem: ", "checks: ", "precompile: "))
            per_shape = calls_by_shape(r["evaluations"])
            if args.rerun_stopped:
                rerun = rerun_stopped(Path(tmp) / f"repo-{warm}", args.rerun_stopped)
    print(f"problem {args.problem}, evolve -n {args.iterations} offline, jobs {args.jobs}, "
          f"{backends.SPARES['gpu']} warm pairs ahead per GPU slot, "
          f"timing {'fast' if args.fast else 'default'}, protocol {args.protocol or 'its own'}, "
          f"device {device}")
    print(tabulate(rows, headers=["warm", "attempts", "wall s", "s / attempt", "statuses", "best geomean us",
                                  "vs baseline", "of it evaluating s / attempt", "waited for start-up s (evaluations)"], tablefmt="github"))
    print("\neach evaluation of the last run by its status (seconds on kgit's clock around it)")
    print(tabulate(statuses, headers=["status", "evaluations", "mean s", "least s", "most s",
                                      *(f"of it {name} s" for name in STAGE_NAMES), "where racing stopped"],
                   tablefmt="github"))
    print("\nthe timed loop of each evaluation of the last run by its status (means per evaluation: timed "
          "calls over every shape, shapes timed twice for disagreeing with the judge's clock, then the judge's "
          "spans)")
    print(tabulate(spans, headers=span_headers, tablefmt="github"))
    print(f"ok evaluations' mean timed calls per benchmark shape, in timing order: {per_shape}")
    print("\nbefore the timed loop, by status (means per evaluation of the judge's spans, and of the runner's "
          "report of its compiles ahead)")
    print(tabulate(checks, headers=check_headers, tablefmt="github"))
    if args.rerun_stopped:
        print(f"\nstopped attempts evaluated again in full ({len(rerun)}; 'through': faster than the "
              "attempt it was raced against, which racing threw away)")
        print(tabulate(rerun, headers=["attempt", "raced against", "its geomean us", "full status",
                                       "full geomean us", "through"], tablefmt="github"))


if __name__ == "__main__":
    main()
