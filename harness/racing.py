"""Racing: whether a candidate is already, beyond the measured noise, slower than the incumbent.

kgit evolve passes the incumbent (the base's per-shape GPU times and its relative noise)
in the judge's spec; after each benchmark shape the judge asks `decide` whether to stop
timing. The rule works on the log ratios of the shapes timed so far, so it is the
geomean comparison kgit makes afterwards, restricted to those shapes:

    mean(log(candidate / incumbent)) - Z * its standard error > log(1 + MARGIN)

where the mean over the shapes timed so far stands for the mean over all of them, the
figure kgit ranks. Its standard error has two parts. The measurement: each timed shape's
own spread (std/sqrt(n)/mean) with the incumbent's noise. The shapes not timed yet: a
candidate is rarely faster or slower by the same factor on every shape (a GEMM's tiles win
on some sizes and lose on others), so the timed shapes' mean misses the whole one by an
amount that grows with how far apart one candidate's shapes lie (SPREAD, the standard
deviation of the log ratios across shapes: the campaign's, from its fully timed attempts,
as kgit evolve passes it, or the timed shapes' own where that is wider) and with how few
shapes are timed. Without it, a candidate 7% faster overall was stopped on the H200 after
twenty calls of its first of 18 shapes. MARGIN is the run-to-run floor a single
measurement cannot resolve. All are wide on purpose: stopping a winner costs a real result,
letting a loser finish costs only seconds. Interpreter timings never race (they are host time).

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
import statistics

# Standard errors the candidate must be beyond before it stops: a false stop needs a 3-sigma event.
Z = 3.0
# Slower by less than this is never a stop, whatever the spreads (clocks and thermals move
# a GPU timing by a few percent from one run to the next).
MARGIN = 0.05
# How far apart one candidate's shapes lie (standard deviation across shapes of
# log(candidate / incumbent)) where the incumbent brings no campaign figure: wide, as the
# offline strategist's fp8 candidates were (one 7% faster overall, >5% slower on its first
# shape). `campaign_spread` never goes below SPREAD_FLOOR: timing noise alone puts the
# shapes of an unchanged kernel about that far apart.
SPREAD = 0.15
SPREAD_FLOOR = 0.02
# Inside a shape: the fewest calls a verdict rests on, and how many calls between two asks.
WITHIN_MIN_CALLS = 20
WITHIN_EVERY = 5


def decide(incumbent: dict | None, timed: list[dict], total: int, on_gpu: bool, stat: str = "mean_us",
           later: dict | None = None) -> dict | None:
    """The race verdict after the shapes in `timed`, or None to go on timing.

    `incumbent` is {"name": ..., "times": {shape key: us}, "noise": relative standard error
    of one shape's time or None, "spread": the campaign's spread across shapes (optional,
    `campaign_spread`)}. `later`: the entry of the later half of the last shape's
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
    mean = sum(logs) / k
    spread = _spread(incumbent, logs)
    # The whole mean is (k * timed + (total - k) * untimed) / total; the untimed shapes' mean
    # differs from the timed ones' by SPREAD * sqrt(1/k + 1/(total - k)).
    untimed = max(total - k, 0)
    shapes_error = (untimed / total) * spread * math.sqrt(1 / k + 1 / untimed) if untimed else 0.0
    error = math.sqrt(variance / (k * k) + shapes_error * shapes_error)
    if mean - Z * error <= math.log(1 + MARGIN):
        return None
    return {"incumbent": incumbent.get("name") or "the incumbent", "timed": len(timed), "total": total,
            "compared": keys, "slower": round(math.exp(mean), 4), "bound": round(math.exp(mean - Z * error), 4),
            "z": Z, "margin": MARGIN, "spread": round(spread, 4)}


def _spread(incumbent: dict, logs: list[float]) -> float:
    """The spread across shapes the verdict allows for: the incumbent's (the campaign's), or
    SPREAD; the timed shapes' own sample spread where that is wider."""
    given = incumbent.get("spread")
    spread = float(given) if _positive(given) else SPREAD
    if len(logs) >= 2:
        spread = max(spread, statistics.stdev(logs))
    return spread


def campaign_spread(ratios: list[list[float]]) -> float | None:
    """The spread across shapes (`SPREAD`'s kind) that a campaign's fully timed attempts show:
    `ratios` holds, per attempt, its per-shape time over its base's on the same shapes. The
    second largest of the attempts' spreads (the largest alone could be one odd attempt's),
    at least SPREAD_FLOOR; None with fewer than three attempts of three shapes or more."""
    spreads = []
    for ratio in ratios:
        logs = [math.log(r) for r in ratio if _positive(r)]
        if len(logs) >= 3:
            spreads.append(statistics.stdev(logs))
    if len(spreads) < 3:
        return None
    return max(sorted(spreads)[-2], SPREAD_FLOOR)


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
