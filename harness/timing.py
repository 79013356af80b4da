"""Timing: the runner's device events on a GPU, the judge's clock in the CPU interpreter.

`Clock` runs in the runner: it times one call between device events, after an L2 flush
and a GPU hold. `measure` runs in the judge: every repetition gets a freshly generated
input and a poisoned output, the judge copies every output before the next request,
and a random sample of the timed outputs plus the last one are re-checked against the
judge's private inputs after timing, so a kernel that is right once and wrong later
fails. On a GPU the runner's event figures count only while the judge's own clock over
back-to-back calls agrees with them (`disagrees`). See docs/harness.md.
"""

from __future__ import annotations

import math
import platform
import random
import statistics
import time

from kgit_harness import checking

# At least the largest last-level cache we target: 256 MB covers the MI300X
# Infinity Cache and is 4x the H100/H200 L2.
FLUSH_BYTES = 256 * 1024 * 1024
RECHECKED = 3
# Judge-clock cross-check: back-to-back calls, timed by the judge until it holds their
# outputs, must not take much longer per call than the runner's events say. 1.5x absorbs
# the variance of tiny kernels; the slack absorbs launch time that back-to-back calls
# cannot hide (a host-bound kernel) and the final synchronize.
ESCAPE_RATIO = 1.5
ESCAPE_SLACK_US = 20.0
BATCH_BYTES = 4 << 30
# Bounds of the GPU hold before each timed call (see Clock.hold_gpu).
HOLD_MIN_US, HOLD_MAX_US = 100.0, 20_000.0
BATCH_MAX = 10


class Clock:
    """The timing functions, captured before the candidate is imported."""

    def __init__(self, torch, on_gpu):
        self.on_gpu = on_gpu
        self.perf_counter = time.perf_counter
        self.originals = {"time.perf_counter": (time, "perf_counter", time.perf_counter)}
        if on_gpu:
            self.synchronize = torch.cuda.synchronize
            self.originals.update({
                "torch.cuda.Event": (torch.cuda, "Event", torch.cuda.Event),
                "torch.cuda.synchronize": (torch.cuda, "synchronize", torch.cuda.synchronize),
                "torch._C._cuda_synchronize": (torch._C, "_cuda_synchronize", torch._C._cuda_synchronize),
                "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time),
                "torch.cuda.Event.record": (torch.cuda.Event, "record", torch.cuda.Event.record),
                "torch.cuda.Event.synchronize": (torch.cuda.Event, "synchronize", torch.cuda.Event.synchronize),
                "torch.cuda.current_stream": (torch.cuda, "current_stream", torch.cuda.current_stream),
            })
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
            self.sleep = getattr(torch.cuda, "_sleep", None)
            self.cycles_per_us = self._calibrate_sleep() if self.sleep else 0.0
            self.host_us = HOLD_MIN_US

    def _calibrate_sleep(self) -> float:
        """GPU clock cycles per microsecond of `torch.cuda._sleep`, measured with events."""
        cycles = 2_000_000
        self.sleep(cycles)  # warm-up: the first launch loads the kernel
        self.synchronize()
        self.start.record()
        self.sleep(cycles)
        self.end.record()
        self.synchronize()
        us = self.start.elapsed_time(self.end) * 1e3
        return cycles / us if us > 0 else 0.0

    def hold_gpu(self):
        """Keep the GPU busy while the host enters the guards and launches the call.

        Without it the GPU finishes the flush and idles until the (guarded, Python-heavy)
        launch arrives, and that idle gap lands between the events: measured on an H200,
        vector_add at 1M elements read 54 us against do_bench's 8 us. The hold lasts
        twice the host time the previous call took, so the call is queued before the
        start event fires.
        """
        if self.cycles_per_us:
            self.sleep(int(self.cycles_per_us * min(HOLD_MAX_US, max(HOLD_MIN_US, 2 * self.host_us))))

    def tampered(self) -> list[str]:
        return [name for name, (owner, attr, value) in self.originals.items() if getattr(owner, attr, None) is not value]

    def time_call(self, call, region):
        """(output, device-or-host microseconds, host microseconds spent inside the call).

        `region` (the runtime guards) is entered before the start event and left after
        the end event, so only the call itself lies between the two.
        """
        if not self.on_gpu:
            with region:
                t0 = self.perf_counter()
                out = call()
                t1 = self.perf_counter()
            return out, (t1 - t0) * 1e6, (t1 - t0) * 1e6
        self.synchronize()
        # The flush runs ahead of the start event with no synchronize in between, as in
        # triton.testing.do_bench: the host launches the call while the flush still runs,
        # so launch latency is not counted when the GPU is the bottleneck.
        self.flush.zero_()
        self.hold_gpu()
        entered = self.perf_counter()
        with region:
            self.start.record()
            h0 = self.perf_counter()
            out = call()
            h1 = self.perf_counter()
            self.end.record()
        self.synchronize()
        self.host_us = (h1 - entered) * 1e6
        return out, self.start.elapsed_time(self.end) * 1e3, (h1 - h0) * 1e6


def measure(task, reference, shape, secret, settings, on_gpu, torch, new_slots) -> dict:
    """Time one shape through the runner (judge side); the statistics, plus `error` if a check failed.

    `new_slots(sample, count)` gives the shape's shared arena (judge.Slots). Each
    repetition gets a freshly generated input and a poisoned output; the judge copies
    every output before it looks at the next, so which repetitions are re-checked is
    decided privately and the runner cannot tell.
    """
    warmup, min_reps = int(settings["warmup"]), int(settings["min_reps"])
    target_rse, max_time = float(settings["target_rse"]), float(settings["max_time_s"])
    base_seed = int(shape.get("seed", 0))

    def seed(i):
        return checking.mix_seed(base_seed, secret, i)

    first = checking.make_input(reference, shape, seed(0))
    batch = _batch_count(first) if on_gpu else 0
    slots = new_slots(first, 1 + batch)
    try:
        return _measure(task, reference, slots, shape, seed, first, batch, on_gpu, torch,
                        warmup, min_reps, target_rse, max_time, secret ^ (base_seed << 1))
    finally:
        slots.close()


def _measure(task, reference, slots, shape, seed, first, batch, on_gpu, torch,
             warmup, min_reps, target_rse, max_time, rng_seed) -> dict:
    clock = time.perf_counter
    for i in range(warmup):
        slots.fill(0, checking.make_input(reference, shape, seed(1000 + i)))
        slots.call(0, timed=False)
    round_trip = _round_trip_us(slots, clock)

    kept = Reservoir(RECHECKED, random.Random(rng_seed))
    times, judge_times, host_call = [], [], []
    spent_start = clock()
    i = 0
    while True:
        private = first if i == 0 else checking.make_input(reference, shape, seed(i))
        slots.fill(0, private)
        t0 = clock()
        reply = slots.call(0, timed=True)
        out = slots.take(0)
        judge_us = (clock() - t0) * 1e6 - round_trip
        if reply["output"]:
            return {"error": f"timed repetition {i}: {reply['output']}", **_stats(times or [0.0])}
        ok, message = checking.inputs_unchanged(private, slots.data(0), task.output)
        if not ok:
            return {"error": f"timed repetition {i}: {message}", **_stats(times or [0.0])}
        # On a GPU the runner's events are the figure (checked against the judge's clock
        # below); in the CPU interpreter the judge's own clock over the call is.
        times.append(reply["us"] if on_gpu else judge_us)
        judge_times.append(judge_us)
        host_call.append(reply["host_us"])
        kept.offer(lambda: (i, out, private))
        last = (i, out, private)
        i += 1
        spent = clock() - spent_start
        if i >= min_reps and (_rse(times) < target_rse or spent > max_time):
            break
    kept = kept.items
    if all(k[0] != last[0] for k in kept):
        kept.append(last)  # a kernel that decays over time is caught by its last call

    stats = _stats(times)
    stats["clock"] = "events" if on_gpu else "judge"
    stats["judge_call_us"] = statistics.fmean(judge_times)
    stats["host_call_us"] = statistics.fmean(host_call)
    stats["rechecked"] = len(kept)
    for rep, out, private in kept:
        ok, message = checking.compare(task, reference, private, out)
        if not ok:
            return {"error": f"timed repetition {rep} gave a wrong result: {message}", **stats}
    if on_gpu:
        error = _judge_batch(task, reference, slots, shape, seed, batch, clock, stats)
        if error:
            return {"error": error, **stats}
    return stats


def _round_trip_us(slots, clock, repeats: int = 5) -> float:
    """The judge's cost of one request with no kernel call: sent, answered, output copied."""
    times = []
    for _ in range(repeats):
        t0 = clock()
        slots.call(0, timed=False, empty=True)
        slots.take(0)
        times.append((clock() - t0) * 1e6)
    return statistics.median(times)


def _judge_batch(task, reference, slots, shape, seed, batch, clock, stats) -> str | None:
    """The judge's clock over back-to-back calls; `host_batch_us` per call, or why an output was wrong.

    Timed from the judge's request until it holds its copy of every output, minus the
    same round trip with no calls made, so work that escaped the runner's events (a side
    stream, a forged figure, work after a premature `done`) shows up here.
    """
    chosen = list(range(1, 1 + batch))
    inputs = []
    for j in chosen:
        private = checking.make_input(reference, shape, seed(2000 + j))
        slots.fill(j, private)
        inputs.append(private)
    empty, copies = [], []
    for _ in range(3):
        t0 = clock()
        slots.batch(chosen, empty=True)
        t1 = clock()
        [slots.take(j) for j in chosen]
        checking.sync(slots.torch)
        t2 = clock()
        empty.append((t2 - t0) * 1e6)
        copies.append((t2 - t1) * 1e6)
    # The judge's own copy of the outputs, per call: the runner's copy-out of each output
    # into the shared slot moves the same bytes on the device, after the calls, and the
    # empty round trip does not include it.
    stats["copy_us"] = statistics.median(copies) / len(chosen)
    t0 = clock()
    reply = slots.batch(chosen)
    outs = [slots.take(j) for j in chosen]
    checking.sync(slots.torch)
    stats["host_batch_us"] = max((clock() - t0) * 1e6 - statistics.median(empty), 0.0) / len(chosen)
    if reply["output"]:
        return f"a back-to-back call: {reply['output']}"
    for j, private, out in zip(chosen, inputs, outs):
        ok, message = checking.inputs_unchanged(private, slots.data(j), task.output)
        if ok:
            ok, message = checking.compare(task, reference, private, out)
        if not ok:
            return f"a back-to-back call gave a wrong result: {message}"
    return None


class Reservoir:
    """A uniform sample of k repetitions out of a count not known in advance.

    Decided after each call, from a generator the candidate never sees, so every
    repetition is equally likely to be re-checked and nothing tells a call it will be.
    """

    def __init__(self, k: int, rng: random.Random):
        self.k, self.rng, self.items, self.seen = k, rng, [], 0

    def offer(self, make):
        """Consider the next repetition; `make()` builds what to keep, only if it is kept."""
        self.seen += 1
        slot = len(self.items) if len(self.items) < self.k else self.rng.randrange(self.seen)
        if slot < len(self.items):
            self.items[slot] = make()
        elif slot < self.k:
            self.items.append(make())


DISAGREE_REASON = "timings disagree with the judge's clock"


def disagrees(stats: dict) -> str | None:
    """Why the judge's clock rejects the runner's event timings, or None.

    Back-to-back calls, timed by the judge, may take at most ESCAPE_RATIO x the larger
    of the event mean and the host time the runner says it spent in a call (copy-out
    included), plus ESCAPE_SLACK_US. The host term is the runner's own figure: without
    it every honest shape shorter than its guarded launch (60-150 us on the H200) would
    be rejected, and with it a runner that forges both figures escapes this check down
    to the speed-of-light floor (docs/harness.md says so plainly).
    """
    batch = stats.get("host_batch_us")
    if batch is None:
        return None
    host = stats.get("host_call_us") or 0.0
    copy = stats.get("copy_us") or 0.0
    bound = ESCAPE_RATIO * max(stats["mean_us"], host) + copy + ESCAPE_SLACK_US
    if batch > bound:
        return (f"back-to-back calls took {batch:.1f} us each by the judge's clock, but the runner's timing "
                f"events measured {stats['mean_us']:.1f} us and its host {host:.1f} us a call (the bound is "
                f"{ESCAPE_RATIO:g} x the larger + the output copy, {copy:.1f} us by the judge's clock, + "
                f"{ESCAPE_SLACK_US:g} us): work ran outside the timed stream, "
                "after the call returned, or the figures were forged")
    return None


def _batch_count(first) -> int:
    size = sum(t.numel() * t.element_size() for t in _tensors(first)) or 1
    return max(2, min(BATCH_MAX, BATCH_BYTES // size))


def _tensors(data):
    import torch

    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, (tuple, list)):
        return [t for d in data for t in _tensors(d)]
    if isinstance(data, dict):
        return [t for d in data.values() for t in _tensors(d)]
    return []


def _rse(times) -> float:
    if len(times) < 2:
        return math.inf
    mean = statistics.fmean(times)
    return statistics.stdev(times) / math.sqrt(len(times)) / mean if mean > 0 else math.inf


def _stats(times) -> dict:
    return {
        "mean_us": statistics.fmean(times), "median_us": statistics.median(times),
        "min_us": min(times), "std_us": statistics.stdev(times) if len(times) > 1 else 0.0,
        "n": len(times),
    }


def versions(torch) -> dict:
    from importlib import metadata

    info = {"python": platform.python_version(), "torch": torch.__version__}
    # Read from the installed metadata: the judge never needs triton itself, and
    # importing it costs about a second.
    try:
        info["triton"] = metadata.version("triton")
    except metadata.PackageNotFoundError:  # triton is optional for pure-torch candidates
        info["triton"] = None
    if torch.cuda.is_available():
        info["cuda"] = torch.version.cuda
        info["hip"] = getattr(torch.version, "hip", None)
        info["arch"] = "".join(map(str, torch.cuda.get_device_capability()))
    return info
