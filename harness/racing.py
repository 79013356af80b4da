"""Racing: whether a candidate is already, beyond the measured noise, slower than the incumbent.

kgit evolve passes the incumbent (the base's per-shape GPU times and its relative noise)
in the judge's spec; after each benchmark shape the judge asks `decide` whether to stop
timing. The rule works on the log ratios of the shapes timed so far, so it is the
geomean comparison kgit makes afterwards, restricted to those shapes:

    mean(log(candidate / incumbent)) - Z * its standard error > log(1 + MARGIN)

The standard error combines each shape's own spread (std/sqrt(n)/mean) with the
incumbent's noise, and MARGIN is the run-to-run floor a single measurement cannot
resolve; both are wide on purpose: stopping a winner costs a real result, letting a
loser finish costs only seconds. Interpreter timings never race (they are host time).

The timed loops also ask `decide_within` partway through a shape, every few calls: the
shape's calls so far count as one more shape. There, and after a whole shape, the later
half of the last shape's calls alone must be beyond the noise too, so that a shape's slower
first calls (clocks and caches coming up after the checks) cannot stop a candidate that the
rest of its calls would clear: a shape may end after ten calls where the protocol's
precision is met (protocols.Protocol.precision). Without the partway verdict a stopped
attempt timed whole shapes (up to a hundred calls each under the fp8 problem's protocol)
before its verdict.
"""

from __future__ import annotations

import math

# Standard errors the candidate must be beyond before it stops: a false stop needs a 3-sigma event.
Z = 3.0
# Slower by less than this is never a stop, whatever the spreads (clocks and thermals move
# a GPU timing by a few percent from one run to the next).
MARGIN = 0.05
# Inside a shape: the fewest calls a verdict rests on, and how many calls between two asks.
WITHIN_MIN_CALLS = 20
WITHIN_EVERY = 5


def decide(incumbent: dict | None, timed: list[dict], total: int, on_gpu: bool, stat: str = "mean_us",
           later: dict | None = None) -> dict | None:
    """The race verdict after the shapes in `timed`, or None to go on timing.

    `incumbent` is {"name": ..., "times": {shape key: us}, "noise": relative standard error
    of one shape's time or None}. `later`: the entry of the later half of the last shape's
    calls, which must be beyond the noise too where it has a spread (two calls or more): as
    inside a shape, slow first calls must not stop a candidate. The verdict says which shapes
    were compared and by how much.
    """
    if len(timed) >= total:
        return None
    return _beyond(incumbent, timed, later, total, on_gpu, stat)


def never(times: list[float]) -> None:
    """The race a timed loop asks when there is nothing to race against."""
    return None


def due(calls: int) -> bool:
    """Whether a timed loop asks `decide_within` after this many calls of a shape."""
    return calls >= WITHIN_MIN_CALLS and calls % WITHIN_EVERY == 0


def decide_within(incumbent: dict | None, timed: list[dict], whole: dict, later: dict, total: int, on_gpu: bool,
                  stat: str = "mean_us") -> dict | None:
    """The race verdict partway through a shape, or None: `timed` are the shapes finished,
    `whole` the entry of the shape's calls so far and `later` that of their later half (each
    with the statistics of the judge's entries). The verdict says how many calls into the
    shape it came (`calls`)."""
    verdict = _beyond(incumbent, [*timed, whole], later, total, on_gpu, stat)
    return None if verdict is None else {**verdict, "calls": whole.get("n")}


def _beyond(incumbent: dict | None, timed: list[dict], later: dict | None, total: int, on_gpu: bool,
            stat: str) -> dict | None:
    """The verdict on `timed`, held to `later` too (the last shape's later half, in its place)
    where that has a spread (two calls or more)."""
    verdict = _verdict(incumbent, timed, total, on_gpu, stat)
    if verdict is None or (later is not None and (later.get("n") or 0) >= 2
                           and _verdict(incumbent, [*timed[:-1], later], total, on_gpu, stat) is None):
        return None
    return verdict


def _verdict(incumbent: dict | None, timed: list[dict], total: int, on_gpu: bool, stat: str) -> dict | None:
    if not on_gpu or not incumbent or not incumbent.get("times"):
        return None
    times = incumbent["times"]
    base_noise = incumbent.get("noise")
    logs, variance, keys = [], 0.0, []
    for shape in timed:
        mine, theirs = shape.get(stat), times.get(shape.get("key"))
        if not _positive(mine) or not _positive(theirs):
            continue
        own = _relative_error(shape, stat)
        if own is None or base_noise is None:
            return None  # no spread measured: nothing to be "beyond", so never stop
        logs.append(math.log(mine / theirs))
        variance += own * own + base_noise * base_noise
        keys.append(shape["key"])
    if not logs:
        return None
    k = len(logs)
    mean, error = sum(logs) / k, math.sqrt(variance) / k
    if mean - Z * error <= math.log(1 + MARGIN):
        return None
    return {"incumbent": incumbent.get("name") or "the incumbent", "timed": len(timed), "total": total,
            "compared": keys, "slower": round(math.exp(mean), 4), "bound": round(math.exp(mean - Z * error), 4),
            "z": Z, "margin": MARGIN}


def _relative_error(shape: dict, stat: str) -> float | None:
    std, n, value = shape.get("std_us"), shape.get("n"), shape.get(stat)
    if std is None or not n or n < 2 or not _positive(value):
        return None
    return std / math.sqrt(n) / value


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def subject(slug: str, race: dict) -> str:
    """The commit subject of a stopped attempt (never the word speedup)."""
    return f"{slug}: stopped, slower than {race.get('incumbent')} after {how_far(race)}"


def how_far(race: dict) -> str:
    """How far the timing got before the verdict: "2 of 6 shapes", or "20 calls into shape 1 of 6"."""
    if race.get("calls"):
        return f"{race['calls']} calls into shape {race.get('timed')} of {race.get('total')}"
    return f"{race.get('timed')} of {race.get('total')} shapes"
