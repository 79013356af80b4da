"""Timing protocols: how a problem's benchmark shapes are timed, each named for the evaluator
whose rules it follows, so that the figure kgit writes into git is the figure that
evaluator would give.

A protocol fixes what a timed call is handed (its inputs: refilled buffers, fresh tensors,
a batch of tuples reused, one tuple), which clock times it, whether the L2 cache is
flushed first, which outputs are re-checked, the stopping rules and the statistic. Every
problem names one in task.yml (`protocol:`, default `kgit-adaptive`), `.kgit.yaml` may
choose another (`timing.protocol`), and every figure records the protocol it was taken
under: figures of different protocols are never ranked against each other.

This module is the table alone (no torch): kgit reads it to validate and describe
problems; the judge's timed loops are in timing.py (kgit-adaptive) and upstream_timing.py.
See docs/harness.md, "Timing protocols".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT = "kgit-adaptive"
# The loosest precision one shape of a many-shaped problem is taken to (Protocol.precision).
SHAPE_RSE_MAX = 0.02


@dataclass(frozen=True)
class Protocol:
    name: str
    follows: str  # whose evaluator it reproduces
    sentence: str  # what a timed call is, in one sentence (the scientist's task text, kgit show)
    # What each timed call is handed: "refilled" (new values in the same buffers), "fresh" (new
    # tensors at addresses never handed out before, new values), "batch" (a set of distinct
    # tuples made once, every timed sample calls all of them), "fixed" (one tuple, every call).
    inputs: str
    clock: str  # "events" (device events on the runner's stream) or "wall" (the host's clock, synchronized)
    flush: bool  # the L2 cache flushed before each timed call (or batch)
    recheck: str  # "every" timed output, or a "sample" of them
    statistic: str = "mean"
    # Stopping rules, for protocols with fixed ones (kgit-adaptive takes .kgit.yaml's `timing`):
    # at least `min_calls` and `min_total_s`; then stop when the relative standard error of the
    # mean is below `target_rse` (or kgit's looser one: `precision`), or `mean x calls` passes
    # `max_time_s`, or the shape's time passes `max_total_s`; never more than `max_calls`.
    max_calls: int | None = None
    min_calls: int = 3
    target_rse: float | None = None
    min_total_s: float = 0.0
    max_time_s: float = 30.0
    max_total_s: float = 120.0
    batch: int = 1  # tuples a timed sample calls back to back ("batch")
    # Untimed calls before timing: on the first benchmark shape only ("first") or each ("each"),
    # on one input, up to `warmup_calls` or `warmup_s` of the calls' own time, at least 3.
    warmup: str = "first"
    warmup_calls: int = 100
    warmup_s: float = 0.01

    @property
    def fresh(self) -> bool:
        """Whether no timed call may see a tensor object or address it has been handed before."""
        return self.inputs == "fresh"

    def precision(self, target_rse: float, min_reps: int, shapes: int = 1) -> tuple[float | None, int]:
        """(the relative standard error at which a shape's timing stops, the fewest calls before
        that may stop it), given kgit's own target (.kgit.yaml `timing.target_rse`, `min_reps`)
        and the problem's number of benchmark shapes.

        A protocol's calls, clock, checks and statistic are its evaluator's; how many calls it
        takes only sets how precise the mean is, not what it estimates. Where the protocol
        wants more precision than kgit's figures need (GPU MODE's 0.1%: on the H200 the fp8
        shapes then ran their 100 calls, each re-checked, for an evaluation of 11 s), kgit's
        need stops it, after at least `min_reps` calls, since a standard error estimated from
        3 calls says little. That need is the ranking figure's: the geometric mean over the
        problem's `shapes`, whose relative standard error is a shape's over sqrt(shapes), and
        what kgit does with it is compare two of them. Each shape stops where the difference of
        two evaluations' geomeans has a standard error of `target_rse` (the geomean's own is
        target_rse / sqrt(2); two evaluations of one kernel then differ by 0.8 x target_rse on
        average): at target_rse x sqrt(shapes / 2), never tighter than `target_rse` and never
        looser than SHAPE_RSE_MAX (18 fp8 shapes: 1.5%). Tighter buys no figure kgit uses: one
        GPU's timings move by more between runs (racing.MARGIN), while on the H200 the
        launch-bound fp8 shapes, whose calls vary by 5-15% under the wall clock, took 30-90
        re-checked calls each at the 1.06% of a geomean within half of `target_rse`. A target
        at or below the protocol's gives its own rule."""
        if self.target_rse is None or target_rse <= self.target_rse:
            return self.target_rse, self.min_calls
        per_shape = min(max(target_rse, target_rse * math.sqrt(max(shapes, 1) / 2)), SHAPE_RSE_MAX)
        return per_shape, max(self.min_calls, min_reps)


PROTOCOLS = {p.name: p for p in (
    Protocol(
        "kgit-adaptive", "kgit",
        "each timed call gets new input values in the same buffers, after an L2 flush, timed by device events "
        "(the judge's clock over back-to-back calls bounds them); repetitions until the mean is precise "
        "(.kgit.yaml timing), a sample of outputs re-checked",
        inputs="refilled", clock="events", flush=True, recheck="sample", statistic="task", warmup="kgit"),
    Protocol(
        "gpumode-leaderboard-wall", "GPU MODE's AMD leaderboard (2025): problems/amd/eval.py, leaderboard mode",
        "each timed call gets freshly generated inputs from a new seed (new tensors), the GPU is synchronized, "
        "and the host's wall clock times one call through to a synchronize after it; no L2 flush; every "
        "output is checked; the mean of up to 100 calls",
        inputs="fresh", clock="wall", flush=False, recheck="every", max_calls=100, target_rse=0.001,
        warmup_calls=100, warmup_s=0.01),
    Protocol(
        "gpumode-leaderboard-events", "GPU MODE's pmpp_v2 and NVIDIA leaderboards: problems/pmpp_v2/eval.py, "
        "problems/nvidia/eval.py, leaderboard mode",
        "each timed call gets freshly generated inputs from a new seed (new tensors), the L2 cache is cleared, "
        "and device events time one call; every output is checked; the mean of up to 100 calls",
        inputs="fresh", clock="events", flush=True, recheck="every", max_calls=100, target_rse=0.001,
        min_total_s=0.1, warmup_calls=1000, warmup_s=0.5),
    Protocol(
        "gpumode-batch", "GPU MODE's problems/nvidia/eval_better_bench.py, leaderboard mode",
        "50 distinct input tuples are made once; each timed sample clears the L2 cache and calls the kernel on "
        "all 50 back to back between one pair of device events, a call's figure being the pair's time over 50; "
        "every output is checked; the mean of the samples",
        inputs="batch", clock="events", flush=True, recheck="every", batch=50, max_calls=1000, target_rse=0.001,
        min_total_s=0.1, warmup="each", warmup_calls=1000, warmup_s=0.5),
    Protocol(
        "kernelbench-events", "KernelBench: time_execution_with_cuda_event (3 warm-up calls, 100 trials)",
        "one input tuple is made once; after 3 warm-up calls each of 100 calls on it is timed by device events on "
        "an unflushed cache, with a synchronize after each; a sample of outputs is re-checked; the mean",
        inputs="fixed", clock="events", flush=False, recheck="sample", max_calls=100, min_calls=100,
        max_time_s=1e9, max_total_s=1e9, warmup="each", warmup_calls=3, warmup_s=0.0),
)}


def get(name: str | None) -> Protocol:
    """The protocol called `name` (None: the default); a ValueError names the known ones."""
    name = name or DEFAULT
    if name not in PROTOCOLS:
        raise ValueError(f"unknown timing protocol {name!r}; known protocols: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]
