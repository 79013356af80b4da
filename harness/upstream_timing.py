"""The judge's timed loops for the protocols that follow other evaluators (harness/protocols.py).

Each loop times one benchmark shape the way its evaluator does, on the judge's side of the
judge/runner split: the judge makes every input (from seeds it alone holds), places it
where the runner can see it only once its clock runs (timing.timed_call), asks the runner
to call the kernel and time the call with the protocol's clock, copies the output before
anything else happens, checks it as the protocol says, and bounds the runner's figure by
its own clock (timing.settle).

- fresh (gpumode-leaderboard-wall, gpumode-leaderboard-events): every timed call gets its
  own slot of the shape's arena, a slot never handed out before in this evaluation, so no
  call sees a tensor object or a storage address it has seen before, and new values from a
  new seed; every output is checked. The shape's arenas are made as its calls need them, up to
  the protocol's most calls where memory allows, fewer (said in the shape's `note`) where it
  does not.
- batch (gpumode-batch): `batch` distinct tuples made once; each timed sample calls them
  all back to back between one pair of events after an L2 flush; every output of every
  sample is checked (each sample's outputs poisoned first, which upstream does not do).
- fixed (kernelbench-events): one tuple made once, every call on it; a sample re-checked.

In the CPU interpreter each keeps its structure but stops at `.kgit.yaml`'s timing limits:
interpreter figures rank nothing.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from typing import Any

from kgit_harness import checking, racing, timing
from kgit_harness.phases import PHASES

# The largest arena of fresh inputs one shape may take: on a GPU at most this and a quarter
# of the free memory, on the CPU this.
FRESH_BYTES = {True: 16 << 30, False: 1 << 30}
# Flushed, event-timed calls after a GPU shape's timing, for its device time (`device_us`).
DEVICE_CALLS = 5
# Timed slots of one arena of fresh inputs (_FreshArenas): a shape needing more gets another.
FRESH_CHUNK = 32
# Fresh calls after which the judge samples its allocator's free segments again (_hold), each
# given to the runner with the empty request that follows it (timing.empty_due).
HOLD_SAMPLES = timing.EMPTY_FIRST


class NoRoom(Exception):
    """Not even the protocol's fewest calls fit in the memory a shape may take."""


def measure(protocol, ctx, shape: dict, first_shape: bool, race=None) -> dict:
    """Time one shape under `protocol`; its statistics, plus `error` when a check failed.

    `ctx` (judge.TimingContext): task, reference, secret, settings, on_gpu, torch, new_slots,
    slot_bytes, free_bytes, calibration, retire. `race`, asked with the shape's times after
    each call (each sample of a batch), may end the shape with a racing verdict (`_raced`)."""
    loop = {"fresh": _fresh, "batch": _batch, "fixed": _fixed}[protocol.inputs]
    return loop(protocol, ctx, shape, first_shape, race or racing.never)


# -- shared pieces --------------------------------------------------------------------------

def _budget(ctx) -> int:
    """The memory one shape's fresh inputs, or the runner's held segments, may take: FRESH_BYTES,
    on a GPU at most a quarter of what is free."""
    free = ctx.free_bytes()
    return FRESH_BYTES[ctx.on_gpu] if free is None else min(FRESH_BYTES[ctx.on_gpu], free // 4)


def _hold(ctx) -> list[int]:
    """What the runner's allocator is to hold free before a fresh call (timing.free_segments)."""
    if not ctx.on_gpu:
        return []
    with PHASES.span("timing: allocator samples"):
        return timing.free_segments(ctx.torch, _budget(ctx))


def _seeder(ctx, shape):
    base = int(shape.get("seed", 0))
    return lambda i: checking.mix_seed(base, ctx.secret, i)


def _slot_size(ctx, first) -> int:
    return max(ctx.slot_bytes(first), 1)


def _capacity(ctx, size: int, wanted: int, least: int, budget: int | None = None) -> int:
    """Slots of `size` bytes (_slot_size) an arena may hold: `wanted`, or as many as memory (or
    `budget` bytes, where given) allows."""
    fits = (_budget(ctx) if budget is None else min(budget, _budget(ctx))) // size
    if fits < least:
        raise NoRoom(f"needs {math.ceil(least * size / (1 << 30) * 4)} GiB of free "
                     f"{'GPU ' if ctx.on_gpu else ''}memory for the timing's fresh inputs ({least} calls of "
                     f"{size / (1 << 20):.0f} MiB)")
    return min(wanted, fits)


def fresh_slots(capacity: int, wanted: int, device: int, least: int) -> tuple[int, list[int]]:
    """(timed calls, the device figure's slots) in an arena of `capacity` slots, slot 0 kept for
    the first check and the warm-up. Where memory cuts the arena short, the device figure keeps
    its `device` slots as long as `least` timed calls still fit: a shape that loses its device
    time loses the figure that tells a kernel's own time from the protocol's host work."""
    spare = capacity - 1
    calls = min(wanted, spare)
    if spare - calls < device and spare - device >= least:
        calls = spare - device
    return calls, list(range(1 + calls, 1 + min(spare, calls + device)))


class _FreshArenas:
    """A shape's arenas under a fresh protocol, made as its calls need them.

    Most shapes stop long before the protocol's most calls (on the H200 the fp8 shapes took
    10-40 of 100), and an arena costs by its slots, in the judge and in the runner that maps
    it: one of FRESH_CHUNK timed slots comes first, the next when those are used. Every arena
    stays alive until the shape ends (`retire`), so no two slots of the shape share an
    address, and together they stay within the memory the first was allowed (_budget); the
    device figure takes the last arena's `device` slots."""

    def __init__(self, ctx, first, device: int):
        self.ctx, self.first, self.device_wanted = ctx, first, device
        self.budget = _budget(ctx)
        self.slot_bytes = _slot_size(ctx, first)
        self.made: list = []
        self.slots: Any = None  # the current arena (judge.Slots)
        self.timed: list[int] = []  # the current arena's timed slots no call was handed yet
        self.device: list[int] = []

    def grow(self, calls: int, least: int):
        """A new arena for up to `calls` timed calls and the device figure, at least `least` of them
        (NoRoom where not even those fit)."""
        capacity = _capacity(self.ctx, self.slot_bytes, 1 + calls + self.device_wanted, 1 + least, self.budget)
        fit, self.device = fresh_slots(capacity, calls, self.device_wanted, least)
        with PHASES.span("timing: arenas"):
            self.slots = self.ctx.new_slots(self.first, capacity)
        self.budget -= capacity * self.slot_bytes
        self.made.append(self.slots)
        self.timed = list(range(1, 1 + fit))

    def retire(self):
        for slots in self.made:
            self.ctx.retire(slots)
        self.made = []


def _stop(protocol, ctx, times: list, spent: float) -> bool:
    """The protocol's stopping rule after len(times) calls, `spent` seconds into the shape, at
    the precision kgit's figures need where the protocol asks for more (Protocol.precision)."""
    n = len(times)
    if not ctx.on_gpu:
        # The interpreter: .kgit.yaml's limits, since these figures rank nothing.
        return n >= max(1, ctx.settings.min_reps) and spent > ctx.settings.max_time_s
    if protocol.max_calls is not None and n >= protocol.max_calls:
        return True
    if n < protocol.min_calls or spent < protocol.min_total_s:
        return False
    if statistics.fmean(times) * n * 1e-6 > protocol.max_time_s or spent > protocol.max_total_s:
        return True
    target, least = protocol.precision(ctx.settings.target_rse, ctx.settings.min_reps, ctx.shapes)
    return target is not None and n >= least and timing.rse(times) < target


def _warmup_calls(protocol, ctx, first_shape: bool) -> tuple[int, float]:
    """(most untimed calls, least seconds of them) before this shape's timing."""
    if not ctx.on_gpu:
        return ctx.settings.warmup, 0.0
    if protocol.warmup == "first" and not first_shape:
        return 0, 0.0
    return protocol.warmup_calls, protocol.warmup_s


def _warm(protocol, ctx, slots, slot: int, data, first_shape: bool):
    """Untimed calls on one input, as the evaluator warms up (its timing rules on the calls' time)."""
    most, seconds = _warmup_calls(protocol, ctx, first_shape)
    spent, n = 0.0, 0
    while n < most and (n < 3 or spent < seconds):
        t0 = time.perf_counter()
        slots.fill(slot, data)
        slots.call(slot)
        spent += time.perf_counter() - t0
        n += 1


def _check(ctx, private, data, out) -> str | None:
    ok, message = checking.inputs_unchanged(private, data, ctx.task.output)
    if ok:
        ok, message = checking.compare(ctx.task, ctx.reference, private, out)
    return None if ok else message


def _first_check(ctx, slots, slot: int, first) -> str | None:
    """The evaluator's obligatory correctness call on the shape's first input, before timing."""
    slots.fill(slot, first)
    reply = slots.call(slot)
    out = slots.take(slot)
    if reply["output"]:
        return reply["output"]
    return _check(ctx, first, slots.data(slot), out)


def _finish(protocol, ctx, times, judge_times, host, call_us, out, empties) -> dict:
    stats = timing.stats(times)
    stats["clock"] = protocol.clock if ctx.on_gpu else "judge"
    stats["judge_call_us"] = statistics.fmean(judge_times)
    stats["host_call_us"] = statistics.fmean(host)
    stats["host_us"] = stats["host_call_us"] if ctx.on_gpu else None
    stats["judge_batch"] = timing.stats(judge_times)
    if ctx.on_gpu and (protocol.clock == "wall" or protocol.inputs == "batch"):
        # timing.settle bounds the runner's figure by the judge's clock over each call (or each
        # sample of a batch, by the call): it covers what the runner's clock covers (synchronize
        # to synchronize, or one pair of events over the batch) and little besides.
        stats["bound"] = "calls"
        # A fresh output is copied into the judge's buffer by the runner, inside the judge's clock.
        stats["copy_out_us"] = ctx.calibration.copy_us(out) if ctx.task.output is None else 0.0
    floor = timing.floor_verdict(call_us, empties, ctx.calibration.ping_us)
    if floor:
        stats.update(error=floor, refused=timing.FLOOR_REASON)
    return stats


def _raced(protocol, ctx, times, race: dict, rechecked: int) -> dict:
    return timing.raced_entry(times, protocol.clock if ctx.on_gpu else "judge", rechecked, race)


def _events_bound(protocol, ctx, shape, seed, first, out, stats) -> str | None:
    """On a GPU, for a protocol whose figure is device events: the judge's clock over back-to-back
    calls as the bound (timing.batch_bound), as kgit-adaptive has it. A single call's clock would
    hold the flush and the GPU hold that precede the events, which are not the kernel's."""
    if not ctx.on_gpu or protocol.clock != "events" or stats.get("error"):
        return None
    return timing.batch_bound(ctx.task, ctx.reference, shape, seed, first, out, ctx.new_slots, ctx.retire,
                              ctx.calibration, ctx.settings.target_rse, stats, ctx.torch)


def _device_time(ctx, slots, slots_free: list[int], make) -> float | None:
    """Median device time of a few flushed, event-timed calls (GPU only; informative), all on the
    values of one input made by `make`: the first output is checked, and so is each later one
    that is not the same as it bit for bit (the reference's check costs more than the call on
    the fp8 problem's shapes)."""
    if not ctx.on_gpu or not slots_free:
        return None
    private = make()
    figures, checked = [], None
    for slot in slots_free:
        timed = timing.timed_call(slots, slot, private, ctx.calibration, clock="events", flush=True)
        if timed.reply["output"]:
            return None
        if checked is not None and checking.same_output(ctx.torch, checked, timed.out):
            ok, _ = checking.inputs_unchanged(private, slots.data(slot), ctx.task.output)
            why = None if ok else "inputs changed"
        else:
            why, checked = _check(ctx, private, slots.data(slot), timed.out), timed.out
        if why:
            return None  # the figures would not be the kernel's: leave it out (its timed calls were right)
        figures.append(timed.reply["us"])
    return statistics.median(figures)


# -- the loops ------------------------------------------------------------------------------

def _fresh(protocol, ctx, shape, first_shape, race) -> dict:
    seed = _seeder(ctx, shape)
    first = checking.make_input(ctx.reference, shape, seed(0))
    wanted = protocol.max_calls or 100
    if not ctx.on_gpu:
        wanted = min(wanted, max(ctx.settings.min_reps, 3) * 4)
    device = DEVICE_CALLS if ctx.on_gpu else 0
    # Slot 0 serves the first check, the warm-up and the round trips; every timed call, and each
    # of the device figure's, gets a slot of its own that no call was handed before.
    least = min(protocol.min_calls, wanted)
    arenas = _FreshArenas(ctx, first, device)
    arenas.grow(min(wanted, FRESH_CHUNK), least)
    slots = arenas.slots
    try:
        with PHASES.span("timing: first check, warm-up, round trips"):
            error = _first_check(ctx, slots, 0, first)
            if error:
                return {"error": f"the first call: {error}", **timing.stats([0.0])}
            _warm(protocol, ctx, slots, 0, first, first_shape)
            round_trip = timing.round_trips(slots, ctx.calibration)
        # The runner's allocator holds free what the judge's does (timing.free_segments): given
        # with an empty request before the first call and after each of the first HOLD_SAMPLES
        # (while the judge's pattern settles), and with every timed call, whose runner takes
        # the blocks once its reply is sent (outside both clocks) for the call after it.
        hold = _hold(ctx)
        timing.empty_us(slots, 0, hold=hold)
        times: list[float] = []
        judge_times: list[float] = []
        host: list[float] = []
        call_us: list[float] = []
        empties: list[float] = []
        started = time.perf_counter()
        note = None
        for i in range(wanted):
            if not arenas.timed:
                try:
                    arenas.grow(min(wanted - i, FRESH_CHUNK), 1)
                except NoRoom:
                    note = f"{i} fresh calls fit in the memory a shape may take; the protocol allows {wanted}"
                    break
                slots = arenas.slots
            slot = arenas.timed.pop(0)
            with PHASES.span("timing: inputs"):
                private = checking.make_input(ctx.reference, shape, seed(1 + i))
            with PHASES.span("timing: calls"):
                timed = timing.timed_call(slots, slot, private, ctx.calibration, clock=protocol.clock,
                                          flush=protocol.flush, hold=hold)
            if timed.reply["output"]:
                return {"error": f"timed call {i}: {timed.reply['output']}", **timing.stats(times or [0.0])}
            with PHASES.span("timing: re-checks"):
                why = _check(ctx, private, slots.data(slot), timed.out)
            if why:
                return {"error": f"timed call {i} gave a wrong result: {why}", **timing.stats(times or [0.0])}
            judge_us = max(timed.call_us - round_trip, timed.call_us / 100)
            times.append(timed.reply["us"] if ctx.on_gpu else judge_us)
            judge_times.append(judge_us)
            host.append(timed.reply["host_us"])
            call_us.append(timed.call_us)
            del private
            if timing.empty_due(i):
                if i < HOLD_SAMPLES:  # the judge's own pattern settles after a call or two
                    hold = _hold(ctx)
                with PHASES.span("timing: empty requests"):
                    empties.append(timing.empty_us(slots, 0, hold=hold))
            if _stop(protocol, ctx, times, time.perf_counter() - started):
                break
            if raced := race(times):
                return _raced(protocol, ctx, times, raced, rechecked=len(times))
        stats = _finish(protocol, ctx, times, judge_times, host, call_us, timed.out, empties)
        stats["rechecked"] = len(times)
        error = _events_bound(protocol, ctx, shape, seed, first, timed.out, stats)
        if error:
            return {"error": error, **stats}
        if note:
            stats["note"] = note
        with PHASES.span("timing: device figure"):
            stats["device_us"] = _device_time(ctx, slots, arenas.device,
                                              lambda: checking.make_input(ctx.reference, shape, seed(10_000)))
        return stats
    finally:
        arenas.retire()


def _batch(protocol, ctx, shape, first_shape, race) -> dict:
    seed = _seeder(ctx, shape)
    first = checking.make_input(ctx.reference, shape, seed(0))
    count = _capacity(ctx, _slot_size(ctx, first), protocol.batch, 1)
    with PHASES.span("timing: inputs"):
        inputs = [first] + [checking.make_input(ctx.reference, shape, seed(j)) for j in range(1, count)]
    with PHASES.span("timing: arenas"):
        slots = ctx.new_slots(first, count)
    chosen = list(range(count))
    try:
        for j, private in enumerate(inputs):
            error = _first_check(ctx, slots, j, private)
            if error:
                return {"error": f"the first calls: {error}", **timing.stats([0.0])}
        _warm(protocol, ctx, slots, 0, first, first_shape)
        round_trip = timing.round_trips(slots, ctx.calibration)
        clock = time.perf_counter
        times: list[float] = []
        judge_times: list[float] = []
        host: list[float] = []
        call_us: list[float] = []
        empties: list[float] = []
        started = clock()
        outs = []
        while True:
            for j, private in zip(chosen, inputs):
                slots.fill(j, private)
            filled = clock()
            reply = slots.batch(chosen, timed=True)
            outs = [slots.take(j) for j in chosen]
            checking.sync(slots.torch)
            t2 = clock()
            slots.drain()
            if reply["output"]:
                return {"error": f"a timed batch: {reply['output']}", **timing.stats(times or [0.0])}
            with PHASES.span("timing: re-checks"):
                for j, private, out in zip(chosen, inputs, outs):
                    why = _check(ctx, private, slots.data(j), out)
                    if why:
                        return {"error": f"a timed batch gave a wrong result: {why}", **timing.stats(times or [0.0])}
            total = (t2 - filled) * 1e6  # the request's send to the outputs copied: the fill's left out
            judge_us = max(total - round_trip, total / 100) / count
            times.append(reply["span_us"] / count if ctx.on_gpu else judge_us)
            judge_times.append(judge_us)
            host.append(reply["host_us"] / count)
            call_us.append(total)
            empties.append(timing.empty_batch(slots, chosen))
            if _stop(protocol, ctx, times, clock() - started):
                break
            if raced := race(times):
                return _raced(protocol, ctx, times, raced, rechecked=len(times) * count)
        stats = _finish(protocol, ctx, times, judge_times, host, call_us, outs, empties)
        if "copy_out_us" in stats:
            stats["copy_out_us"] /= count  # the copies of every output of a sample, by the call
        stats["rechecked"] = len(times) * count
        stats["batch_calls"] = count
        stats["device_us"] = stats["mean_us"] if ctx.on_gpu else None
        return stats
    finally:
        ctx.retire(slots)


def _fixed(protocol, ctx, shape, first_shape, race) -> dict:
    seed = _seeder(ctx, shape)
    first = checking.make_input(ctx.reference, shape, seed(0))
    with PHASES.span("timing: arenas"):
        slots = ctx.new_slots(first, 1)
    try:
        error = _first_check(ctx, slots, 0, first)
        if error:
            return {"error": f"the first call: {error}", **timing.stats([0.0])}
        _warm(protocol, ctx, slots, 0, first, first_shape)
        round_trip = timing.round_trips(slots, ctx.calibration)
        kept = timing.Reservoir(timing.RECHECKED, random.Random(ctx.secret ^ int(shape.get("seed", 0))))
        times: list[float] = []
        judge_times: list[float] = []
        host: list[float] = []
        call_us: list[float] = []
        empties: list[float] = []
        started = time.perf_counter()
        last = None
        while True:
            # The same tuple every call (KernelBench's protocol); its output poisoned each time.
            timed = timing.timed_call(slots, 0, first, ctx.calibration, clock=protocol.clock, flush=protocol.flush)
            if timed.reply["output"]:
                return {"error": f"timed call {len(times)}: {timed.reply['output']}", **timing.stats(times or [0.0])}
            judge_us = max(timed.call_us - round_trip, timed.call_us / 100)
            times.append(timed.reply["us"] if ctx.on_gpu else judge_us)
            judge_times.append(judge_us)
            host.append(timed.reply["host_us"])
            call_us.append(timed.call_us)
            if timing.empty_due(len(times) - 1):
                empties.append(timing.empty_us(slots, 0))
            last = (len(times) - 1, timed.out)
            kept.offer(lambda: last)
            if _stop(protocol, ctx, times, time.perf_counter() - started):
                break
            if raced := race(times):
                # Stopped: its tests passed and it ranks nothing, so the sample is left unchecked.
                return _raced(protocol, ctx, times, raced, rechecked=0)
        checked = kept.items if any(k[0] == last[0] for k in kept.items) else kept.items + [last]
        with PHASES.span("timing: re-checks"):
            for rep, out in checked:
                why = _check(ctx, first, slots.data(0), out)
                if why:
                    return {"error": f"timed call {rep} gave a wrong result: {why}", **timing.stats(times)}
        stats = _finish(protocol, ctx, times, judge_times, host, call_us, last[1], empties)
        stats["rechecked"] = len(checked)
        error = _events_bound(protocol, ctx, shape, seed, first, last[1], stats)
        if error:
            return {"error": error, **stats}
        stats["device_us"] = _device_time(ctx, slots, [0] * DEVICE_CALLS, lambda: first)
        return stats
    finally:
        ctx.retire(slots)
