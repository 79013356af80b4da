"""Timing: device events on a GPU, the host clock in the CPU interpreter.

Every repetition gets fresh inputs (so a cache keyed on input identity serves stale
results), a poisoned output, and a flushed L2. A random sample of the timed outputs
plus the last one are re-checked after timing against inputs regenerated from their
seeds, so a kernel that is right once and wrong later fails. See docs/harness.md for
why the end event is recorded right after the call and how escaped work is caught.
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
# Host-clock cross-check: back-to-back calls ended by a device-wide synchronize must
# not take much longer per call than the events (or the host's own launch time) say.
# 1.5x absorbs the variance of tiny kernels; the slack absorbs the final synchronize.
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

    def host_batch(self, call, inputs, region) -> float:
        """Host microseconds per call for back-to-back calls ended by a device-wide synchronize."""
        self.synchronize()
        h0 = self.perf_counter()
        with region:
            for data in inputs:
                call(data)
        self.synchronize()
        return (self.perf_counter() - h0) * 1e6 / len(inputs)


def measure(task, reference, candidate, shape, secret, clock, settings, torch) -> dict:
    """Time one shape; returns the statistics, or them plus `error` if a re-check failed."""
    warmup, min_reps = int(settings["warmup"]), int(settings["min_reps"])
    target_rse, max_time = float(settings["target_rse"]), float(settings["max_time_s"])
    base_seed = int(shape.get("seed", 0))

    def seed(i):
        return checking.mix_seed(base_seed, secret, i)

    for i in range(warmup):
        candidate.call(checking.make_input(reference, shape, seed(1000 + i)))
        candidate.verify()
    checking.sync(torch)

    kept = Reservoir(RECHECKED, random.Random(secret ^ (base_seed << 1)))
    times, host_call = [], []
    spent_start = clock.perf_counter()
    i = 0
    while True:
        data = checking.make_input(reference, shape, seed(i))
        checking.poison(data, task.output)
        out, t, host = clock.time_call(lambda: candidate.kernel(data), candidate.guarded())
        candidate.verify()
        times.append(t)
        host_call.append(host)
        kept.offer(lambda: (i, checking.clone(out), data))
        last = (i, out, data)
        i += 1
        spent = clock.perf_counter() - spent_start
        if i >= min_reps and (_rse(times) < target_rse or spent > max_time):
            break
    kept = kept.items
    if all(k[0] != last[0] for k in kept):
        kept.append(last)  # a kernel that decays over time is caught by its last call

    stats = _stats(times)
    stats["host_call_us"] = statistics.fmean(host_call)
    stats["rechecked"] = len(kept)
    for rep, out, data in kept:
        pristine = checking.make_input(reference, shape, seed(rep))
        ok, message = checking.inputs_unchanged(pristine, data, task.output)
        if ok:
            ok, message = checking.compare(task, reference, pristine, out)
        if not ok:
            return {"error": f"timed repetition {rep} gave a wrong result: {message}", **stats}
    if clock.on_gpu:
        inputs = _batch_inputs(reference, shape, seed, torch)
        stats["host_batch_us"] = clock.host_batch(candidate.kernel, inputs, candidate.guarded())
        candidate.verify()
    return stats


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


def escaped(stats: dict) -> str | None:
    """Why the host clock says work escaped the timing events, or None."""
    batch = stats.get("host_batch_us")
    if batch is None:
        return None
    bound = ESCAPE_RATIO * max(stats["mean_us"], stats["host_call_us"]) + ESCAPE_SLACK_US
    if batch > bound:
        return (f"back-to-back calls took {batch:.1f} us each by the host clock, but the timing events "
                f"measured {stats['mean_us']:.1f} us (and the host spent {stats['host_call_us']:.1f} us in the call): "
                "work ran outside the timed stream or after the call returned")
    return None


def _batch_inputs(reference, shape, seed, torch):
    first = checking.make_input(reference, shape, seed(2000))
    size = sum(t.numel() * t.element_size() for t in _tensors(first)) or 1
    count = max(2, min(BATCH_MAX, BATCH_BYTES // size))
    return [first] + [checking.make_input(reference, shape, seed(2000 + j)) for j in range(1, count)]


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
    info = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001 - triton is optional for pure-torch candidates
        info["triton"] = None
    if torch.cuda.is_available():
        info["cuda"] = torch.version.cuda
        info["hip"] = getattr(torch.version, "hip", None)
        info["arch"] = "".join(map(str, torch.cuda.get_device_capability()))
    return info
