"""Timing: the runner's device events on a GPU, the judge's clock in the CPU interpreter.

`Clock` runs in the runner: it times one call between device events, after an L2 flush
and a GPU hold. `measure` runs in the judge: every repetition gets a freshly generated
input and a poisoned output, the judge copies every output before the next request,
and a random sample of the timed outputs plus the last one are re-checked against the
judge's private inputs after timing, so a kernel that is right once and wrong later
fails. On a GPU the runner's event figures rank a shape only while the judge's own clock
over back-to-back calls agrees with them; otherwise the judge's clock ranks it (`settle`).
See docs/harness.md.
"""

from __future__ import annotations

import math
import platform
import random
import statistics
import time
from dataclasses import dataclass

from kgit_harness import checking, racing, shared
from kgit_harness.phases import PHASES
from kgit_harness.spec import TimingSettings

# At least the largest last-level cache we target: 256 MB covers the MI300X
# Infinity Cache and is 4x the H100/H200 L2.
FLUSH_BYTES = 256 * 1024 * 1024
RECHECKED = 3
# Judge-clock cross-check: back-to-back calls, timed by the judge until it holds their
# outputs, must not take longer per call than ESCAPE_RATIO x the runner's event mean +
# the runner's output copy (fresh outputs only) + ESCAPE_SLACK_US for the events to rank
# a shape. 1.5x absorbs the variance of tiny kernels, the slack the final synchronize.
# Every term but the event mean is the judge's own measure, so nothing the runner
# reports widens the bound.
ESCAPE_RATIO = 1.5
ESCAPE_SLACK_US = 20.0
# Judge-measured figures the runner can still inflate (an empty request it answers
# slowly, a copy slowed by GPU work it left running) count at most this many times the
# same figure measured before the candidate was imported (Calibration).
CAP_RATIO = 1.5
# Samples of the back-to-back batch: its median is the judge's figure per call.
BATCH_SAMPLES_MIN, BATCH_SAMPLES_MAX = 3, 10
# Where every back-to-back sample is past what the runner's figures explain: rounds of
# BATCH_SAMPLES_MIN more samples, the k-th after k x CONTENDED_WAIT_S (see _judge_batch).
CONTENDED_ROUNDS, CONTENDED_WAIT_S = 4, 0.25
# A back-to-back sample: at least BATCH_TARGET_US of kernel time by the events, in
# BATCH_MIN to BATCH_MAX calls, within BATCH_BYTES of device memory (see batch_count).
BATCH_TARGET_US = 2000.0
BATCH_MIN = 4
BATCH_BYTES = 16 << 30
# Bounds of the GPU hold before each timed call (see Clock.hold_gpu).
HOLD_MIN_US, HOLD_MAX_US = 100.0, 20_000.0
BATCH_MAX = 64
# On the CPU below torch's parallel grain: a parallel copy in a judge forked from a process
# whose OpenMP pool already ran (the tests fork the judge) deadlocks in the fork.
CALIBRATION_BYTES = {True: 64 << 20, False: 64 << 10}  # on a GPU, on the CPU


@dataclass(frozen=True)
class Calibration:
    """What the judge measured before the candidate was imported (no candidate code had run).

    The caps on the judge-clock figures the runner could inflate later: an empty request's
    round trip and the judge's copy of the outputs; and the judge's own thread round trip,
    against which the host's load is measured later (load_factor).
    """

    ping_us: float
    copy_fixed_us: float
    copy_us_per_byte: float
    ping_min_us: float = 0.0
    host_us: float = 0.0  # the judge's own round trip between two of its threads (host_latency_us)

    def copy_us(self, data) -> float:
        """The judge's copy of `data` (a tensor or a tree of them), by its pre-candidate model."""
        found = shared.tensors(data)
        return len(found) * self.copy_fixed_us + sum(t.numel() * t.element_size() for t in found) * self.copy_us_per_byte


# For in-process tests of measure's logic, where no runner exists to calibrate against.
UNCAPPED = Calibration(math.inf, math.inf, 0.0)
# A shape whose calls take, by the judge's clock (median), less than this share of the empty
# round trip measured before the candidate arrived is refused: no work is that cheap.
FLOOR_RATIO = 0.5
FLOOR_REASON = "faster than an empty request"


def calibrate(ping, torch, on_gpu: bool, repeats: int = 5) -> Calibration:
    """Measure the caps: `ping()` sends the idle runner one request and waits for its answer."""
    clock = time.perf_counter
    device = "cuda" if on_gpu else "cpu"
    size = CALIBRATION_BYTES[on_gpu]
    small, big = torch.zeros(1, device=device), torch.zeros(size // 4, device=device)
    pings = []
    for _ in range(repeats):
        # The judge's own op last, as before every timed call (its fill): the runner's answer
        # then pays the GPU's switch to its context, as a call does.
        small.zero_()
        checking.sync(torch)
        t0 = clock()
        ping()
        pings.append((clock() - t0) * 1e6)

    def copy_us(t):
        times = []
        for _ in range(repeats):
            t0 = clock()
            t.clone()
            checking.sync(torch)
            times.append((clock() - t0) * 1e6)
        return min(times)

    fixed = copy_us(small)
    return Calibration(statistics.median(pings), fixed, max(copy_us(big) - fixed, 0.0) / size, min(pings),
                       host_latency_us())


class _Echo:
    """A thread of the judge's that answers each byte it reads with one: the judge's own round
    trip through the host's scheduler, which nothing the runner does can shorten or lengthen
    other than by loading the host it also runs on."""

    def __init__(self):
        import os
        import threading

        self.to_thread, self.from_judge = os.pipe()
        self.from_thread, self.to_judge = os.pipe()
        threading.Thread(target=self._serve, name="kgit-echo", daemon=True).start()

    def _serve(self):
        import os

        while os.read(self.to_thread, 1):
            os.write(self.to_judge, b".")

    def round_trip_us(self) -> float:
        import os

        t0 = time.perf_counter()
        os.write(self.from_judge, b".")
        os.read(self.from_thread, 1)
        return (time.perf_counter() - t0) * 1e6


_echo: list = []


def host_latency_us(repeats: int = 5) -> float:
    """The judge's own round trip now (median): how loaded the host is, measured without the runner."""
    if not _echo:
        _echo.append(_Echo())
    return statistics.median(_echo[0].round_trip_us() for _ in range(repeats))


def load_factor(calibration: Calibration) -> float:
    """How much slower the host answers now than when the calibration was taken (1 when not)."""
    if calibration.host_us <= 0:
        return 1.0
    return max(1.0, host_latency_us() / calibration.host_us)


@dataclass
class Timed:
    """One call as the judge's clock saw it (see `timed_call`)."""

    reply: dict
    out: object  # the judge's private copy of the output
    fill_us: float  # the fill's time, as measured, subtracted from the call's
    call_us: float  # the rest: request sent to output copied


def timed_call(slots, slot: int, private, calibration: Calibration, **request) -> Timed:
    """Fill `slot` with `private`, call it, take the output: the judge's clock around all three.

    The clock starts before the first byte of the input is where the runner can see it, so
    no work on the inputs can happen before it. The fill (the judge's own work, done while
    the runner waits for a request with its device synchronized) is subtracted as
    measured. The runner's own checks of the call arrive after this, outside the clock
    (`drain`).
    """
    clock = time.perf_counter
    t0 = clock()
    slots.fill(slot, private)
    t1 = clock()
    reply = slots.call(slot, **request)
    out = slots.take(slot)
    t2 = clock()
    slots.drain()
    fill = (t1 - t0) * 1e6
    return Timed(reply, out, fill, (t2 - t0) * 1e6 - fill)


# An empty request (empty_us) follows the first EMPTY_FIRST calls of a shape and then every
# EMPTY_EVERY-th. The floor verdict takes the fastest of them (and the calibrated round trip),
# which needs a few, not one per call: on the H200 one was 0.75 ms, an eighth of a re-checked
# fp8 call's cost to the evaluation.
EMPTY_FIRST = 3
EMPTY_EVERY = 8


def empty_due(i: int) -> bool:
    """Whether the shape's call `i` (from 0) is followed by an empty request."""
    return i < EMPTY_FIRST or (i + 1) % EMPTY_EVERY == 0


def empty_us(slots, slot: int = 0, hold: list[int] | None = None) -> float:
    """One request with no call in it, answered and its output copied, by the judge's clock (us).
    `hold`: the runner also takes and gives back blocks of these sizes (free_segments)."""
    clock = time.perf_counter
    t0 = clock()
    slots.call(slot, empty=True, hold=hold)
    slots.take(slot)
    checking.sync(slots.torch)
    t1 = clock()
    slots.drain()
    return (t1 - t0) * 1e6


def floor_verdict(call_us: list[float], empties: list[float], ping_us: float) -> str | None:
    """Why a shape's calls are refused as cheaper than a request with no call in it, or None.

    The measure is the smaller of two round trips of an empty request: `ping_us`, calibrated
    before the candidate was imported, and the fastest of those made right after a call (empty_due)
    or sample during the timing. A call that took less than half of both was answered before it
    was asked for. Either alone would refuse honest kernels: a calibration taken on a busy host
    is slower than calls made after the host quietened, and on a busy host an empty request
    that follows a call which held a core for milliseconds waits longer for one than the call
    did (seen with every core busy)."""
    if len(call_us) < 3 or not empties:
        return None
    median, empty = statistics.median(call_us), min(min(empties), ping_us)
    if median < FLOOR_RATIO * empty:
        return (f"calls took {median:.1f} us by the judge's clock (median, from the request to the output copied), "
                f"less than {FLOOR_RATIO:g} x a request with no call in it ({empty:.1f} us, the faster of the "
                "round trip calibrated before the candidate and the fastest made right after a call): the work "
                "was done before the judge asked for it")
    return None


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
            self.own = torch.zeros(1, dtype=torch.int32, device="cuda")
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

    def time_call(self, call, region, clock: str = "events", flush: bool = True):
        """(output, the call's microseconds by `clock`, host microseconds spent inside the call).

        `region` (the runtime guards) is entered before the clock starts and left after it
        stops, so only the call itself lies between the two. On a GPU, `clock`:
        - events: device events around the call; with `flush`, after an L2 flush and a GPU
          hold (see hold_gpu), else on an idle GPU, launch latency included;
        - wall: the host's clock from a synchronized GPU to the synchronize after the call,
          as GPU MODE's AMD leaderboard times a submission.
        In the CPU interpreter every clock is the host's, around the call.
        """
        if not self.on_gpu:
            with region:
                t0 = self.perf_counter()
                out = call()
                t1 = self.perf_counter()
            return out, (t1 - t0) * 1e6, (t1 - t0) * 1e6
        if clock == "wall":
            # The GPU's last work was the judge's (its fill of the inputs), in another process's
            # context: without a launch of the runner's own first, the switch back (~150 us on
            # the H200, benchmarks/process_state.py) falls inside the clock, where GPU MODE's
            # evaluator, which makes its inputs in the timing process, has none.
            self.own.zero_()
            with region:
                self.synchronize()
                t0 = self.perf_counter()
                out = call()
                h1 = self.perf_counter()
                self.synchronize()
                t1 = self.perf_counter()
            return out, (t1 - t0) * 1e6, (h1 - t0) * 1e6
        self.synchronize()
        entered = self.perf_counter()
        if flush:
            # The flush runs ahead of the start event with no synchronize in between, as in
            # triton.testing.do_bench: the host launches the call while the flush still runs,
            # so launch latency is not counted when the GPU is the bottleneck.
            self.flush.zero_()
            self.hold_gpu()
        with region:
            self.start.record()
            h0 = self.perf_counter()
            out = call()
            h1 = self.perf_counter()
            self.end.record()
        self.synchronize()
        self.host_us = (h1 - entered) * 1e6
        return out, self.start.elapsed_time(self.end) * 1e3, (h1 - h0) * 1e6


def measure(task, reference, shape, secret, settings: TimingSettings, on_gpu, torch, new_slots,
            calibration: Calibration, race=None) -> dict:
    """Time one shape through the runner (judge side); the statistics, plus `error` if a check failed.

    `new_slots(sample, count)` gives the shape's shared arena (judge.Slots). Each
    repetition gets a freshly generated input and a poisoned output; the judge copies
    every output before it looks at the next, so which repetitions are re-checked is
    decided privately and the runner cannot tell. `calibration` caps what the runner
    could inflate in the judge's own figures. `race`, asked with the event times after each
    call, may end the shape with a racing verdict (the entry then carries it as `raced`, and
    has no back-to-back figure).
    """
    warmup, min_reps = settings.warmup, settings.min_reps
    target_rse, max_time = settings.target_rse, settings.max_time_s
    base_seed = int(shape.get("seed", 0))

    def seed(i):
        return checking.mix_seed(base_seed, secret, i)

    first = checking.make_input(reference, shape, seed(0))
    with PHASES.span("timing: arenas"):
        slots = new_slots(first, 1)
    try:
        with PHASES.span("timing: flushed event calls"):
            stats = _measure(task, reference, slots, shape, seed, first, on_gpu, calibration,
                             warmup, min_reps, target_rse, max_time, secret ^ (base_seed << 1),
                             race or racing.never)
        if not on_gpu or "error" in stats or "raced" in stats:
            return stats
        # The back-to-back batch gets its own arena, sized once the events say how long a
        # call takes (a forger's tiny figure only buys it a longer batch).
        batch = batch_count(stats["mean_us"], _slot_bytes(first, slots.take(0)), _free_bytes(torch))
        with PHASES.span("timing: arenas"):
            batch_slots = new_slots(first, batch)
    finally:
        slots.close()
    try:
        clock = time.perf_counter
        with PHASES.span("timing: back-to-back batches"):
            error = _judge_batch(task, reference, batch_slots, shape, seed, batch, clock, calibration, target_rse, stats)
    finally:
        batch_slots.close()
    if error:
        return {"error": error, **stats}
    return stats


def batch_bound(task, reference, shape, seed, first, out, new_slots, retire, calibration, target_rse, stats,
                torch) -> str | None:
    """The judge's clock over back-to-back calls into `stats` (host_batch_us, judge_batch: the bound
    `settle` holds the runner's event figure to), on an arena of its own, handed to `retire` after;
    or why an output was wrong."""
    batch = batch_count(stats["mean_us"], _slot_bytes(first, out), _free_bytes(torch))
    with PHASES.span("timing: arenas"):
        batch_slots = new_slots(first, batch)
    try:
        with PHASES.span("timing: back-to-back batches"):
            return _judge_batch(task, reference, batch_slots, shape, seed, batch, time.perf_counter, calibration,
                                target_rse, stats)
    finally:
        retire(batch_slots)


def _measure(task, reference, slots, shape, seed, first, on_gpu, calibration,
             warmup, min_reps, target_rse, max_time, rng_seed, race) -> dict:
    clock = time.perf_counter
    for i in range(warmup):
        slots.fill(0, checking.make_input(reference, shape, seed(1000 + i)))
        slots.call(0)
    round_trip = round_trips(slots, calibration)

    kept = Reservoir(RECHECKED, random.Random(rng_seed))
    times: list[float] = []
    judge_times: list[float] = []
    host_call: list[float] = []
    call_us: list[float] = []
    empties: list[float] = []
    spent_start = clock()
    i = 0
    while True:
        with PHASES.span("timing: inputs"):
            private = first if i == 0 else checking.make_input(reference, shape, seed(i))
        timed = timed_call(slots, 0, private, calibration, clock="events")
        reply, out = timed.reply, timed.out
        call_us.append(timed.call_us)
        if empty_due(i):
            empties.append(empty_us(slots, 0))
        # A call cheaper than the round trip's noise (a torch kernel on a tiny CPU shape, on
        # a loaded host) would go to zero or below: a hundredth of the raw figure is the floor.
        judge_us = max(timed.call_us - round_trip, timed.call_us / 100)
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
        if raced := race(times):
            # Stopped: its tests passed and it ranks nothing, so the sample is left unchecked.
            return raced_entry(times, "events" if on_gpu else "judge", 0, raced)
    checked = kept.items
    if all(k[0] != last[0] for k in checked):
        checked.append(last)  # a kernel that decays over time is caught by its last call

    floor = floor_verdict(call_us, empties, calibration.ping_us)
    if floor:
        return {"error": floor, "refused": FLOOR_REASON, **_stats(times)}
    stats = _stats(times)
    stats["clock"] = "events" if on_gpu else "judge"
    stats["judge_call_us"] = statistics.fmean(judge_times)
    stats["host_call_us"] = statistics.fmean(host_call)
    stats["rechecked"] = len(checked)
    with PHASES.span("timing: re-checks"):
        for rep, out, private in checked:
            ok, message = checking.compare(task, reference, private, out)
            if not ok:
                return {"error": f"timed repetition {rep} gave a wrong result: {message}", **stats}
    if on_gpu:
        # The flushed, event-timed calls, kept under their own names whichever clock ranks the shape.
        stats.update({f"events_{k}": v for k, v in _stats(times).items()})
    return stats


def round_trips(slots, calibration: Calibration, repeats: int = 5) -> float:
    """What the judge subtracts from a call as its round trip.

    The cost of one request with no kernel call: sent, answered, output copied. The
    request's part is the runner's to answer, so it counts at most as the pre-candidate
    pings do (a runner answering empty requests slowly would otherwise shrink the judge's
    figure); the copy is the judge's own work, measured.
    """
    clock = time.perf_counter
    requests, copies = [], []
    for _ in range(repeats):
        t0 = clock()
        slots.call(0, empty=True)
        t1 = clock()
        slots.take(0)  # the copy of the output, timed with the sync below
        checking.sync(slots.torch)
        t2 = clock()
        slots.drain()
        requests.append((t1 - t0) * 1e6)
        copies.append((t2 - t1) * 1e6)
    request, copy = statistics.median(requests), statistics.median(copies)
    # A busy host (other evaluations beside this one) slows every round trip now: the cap grows
    # with the judge's own measure of that, never with anything the runner answers.
    request_cap = CAP_RATIO * calibration.ping_us * load_factor(calibration)
    return min(request, request_cap) + copy


def empty_batch(slots, chosen) -> float:
    """An empty back-to-back request over the same slots, its outputs copied: the judge's clock (us)."""
    clock = time.perf_counter
    t0 = clock()
    slots.batch(chosen, empty=True)
    for j in chosen:
        slots.take(j)
    checking.sync(slots.torch)
    t1 = clock()
    slots.drain()
    return (t1 - t0) * 1e6


def _judge_batch(task, reference, slots, shape, seed, batch, clock, calibration, target_rse, stats) -> str | None:
    """The judge's clock over back-to-back calls, per call, into `stats`; or why an output was wrong.

    Each sample is timed from the judge's request until it holds its copy of every output,
    minus the same round trip with no calls made, so work that escaped the runner's events
    (a side stream, a forged figure, work after a premature `done`) shows up here. Every
    sample gets fresh inputs and every output is checked, so no sample can be answered
    from memory of an earlier one.
    """
    chosen = list(range(batch))
    stats["batch_calls"] = batch
    requests, copies = [], []
    for _ in range(3):
        t0 = clock()
        slots.batch(chosen, empty=True)
        t1 = clock()
        outs = [slots.take(j) for j in chosen]
        checking.sync(slots.torch)
        t2 = clock()
        slots.drain()
        requests.append((t1 - t0) * 1e6)
        copies.append((t2 - t1) * 1e6)
    request = min(statistics.median(requests), CAP_RATIO * calibration.ping_us * load_factor(calibration))
    # The judge's own copy of the outputs: the runner's copy-out of each output into its
    # shared slot moves the same bytes on the device, after the calls, outside the events.
    copy = min(statistics.median(copies), CAP_RATIO * sum(calibration.copy_us(o) for o in outs))
    stats["copy_us"] = copy / len(chosen)
    # The bound allows for the runner's copy-out only where the problem wants a fresh
    # output: an in-place one (`output: N`) is written into the judge's buffer itself, and
    # allowing its size anyway let a side-stream cheat's 256 MB vector_add pass as launch-bound.
    stats["copy_out_us"] = stats["copy_us"] if task.output is None else 0.0
    samples, runner_host = [], []
    diagnostics: dict[str, list] = {"launch_us": [], "span_us": [], "served_us": []}
    spans = []  # per sample, by the call: the request to the outputs copied (the floor's figure)
    batch_empties = []  # an empty batch request after each sample (the floor's measure)

    def sample(r: int) -> str | None:
        """One back-to-back sample into the lists above; why an output was wrong, or None."""
        with PHASES.span("timing: batch inputs"):
            inputs = [checking.make_input(reference, shape, seed(2000 + r * BATCH_MAX + j)) for j in chosen]
        for j, private in zip(chosen, inputs):
            slots.fill(j, private)
        t_filled = clock()
        reply = slots.batch(chosen)
        outs = [slots.take(j) for j in chosen]
        checking.sync(slots.torch)
        t2 = clock()
        slots.drain()
        batch_empties.append(empty_batch(slots, chosen))
        total = (t2 - t_filled) * 1e6
        spans.append(total / len(chosen))
        samples.append(max(total - request - copy, 0.0) / len(chosen))
        runner_host.append(reply["host_us"] / len(chosen))
        for key, values in diagnostics.items():
            if reply.get(key) is not None:
                values.append(reply[key] / len(chosen))
        if reply["output"]:
            return f"a back-to-back call: {reply['output']}"
        with PHASES.span("timing: batch checks"):
            for j, private, out in zip(chosen, inputs, outs):
                ok, message = checking.inputs_unchanged(private, slots.data(j), task.output)
                if ok:
                    ok, message = checking.compare(task, reference, private, out)
                if not ok:
                    return f"a back-to-back call gave a wrong result: {message}"
        return None

    for r in range(BATCH_SAMPLES_MAX):
        why = sample(r)
        if why:
            return why
        # Where the events will rank, the batch is a bound check and three samples do;
        # where the judge's clock will, it is the figure and gets the timing's precision.
        if len(samples) >= BATCH_SAMPLES_MIN and (statistics.median(samples) <= events_bound(stats)
                                                  or _rse(samples) < target_rse):
            break
    # Other evaluations on the GPU take time slices inside a sample, which the calls' own
    # events, taken at other moments, did not see: an honest kernel's every sample can then
    # sit past the bound (five evaluations on one H200: vector_add's 170 us calls read 323 us
    # by the judge's clock). Where the fastest sample is past what the runner's figures can
    # explain, the judge waits and samples again, a few times: contention comes and goes, a
    # forged figure stays past the bound in every sample.
    for round_ in range(1, CONTENDED_ROUNDS + 1):
        if min(samples) <= disagreement_bound(stats, statistics.median(runner_host)):
            break
        time.sleep(CONTENDED_WAIT_S * round_)
        for r in range(BATCH_SAMPLES_MIN):
            why = sample(BATCH_SAMPLES_MAX * round_ + r)
            if why:
                return why
    floor = floor_verdict([(span * len(chosen)) for span in spans], batch_empties, calibration.ping_us)
    if floor:
        stats["refused"] = FLOOR_REASON
        return f"back-to-back {floor}"
    stats["judge_batch"] = _stats(samples)
    stats["host_batch_us"] = statistics.median(samples)
    stats["runner_batch_host_us"] = statistics.median(runner_host)
    # Runner-reported, per call: launches alone, device span (first launch to last
    # copy-out), request served. They explain the judge's figure; they never set it.
    stats.update({f"runner_batch_{key}": statistics.median(values) for key, values in diagnostics.items() if values})
    return None


class Reservoir:
    """A uniform sample of k repetitions out of a count not known in advance.

    Decided after each call, from a generator the candidate never sees, so every
    repetition is equally likely to be re-checked and nothing tells a call it will be.
    """

    def __init__(self, k: int, rng: random.Random):
        self.k, self.rng, self.seen = k, rng, 0
        self.items: list = []

    def offer(self, make):
        """Consider the next repetition; `make()` builds what to keep, only if it is kept."""
        self.seen += 1
        slot = len(self.items) if len(self.items) < self.k else self.rng.randrange(self.seen)
        if slot < len(self.items):
            self.items[slot] = make()
        elif slot < self.k:
            self.items.append(make())


DISAGREE_REASON = "timings disagree with the judge's clock"
JUDGE_CLOCK_NOTE = ("ranked by the judge's clock over back-to-back calls ({batch:.1f} us a call, launch included): "
                    "the runner's events said {events:.1f} us, more than {ratio:g}x off the judge's clock; a "
                    "launch-bound shape (the host launches slower than the GPU runs the kernel)")


def disagreement_bound(stats: dict, runner_batch_host_us: float | None) -> float:
    """The most the judge's clock may say a call took before the runner's figures are rejected
    (settle): what its events and its host figures together can account for."""
    host = max(stats.get("host_call_us") or 0.0, runner_batch_host_us or 0.0)
    return ESCAPE_RATIO * max(stats["mean_us"], host) + (stats.get("copy_out_us") or 0.0) + ESCAPE_SLACK_US


def events_bound(stats: dict) -> float:
    """The most the judge's clock may say a back-to-back call took for the events to rank: its own figures."""
    return ESCAPE_RATIO * stats["mean_us"] + (stats.get("copy_out_us") or 0.0) + ESCAPE_SLACK_US


def settle(stats: dict) -> str | None:
    """Which clock ranks the shape (into `stats`); why the runner's figures are rejected, or None.

    The events rank the shape while back-to-back calls, by the judge's clock, take at most
    ESCAPE_RATIO x the event mean + the judge's output copy + ESCAPE_SLACK_US a call: a
    bound of the judge's own figures, which nothing the runner reports can widen. The
    judge's fastest sample is what is held to the bound: a host busy with other work only
    ever slows the judge's clock, and a forged figure leaves every sample too slow. Beyond
    it the judge's clock ranks the shape (`clock: judge`): it includes the launch, which a
    launch-bound honest kernel cannot hide, and a forged event figure gains nothing there.
    Rejected only when even the runner's own host figures cannot account for the judge's
    clock: the runner says it was neither launching nor waiting on the GPU for that long,
    so work ran where its events did not look (a side stream, after the call returned) or
    its figures were forged. Those host figures decide only the label, never the figure.
    """
    # The judge's figure a call: over back-to-back calls (kgit-adaptive), or over each timed
    # call itself (the protocols that follow other evaluators, harness/upstream_timing.py).
    batch = stats.get("judge_call_us") if stats.get("bound") == "calls" else stats.get("host_batch_us")
    if batch is None:
        return None  # the CPU interpreter: the judge's clock is the figure already
    batch = min(batch, (stats.get("judge_batch") or {}).get("min_us", batch))
    events, copy = stats["mean_us"], stats.get("copy_out_us") or 0.0
    if batch <= events_bound(stats):
        # The runner's figure ranks: its events, or for a protocol with a clock of its own that clock.
        stats["clock"] = stats.get("clock") if stats.get("bound") == "calls" else "events"
        return None
    explained = disagreement_bound(stats, stats.get("runner_batch_host_us"))
    host = max(stats.get("host_call_us") or 0.0, stats.get("runner_batch_host_us") or 0.0)
    if batch > explained:
        which = "timed calls" if stats.get("bound") == "calls" else "back-to-back calls"
        return (f"{which} took {batch:.1f} us each by the judge's clock (its fastest sample), but the runner's timing "
                f"events measured {events:.1f} us and its host {host:.1f} us a call (the bound is "
                f"{ESCAPE_RATIO:g} x the larger + the runner's output copy, {copy:.1f} us by the judge's clock, + "
                f"{ESCAPE_SLACK_US:g} us): work ran outside the timed stream, "
                "after the call returned, or the figures were forged")
    judged = stats.get("judge_batch") or {"mean_us": batch, "median_us": batch, "min_us": batch,
                                           "std_us": 0.0, "n": 1}
    stats.update(judged, clock="judge",
                 note=JUDGE_CLOCK_NOTE.format(batch=batch, events=events, ratio=ESCAPE_RATIO))
    return None


def batch_count(event_us: float, slot_bytes: int, free_bytes: int | None) -> int:
    """Calls in one back-to-back sample: enough for BATCH_TARGET_US of kernel time, within memory.

    What a batch costs besides its calls (the first launch, the final synchronize and
    guard checks, the request and reply) is paid once per sample: about 0.3-0.9 ms on an
    H200 host, so at 10 calls it added 30-90 us to each call of a 40-100 us kernel, more
    than the bound allows. Memory: BATCH_BYTES, at most a quarter of what the GPU has free;
    a slot too big for two within it gets one call (KernelBench's level-1 ReLU, 19 GB a slot,
    ran the H200 out of memory with the two it was given beside other evaluations): a call
    that moves gigabytes runs for milliseconds, which hide the fixed cost of its sample.
    """
    wanted = math.ceil(BATCH_TARGET_US / max(event_us, 1.0))
    budget = BATCH_BYTES if free_bytes is None else min(BATCH_BYTES, free_bytes // 4)
    return max(1, min(BATCH_MAX, max(BATCH_MIN, wanted), budget // max(slot_bytes, 1)))


def _slot_bytes(sample, output) -> int:
    """One batch slot's memory: its input, its output buffer, and the fresh output the kernel returns.

    Counted for every problem, an output that is part of the input (`output: 2`) too: a
    kernel may still return a fresh tensor, which the runner then copies in.
    """
    size = sum(t.numel() * t.element_size() for t in shared.tensors(sample))
    return size + 2 * sum(t.numel() * t.element_size() for t in shared.tensors(output))


def free_segments(torch, budget: int) -> list[int]:
    """Sizes of the segments the judge's caching allocator holds with nothing in them, largest
    first, at most `budget` bytes of them ([] in the CPU interpreter).

    The judge makes each call's inputs and checks its output in its own process, as GPU MODE's
    evaluators do in theirs, so these are the blocks such an evaluator's allocator holds free
    when a call starts: the last inputs, the check's temporaries. A kernel that empties the
    cache (`torch.cuda.graph` does, on every capture) pays a cudaFree for each of them there;
    the runner, whose inputs live in the judge's arena, would hold almost none. Measured on the
    H200 (benchmarks/process_state.py): the campaign's experiment 47, which captures a graph on
    every new input, took 0.4-1.0 ms a call in a bare runner, 2.0-4.1 ms with the judge's free
    segments held, and 2.5-4.6 ms in upstream's loop. The judge's whole cache is sampled, not only
    what one call left in it: with the cache emptied before each sample (as a capture per call
    empties upstream's) experiment 47's geomean fell to 0.66x upstream's, from 0.78-0.88x."""
    if not torch.cuda.is_available():
        return []
    sizes = sorted((seg["total_size"] for seg in torch.cuda.memory_snapshot() if seg["allocated_size"] == 0),
                   reverse=True)
    kept, total = [], 0
    for size in sizes:
        if total + size <= budget:
            kept.append(int(size))
            total += size
    return kept


def free_bytes(torch) -> int | None:
    """The GPU's free memory, or None in the CPU interpreter."""
    return _free_bytes(torch)


def _free_bytes(torch) -> int | None:
    if not torch.cuda.is_available():
        return None  # the in-process tests of the GPU path run on the CPU
    return int(torch.cuda.mem_get_info()[0])


def _rse(times) -> float:
    if len(times) < 2:
        return math.inf
    mean = statistics.fmean(times)
    return statistics.stdev(times) / math.sqrt(len(times)) / mean if mean > 0 else math.inf


def raced_entry(times, clock: str, rechecked: int, race: dict) -> dict:
    """The entry of a shape that racing stopped partway (racing.decide_within): the calls timed so
    far, and the verdict under `raced` for the judge. No bound, device figure or note: a stopped
    attempt ranks nothing."""
    return {**_stats(times), "clock": clock, "rechecked": rechecked, "raced": race}


def stats(times) -> dict:
    """mean, median, min, std and n of a list of microseconds."""
    return _stats(times)


def rse(times) -> float:
    """The relative standard error of the mean."""
    return _rse(times)


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
