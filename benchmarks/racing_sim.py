"""How often racing stops a candidate, and after how many calls, on simulated GPU timings.

Runs the judge's racing rule itself (harness/racing.py: `decide` after each shape, and
`decide_within` every few calls into one, as the timed loops ask it) over simulated per-call
times of a problem's benchmark shapes, timed under a protocol's stopping rule, against an
incumbent whose recorded per-shape times carry their own measurement error. Per true
slowdown of the candidate (its geomean over all shapes) it prints the share of runs stopped
and the calls timed under four rules: after whole shapes only, allowing for no spread across
shapes but the timed shapes' own (about racing before issue 27); partway through shapes too,
with the later half of every shape's calls held to the noise as well, still allowing for no
spread but their own (about the judge's rule before shapes' spread counted); the same
allowing for racing.SPREAD (the judge's rule where
the campaign has no figure yet); and allowing for the candidates' true spread (what
racing.campaign_spread measures in a campaign). A stop at a slowdown of 1.0 or less is a
winner (or a tie) thrown away: that column is what racing must keep near zero.

Candidates are rarely faster or slower by one factor on every shape: --shape-spread draws
each candidate's per-shape factors around its geomean (log-normal, that standard deviation of
the log ratio; 0 for one factor on every shape). The per-call spread of each shape cycles
through --cvs (on the H200 the fp8 shapes' wall-clock calls varied by 0.07% to 18%:
benchmarks/shape_spread.py); --ramp makes the first --ramp-calls calls of every shape that
much slower (clocks and caches coming up), and --outliers is the share of calls three times
as long. Nothing here touches a GPU.

    python benchmarks/racing_sim.py
    python benchmarks/racing_sim.py --shape-spread 0      # one factor on every shape
    python benchmarks/racing_sim.py --cvs 0.18 0.12 0.07 0.03 0.01 0.002     # the noisy shapes first
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from tabulate import tabulate

from kgit_harness import protocols, racing, timing


def shape_times(rng, mean: float, cv: float, protocol, target_rse: float, min_reps: int, ramp: float,
                ramp_calls: int, outliers: float, shapes: int):
    """Per-call times of one shape of `shapes`, drawn until the protocol's rule stops (a generator)."""
    sigma = math.sqrt(math.log(1 + cv * cv))
    target, least = protocol.precision(target_rse, min_reps, shapes)
    n, total, squares = 0, 0.0, 0.0  # running sums: the relative standard error (timing.rse) at each call
    while True:
        t = mean * rng.lognormvariate(-sigma * sigma / 2, sigma)
        if n < ramp_calls:
            t *= 1 + ramp
        if rng.random() < outliers:
            t *= 3
        n, total, squares = n + 1, total + t, squares + t * t
        yield t
        if protocol.max_calls is not None and n >= protocol.max_calls:
            return
        if target is not None and n >= max(least, protocol.min_calls, 2):
            m = total / n
            std = math.sqrt(max(squares - n * m * m, 0.0) / (n - 1))
            if std / math.sqrt(n) / m < target:
                return


def incumbent_times(rng, keys, cvs, protocol, target_rse, min_reps, ramp, ramp_calls, outliers) -> dict:
    """The incumbent's recorded mean per shape (true mean 1.0), timed as the candidate is: with the
    error, the slow first calls and the outliers its own timing had."""
    recorded = {}
    for key, cv in zip(keys, cvs):
        calls = list(shape_times(rng, 1.0, cv, protocol, target_rse, min_reps, ramp, ramp_calls, outliers,
                                 len(keys)))
        recorded[key] = statistics.fmean(calls)
    return recorded


# The rules compared: (name, partway with the later half held, the spread across shapes the
# rule allows for: a number, or "true" for the simulated candidates' own).
NONE = 1e-9  # racing reads a spread of 0 as none given
RULES = (("whole shapes, spread 0", False, NONE), ("partway + later half, spread 0", True, NONE),
         ("partway + later half, SPREAD", True, racing.SPREAD), ("partway + later half, true spread", True, "true"))


def race(rng, factors: list[float], keys, cvs, incumbent, protocol, target_rse, min_reps, ramp, ramp_calls,
         outliers, partway: bool) -> tuple[bool, int]:
    """(stopped, calls timed) for one candidate `factors[i]` times the incumbent's true time on shape i."""
    shapes: list[dict] = []
    calls = 0
    for key, cv, slower in zip(keys, cvs, factors):
        times: list[float] = []
        for t in shape_times(rng, slower, cv, protocol, target_rse, min_reps, ramp, ramp_calls, outliers,
                             len(keys)):
            times.append(t)
            calls += 1
            if partway and racing.due(len(times)):
                later = times[len(times) // 2:]
                if racing.decide_within(incumbent, shapes, {"key": key, **timing.stats(times)},
                                        {"key": key, **timing.stats(later)}, len(keys), True):
                    return True, calls
        shapes.append({"key": key, **timing.stats(times)})
        later = {"key": key, **timing.stats(times[len(times) // 2:])} if partway else None
        if racing.decide(incumbent, shapes, len(keys), True, later=later):
            return True, calls
    return False, calls


def candidate_factors(rng, slower: float, shapes: int, spread: float) -> list[float]:
    """Per-shape slowdowns whose geomean is `slower`, log-normally `spread` apart."""
    logs = [rng.gauss(0.0, spread) for _ in range(shapes)]
    mean = sum(logs) / shapes
    return [slower * math.exp(x - mean) for x in logs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="simulated candidates per slowdown")
    parser.add_argument("--shapes", type=int, default=18, help="benchmark shapes (the fp8 problem has 18)")
    parser.add_argument("--cvs", type=float, nargs="+", default=[0.002, 0.01, 0.03, 0.07, 0.12, 0.18],
                        help="per-call spread of the shapes, cycled")
    parser.add_argument("--slower", type=float, nargs="+", default=[0.9, 0.97, 1.0, 1.03, 1.06, 1.1, 1.2, 1.5, 2.0])
    parser.add_argument("--shape-spread", type=float, default=0.1,
                        help="standard deviation across shapes of a candidate's log ratio to the incumbent")
    parser.add_argument("--protocol", default="gpumode-leaderboard-wall")
    parser.add_argument("--target-rse", type=float, default=0.005, help=".kgit.yaml timing.target_rse")
    parser.add_argument("--min-reps", type=int, default=10, help=".kgit.yaml timing.min_reps")
    parser.add_argument("--noise", type=float, default=0.005,
                        help="the incumbent's relative standard error a shape, as evolve passes it")
    parser.add_argument("--ramp", type=float, default=0.1)
    parser.add_argument("--ramp-calls", type=int, default=10)
    parser.add_argument("--outliers", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    protocol = protocols.get(args.protocol)
    if protocol.max_calls is None:
        parser.error(f"{args.protocol} has no fixed most calls; pick a fixed-rule protocol")
    keys = [f"shape {i + 1}" for i in range(args.shapes)]
    cvs = [args.cvs[i % len(args.cvs)] for i in range(args.shapes)]
    rng = random.Random(args.seed)
    started = time.monotonic()
    rows = []
    for slower in args.slower:
        row: list = [slower]
        for _, partway, spread in RULES:
            stops, calls = 0, []
            for _ in range(args.runs):
                incumbent = {"name": "incumbent", "noise": args.noise,
                             "spread": max(args.shape_spread, NONE) if spread == "true" else spread,
                             "times": incumbent_times(rng, keys, cvs, protocol, args.target_rse, args.min_reps,
                                                      args.ramp, args.ramp_calls, args.outliers)}
                factors = candidate_factors(rng, slower, len(keys), args.shape_spread)
                stopped, used = race(rng, factors, keys, cvs, incumbent, protocol, args.target_rse, args.min_reps,
                                     args.ramp, args.ramp_calls, args.outliers, partway)
                stops += stopped
                calls.append(used)
            row += [f"{stops / args.runs:.1%}", f"{statistics.fmean(calls):.0f}"]
        rows.append(row)
    print(f"{args.runs} simulated candidates per slowdown; {args.shapes} shapes, per-call cv {args.cvs} cycled; "
          f"protocol {args.protocol}, target rse {args.target_rse}, min_reps {args.min_reps}; incumbent noise "
          f"{args.noise}; candidates' shapes {args.shape_spread} apart (log); first {args.ramp_calls} calls of each shape {args.ramp:.0%} slower; outliers "
          f"{args.outliers:.0%} at 3x; {time.monotonic() - started:.0f} s")
    headers = ["true slowdown"]
    for name, _, _ in RULES:
        headers += [f"stopped ({name})", f"calls ({name})"]
    print(tabulate(rows, headers=headers, tablefmt="github"))


if __name__ == "__main__":
    main()
