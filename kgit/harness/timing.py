"""Timing: device events on a GPU, the host clock in the CPU interpreter.

Every repetition gets fresh inputs (so a cache keyed on input identity serves stale
results), a poisoned output, and a flushed L2; a random sample of the timed outputs
is re-checked after timing, so a kernel that is right once and wrong later fails.
"""

from __future__ import annotations

import math
import platform
import random
import statistics
import time

from . import checking

# At least the largest last-level cache we target: 256 MB covers the MI300X
# Infinity Cache and is 4x the H100/H200 L2.
FLUSH_BYTES = 256 * 1024 * 1024
RECHECKED = 3


class Clock:
    """The timing functions, captured before the candidate is imported."""

    def __init__(self, torch, on_gpu):
        self.on_gpu = on_gpu
        self.perf_counter = time.perf_counter
        self.originals = {"time.perf_counter": (time, "perf_counter", time.perf_counter)}
        if on_gpu:
            self.Event = torch.cuda.Event
            self.synchronize = torch.cuda.synchronize
            self.originals.update({
                "torch.cuda.Event": (torch.cuda, "Event", torch.cuda.Event),
                "torch.cuda.synchronize": (torch.cuda, "synchronize", torch.cuda.synchronize),
                "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time),
                "torch.cuda.Event.record": (torch.cuda.Event, "record", torch.cuda.Event.record),
            })
            self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    @classmethod
    def capture(cls, torch, on_gpu):
        return cls(torch, on_gpu)

    def tampered(self) -> list[str]:
        return [name for name, (owner, attr, value) in self.originals.items() if getattr(owner, attr, None) is not value]

    def verify(self, torch):
        from .runner import Verdict

        changed = self.tampered()
        if changed:
            raise Verdict("rejected", f"the candidate replaced {', '.join(changed)}", reason="patched timers")

    def time_call(self, call) -> tuple[float, float]:
        """(output, device-or-host microseconds, host microseconds) of one call."""
        if not self.on_gpu:
            t0 = self.perf_counter()
            out = call()
            t1 = self.perf_counter()
            return out, (t1 - t0) * 1e6, (t1 - t0) * 1e6
        self.flush.zero_()
        start, end = self.Event(enable_timing=True), self.Event(enable_timing=True)
        self.synchronize()
        h0 = self.perf_counter()
        start.record()
        out = call()
        end.record()
        self.synchronize()
        h1 = self.perf_counter()
        return out, start.elapsed_time(end) * 1e3, (h1 - h0) * 1e6


def measure(task, reference, kernel, shape, secret, clock, settings, torch, call_fn) -> dict:
    warmup, min_reps = int(settings["warmup"]), int(settings["min_reps"])
    target_rse, max_time = float(settings["target_rse"]), float(settings["max_time_s"])
    base_seed = int(shape.get("seed", 0))

    for i in range(warmup):
        data = checking.make_input(reference, shape, checking.mix_seed(base_seed, secret, 1000 + i))
        call_fn(kernel, data)
    checking.sync(torch)

    rng = random.Random(secret ^ base_seed)
    # Which repetitions get re-checked is decided now, unseen by the candidate.
    planned = set(rng.sample(range(min_reps), min(RECHECKED, min_reps)))
    kept = []  # (pristine inputs, output copy) of the re-checked repetitions
    times, host_times = [], []
    spent_start = clock.perf_counter()
    i = 0
    while True:
        data = checking.make_input(reference, shape, checking.mix_seed(base_seed, secret, i))
        pristine = checking.clone(data) if i in planned else None
        checking.poison(data, task.output)
        out, t, host = clock.time_call(lambda: call_fn(kernel, data))
        times.append(t)
        host_times.append(host)
        if pristine is not None:
            kept.append((pristine, checking.clone(out)))
        i += 1
        spent = clock.perf_counter() - spent_start
        if i >= min_reps and (_rse(times) < target_rse or spent > max_time):
            break
    # The last call is always among the re-checked ones: a kernel that decays is caught.
    kept.append((checking.make_input(reference, shape, checking.mix_seed(base_seed, secret, i - 1)), out))

    for pristine, out in kept:
        ok, message = checking.compare(task, reference, pristine, out)
        if not ok:
            return {"error": f"a timed run gave a wrong result: {message}", **_stats(times)}
    stats = _stats(times)
    stats["host_mean_us"] = statistics.fmean(host_times)
    return stats


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
