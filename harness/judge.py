"""The judge: the trusted side of an evaluation, which decides the result.

Run as `python -I -B -m kgit_harness judge --spec SPEC --result-fd FD`, or, started ahead
of its candidate, `... judge --start START --go-fd GO --result-fd FD`: it starts the runner,
imports torch and triton and makes the device context, then waits for the evaluation on
GO (docs/evaluators.md, "Warm evaluators"). It never imports,
executes or unpickles anything the candidate wrote: it reads the editable files only as
text (the static policy), loads the problem and its reference, generates every input
(published and secret seeds) into private memory, and starts the runner
(harness/runner.py) as its child, under the sandbox prefix kgit chose. Inputs reach the
runner through shared memory (shared.py) and requests through the channel
(channel.py); outputs come back the same way and are copied into private memory before
they are compared, by the judge's own torch, reference and checker. The judge keeps the
authoritative clock and alone writes the result document to kgit.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import NoReturn

from kgit_harness import (
    channel,
    checking,
    confine,
    factcache,
    kernelsplit,
    needs,
    peaks,
    phases,
    pidone,
    policy,
    portable,
    problem,
    protocols,
    racing,
    reported,
    shared,
    timing,
    upstream_timing,
)
from kgit_harness import result as result_mod
from kgit_harness.spec import Spec, StartSpec

_clock = time.perf_counter
PHASES = phases.PHASES
# Room the judge keeps under kgit's own timeout to write its own verdict.
DEADLINE_MARGIN_S = 5.0
# Statuses a runner may report for itself; anything else it sends is a protocol breach.
RUNNER_STATUSES = ("compile-error", "runtime-error")
# Requests after whose `done` the runner sends its own checks of the candidate's call.
CHECKED_OPS = ("call", "batch", "kernels")


class Verdict(Exception):
    """Ends an evaluation early with a status."""

    def __init__(self, status, error, reason=None):
        super().__init__(error)
        self.status, self.error, self.reason = status, error, reason


def _excerpt(exc: BaseException, limit: int = 4000) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-limit:]


class Runner:
    """The runner process and the judge's end of its channel."""

    def __init__(self, spec: StartSpec):
        # The deadline and the limit are set when the candidate arrives (`begin`): a runner
        # started ahead of need waits for it without a clock running.
        self.deadline: float | None = None
        self.timeout_s: float | None = None
        self.timed_out = self.ready = False
        self.violated: Verdict | None = None
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        life_r, self._life_w = os.pipe()
        argv = [sys.executable, "-I", "-B", "-m", "kgit_harness", "runner",
                "--channel-fd", str(theirs.fileno()), "--lifeline-fd", str(life_r)]
        prefix = list(spec.runner_prefix)
        # With namespaces a trusted init is PID 1 of the runner's: it ends the whole
        # namespace once this judge's end of the lifeline closes, whatever the runner does.
        use_init = spec.sandbox.get("trusted_init") and prefix
        cmd = pidone.command(prefix, argv, life_r) if use_init else [*prefix, *argv]
        self.wrapped = bool(prefix)
        env = dict(os.environ)
        env.update(spec.runner_env)
        try:
            self.proc = subprocess.Popen(cmd, cwd=spec.runner_cwd, env=env,
                                         stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(), life_r))
        finally:
            theirs.close()
            os.close(life_r)
        self.sock = mine

    def begin(self, deadline: float, timeout_s: float):
        self.deadline, self.timeout_s = deadline, timeout_s

    def send(self, message: dict, fds=()):
        """Send a request under a new id no runner can guess: every message about it must carry it."""
        if self.violated is not None:
            # After a guard tripped the runner is the candidate's: it is asked nothing more.
            raise self.violated
        self.drain()
        self.rid = secrets.randbits(62)
        self.checks_due = message.get("op") in CHECKED_OPS
        try:
            channel.send(self.sock, {**message, "rid": self.rid}, fds)
        except OSError:
            raise self._gone() from None

    def receive(self) -> dict:
        try:
            message, _ = channel.recv(self.sock, self.deadline)
        except channel.Timeout:
            self.timed_out = True
            raise Verdict("timeout", f"no result within {self.timeout_s:g} s (evaluator.timeout_s): the runner did "
                          "not answer before the judge's deadline and was killed") from None
        except channel.Closed:
            raise self._gone() from None
        except channel.ChannelError as e:
            raise Verdict("rejected", f"the runner sent {e}", reason="broken channel protocol") from None
        if message.get("rid") != getattr(self, "rid", None):
            raise Verdict("rejected", f"the runner sent a {message['op']!r} message that answers no request the "
                          "judge made (a reply sent ahead of its request, or one request answered twice)",
                          reason="broken channel protocol")
        return message

    def ask(self, message: dict, fds=()) -> dict:
        """Send a request; the runner's `done` reply, or its failure as a Verdict."""
        self.send(message, fds)
        return self.answer()

    def drain(self):
        """Read the runner's own checks of the last call (sent after its reply, outside any
        clock): `checked`, or the violation they found as a Verdict."""
        if not getattr(self, "check_pending", False):
            return
        self.check_pending = False
        message = self.receive()
        if message["op"] != "checked":
            self._failure(message)

    def answer(self) -> dict:
        reply = self.receive()
        op = reply["op"]
        if op == "done":
            self.check_pending = self.checks_due
            return reply
        self._failure(reply)

    def _failure(self, reply: dict) -> NoReturn:
        op = reply["op"]
        if op == "error" and reply.get("status") in RUNNER_STATUSES:
            raise Verdict(reply["status"], channel.text(reply, "error"))
        if op == "violation":
            self.violated = Verdict("rejected", channel.text(reply, "detail"), reason=channel.text(reply, "rule", 200))
            raise self.violated
        raise Verdict("rejected", f"the runner sent a {op!r} message where a reply was due",
                      reason="broken channel protocol")

    def _gone(self) -> Verdict:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        # Under the trusted init (and unshare) a runner killed by a signal shows as the
        # shell's 128 + signal, not as Popen's negative code.
        if code is not None and self.wrapped and code > 128 and code - 128 in _SIGNALS:
            code = -(code - 128)
        if code is not None and code < 0:
            why = f"killed by signal {signal.Signals(-code).name}" if -code in _SIGNALS else f"signal {-code}"
        else:
            why = f"exit code {code}"
        return Verdict("crash", f"the runner process died without answering ({why}).")

    def close(self):
        # A runner that never said ready (the candidate was refused before it was needed)
        # may still be importing torch: killed at once rather than waited for.
        if not self.timed_out and self.ready and self._said_bye():
            # Its output is in the pipes and it ends now by itself; the end of a process with a
            # device context takes its time, and is not waited for.
            if self.proc.poll() is None:
                self.proc.kill()
        elif self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()
        os.close(self._life_w)

    def _said_bye(self) -> bool:
        """Ask the runner to end; whether it answered within 2 s that its output is flushed and let go."""
        deadline = time.monotonic() + BYE_WAIT_S
        try:
            channel.send(self.sock, {"op": "bye", "rid": None})
            while True:  # what it sent before (a late violation, a check) no longer matters
                message, _ = channel.recv(self.sock, deadline)
                if message.get("op") == "bye":
                    PHASES.mark("runner said bye")
                    return True
        except (OSError, channel.ChannelError):
            return False


_SIGNALS = {s.value for s in signal.Signals}
# How long a runner told to end has to say it did (Runner.close).
BYE_WAIT_S = 2.0


class Slots:
    """One shape's shared arena: `count` slots of input (and output buffer), mapped by the runner."""

    _ids = iter(range(1 << 30))

    def __init__(self, torch, runner: Runner, task, reference, sample, count: int, on_gpu: bool, like=None):
        self.torch, self.runner, self.task, self.on_gpu = torch, runner, task, on_gpu
        self.id = next(self._ids)
        self.sample = sample
        self.casts: dict = {}  # slot -> the dtypes its outputs were returned in, where narrower
        planner = shared.Planner()
        if like is None:
            like = output_like(torch, task, reference, sample)
        layouts = [{"input": planner.tree(sample), "output": planner.tree(like) if like is not None else None}
                   for _ in range(count)]
        try:
            self.arena = shared.new_arena(torch, planner.size, on_gpu)
        except torch.OutOfMemoryError:
            # Other evaluations on this GPU hold the memory: the machine's state, not the kernel's verdict.
            free = timing.free_bytes(torch) or 0
            need = f"{planner.size / (1 << 30):.1f} GiB"
            raise Verdict("unsupported", f"the shape's inputs need {need} of GPU memory and {free / (1 << 30):.1f} GiB "
                          "are free: other evaluations on this GPU hold the rest (evaluator.per_gpu)",
                          reason=f"needs {need} of GPU memory free") from None
        self.views = [(shared.view(torch, self.arena.tensor, lay["input"]),
                       shared.view(torch, self.arena.tensor, lay["output"]) if lay["output"] else None)
                      for lay in layouts]
        desc, fds = self.arena.describe()
        runner.ask({"op": "shape", "id": self.id, "arena": desc, "slots": layouts}, fds)

    def fill(self, slot: int, private):
        """Copy a privately generated input into the slot and poison its output."""
        if not shared.same_layout(self.sample, private):
            raise problem.ProblemError("the reference's generate_input gave differently laid out inputs for "
                                       "two seeds of one shape; the harness shares one layout per shape")
        data, out = self.views[slot]
        for dst, src in zip(shared.tensors(data), shared.tensors(private)):
            dst.copy_(src)
        if out is None:
            checking.poison(data, self.task.output)
        else:
            for t in shared.tensors(out):
                _poison_tensor(self.torch, t)
        checking.sync(self.torch)

    def data(self, slot: int):
        return self.views[slot][0]

    def take(self, slot: int):
        """The judge's private copy of what the runner left in the slot's output, in the dtypes
        the kernel returned it in (Slots._dtypes)."""
        data, out = self.views[slot]
        copy = checking.clone(out if out is not None else problem.pick_output(data, self.task.output))
        cast = self.casts.get(slot)
        if cast:
            leaves = iter(cast)
            copy = _narrowed(self.torch, copy, leaves)
        return copy

    def call(self, slot: int, *, clock: str | None = None, flush: bool = True, empty: bool = False,
             hold: list[int] | None = None) -> dict:
        """One call of the slot: untimed, or timed by the runner's `clock` (events or wall).
        `hold`: segment sizes for the runner's allocator to hold free (timing.free_segments), at
        once for an empty request, after its reply for a call."""
        request = {"op": "call", "id": self.id, "slot": slot, "clock": clock, "flush": flush, "empty": empty}
        if hold:
            request["hold"] = hold
        reply = self.runner.ask(request)
        reply["us"] = channel.number(reply, "us")
        reply["host_us"] = channel.number(reply, "host_us")
        reply["output"] = channel.text(reply, "output", 2000, optional=True)
        self.casts[slot] = self._dtypes(reply.get("dtypes"))
        return reply

    def _dtypes(self, value) -> list | None:
        """The runner's report of outputs widened into the judge's buffer: dtype names only, one
        for each output, each one a dtype the buffer's holds exactly; else a broken protocol.
        (take() then checks that the values really are values of the named dtype.)"""
        if value is None:
            return None
        leaves = shared.tensors(self.views[0][1]) if self.views and self.views[0][1] is not None else []
        torch = self.torch
        if not isinstance(value, list) or len(value) != len(leaves) or not all(
                v is None or (isinstance(v, str) and isinstance(getattr(torch, v, None), torch.dtype)
                              and shared.widens(torch, getattr(torch, v), leaf.dtype))
                for v, leaf in zip(value, leaves)):
            raise channel.ChannelError("'done' message: 'dtypes' must name, for each output, null or a dtype its "
                                       "buffer's dtype holds exactly")
        return value

    def drain(self):
        """The runner's own checks of the last call, read outside any clock (Runner.drain)."""
        self.runner.drain()

    def batch(self, slots: list[int], *, empty: bool = False, timed: bool = False) -> dict:
        reply = self.runner.ask({"op": "batch", "id": self.id, "slots": slots, "empty": empty, "timed": timed})
        casts = reply.get("dtypes")
        if casts is not None and (not isinstance(casts, list) or len(casts) != len(slots)):
            raise channel.ChannelError("'done' message: 'dtypes' must hold one entry for each slot of the batch")
        for slot, cast in zip(slots, casts or [None] * len(slots)):
            self.casts[slot] = self._dtypes(cast)
        reply["output"] = channel.text(reply, "output", 2000, optional=True)
        reply["host_us"] = channel.number(reply, "host_us")
        for key in ("launch_us", "span_us", "served_us"):  # diagnostics, see runner.op_batch
            reply[key] = channel.number(reply, key) if key in reply else None
        return reply

    def close(self):
        self.runner.ask({"op": "forget", "id": self.id})
        self.views = []
        self.arena.close()


def _narrowed(torch, data, leaves):
    """`data` with each tensor cast to the next dtype name of `leaves` (None: kept). The runner
    says which outputs it widened; a tensor whose values are not all values of the named dtype
    was not widened from it, and a problem's check must not get a narrower copy (and perhaps
    its looser tolerance) on the runner's word."""
    if isinstance(data, torch.Tensor):
        name = next(leaves, None)
        if not name:
            return data
        narrow = data.to(getattr(torch, name))
        if not checking.same_values(torch, narrow.to(data.dtype), data):
            raise channel.ChannelError(f"'done' message: 'dtypes' says an output was {name}, but its buffer holds "
                                       f"values {name} cannot hold")
        return narrow
    if isinstance(data, (tuple, list)):
        return type(data)(_narrowed(torch, d, leaves) for d in data)
    return data


def output_like(torch, task, reference, sample):
    """The output buffer of a problem without `output:`, shaped like the expected output (computed
    on a private copy); None where the kernel fills part of its input."""
    if task.output is not None:
        return None
    return _contiguous_like(torch, reference.ref_kernel(checking.clone(sample)))


def slot_bytes(torch, task, sample, like) -> int:
    """One slot's bytes in an arena: its input and its output buffer, as the planner lays them out."""
    planner = shared.Planner()
    planner.tree(sample)
    if like is not None:
        planner.tree(like)
    return planner.size


class TimingContext:
    """What a protocol's timed loop needs of the judge (harness/upstream_timing.py)."""

    def __init__(self, spec: Spec, task, reference, runner, on_gpu, torch, calibration, shapes: int):
        self.task, self.reference, self.on_gpu, self.torch, self.calibration = task, reference, on_gpu, torch, calibration
        self.shapes = shapes  # benchmark shapes the ranking figure is the geomean of (Protocol.precision)
        self.runner = runner
        self.secret = spec.secret_seed
        self.settings = spec.timing
        self._likes: dict = {}  # id(sample) -> its output layout, so that one shape computes it once
        self._retired: list = []

    def slot_bytes(self, sample) -> int:
        if id(sample) not in self._likes:  # the reference runs for it: only once a shape
            self._likes[id(sample)] = output_like(self.torch, self.task, self.reference, sample)
        return slot_bytes(self.torch, self.task, sample, self._likes[id(sample)])

    def new_slots(self, sample, count: int) -> Slots:
        like = self._likes.pop(id(sample), None)
        slots = Slots(self.torch, self.runner, self.task, self.reference, sample, count, self.on_gpu, like=like)
        self._close_retired()  # only now: the new arena could not take their addresses
        return slots

    def free_bytes(self) -> int | None:
        return timing.free_bytes(self.torch)

    def retire(self, slots):
        """An arena is done: closed once the next one exists, so that no arena of an evaluation
        lies at the addresses of one before it."""
        self._retired.append(slots)

    def _close_retired(self):
        for old in self._retired:
            old.close()
        if self._retired and self.on_gpu:
            # The arenas' memory goes back to the device, not into the judge's cache: the segments
            # the judge holds free are given to the runner's allocator to hold (timing.free_segments),
            # and are to be those of its per-call work, as in an evaluator of one process. With
            # the arenas among them, a kernel that captures a graph per call read 3.2x upstream.
            self.torch.cuda.empty_cache()
        self._retired = []

    def close(self):
        self._close_retired()


class _ShapeRace:
    """What a shape's timed loop asks after each call: racing's verdict partway through the
    shape, against the shapes timed before it (racing.decide_within). It keeps the shape's
    calls, whose later half the verdict after the whole shape also needs (`later`)."""

    def __init__(self, incumbent: dict, shapes: list, key: str, total: int, on_gpu: bool, stat: str):
        self.incumbent, self.shapes, self.key, self.total, self.on_gpu, self.stat = (
            incumbent, shapes, key, total, on_gpu, stat)
        self.times: list[float] = []

    def __call__(self, times: list[float]) -> dict | None:
        self.times = times
        if not racing.due(len(times)):
            return None
        return racing.decide_within(self.incumbent, self.shapes, {"key": self.key, **timing.stats(times)},
                                    self.later(), self.total, self.on_gpu, self.stat)

    def later(self) -> dict | None:
        """The entry of the later half of the shape's calls so far (None before any)."""
        if not self.times:
            return None
        return {"key": self.key, **timing.stats(self.times[len(self.times) // 2:])}


def _contiguous_like(torch, expected):
    if isinstance(expected, torch.Tensor):
        return torch.empty(expected.shape, dtype=expected.dtype, device=expected.device)
    if isinstance(expected, (tuple, list)):
        return type(expected)(_contiguous_like(torch, e) for e in expected)
    raise problem.ProblemError(f"ref_kernel returned a {type(expected).__name__}; the harness needs a tensor "
                               "or a tuple of tensors, or an `output:` index in task.yml")


def _poison_tensor(torch, t):
    if t.is_floating_point():
        t.fill_(float("nan"))
    else:
        t.fill_(torch.iinfo(t.dtype).max if t.dtype != torch.bool else True)


def _load_reference(path: Path):
    return problem.load_module(path, "_kgit_reference")


def start(spec: StartSpec, ahead: bool = False) -> tuple[Runner, object, bool]:
    """Everything that needs no candidate: the runner started (it confines itself and
    imports torch and triton meanwhile), torch imported here, the device context made.
    A pair started `ahead` of need (kgit/evaluation/child.py) has done all of this before
    its candidate exists, and imports here what a reference or the needs check may use."""
    helpers = _helpers_folder(spec)
    helpers.mkdir(exist_ok=True)  # mounted into the runner's view now, filled once the candidate is known
    runner = Runner(spec)
    try:
        # Started before the judge imports torch: the two start-ups overlap.
        runner.send({"op": "setup", "candidate_dir": spec.candidate_dir, "sandbox": _runner_sandbox(spec),
                     "helpers_dir": str(helpers), "problem_dir": spec.problem_dir,
                     "warm_profiler": bool(ahead and spec.kernel_split), "warm_jit": ahead,
                     "gated": spec.gate_fd is not None})
        PHASES.mark("runner spawned")
        import torch

        PHASES.mark("torch imported")
        if ahead:
            # Off the critical path only when warm: cold, it costs what the runner's own
            # start-up does not cover (the shipped problems do not need it). torch._dynamo,
            # which a needs-check dry run on meta tensors may import, is not imported ahead:
            # the judge keeps each problem's input sizes (needs.Record), so only a problem's
            # first evaluation on a machine runs that dry run, and with triton it took 3.3-3.9 s
            # of every warm judge's start on the H200 (triton alone: 0.2-0.3 s in the runner),
            # the longest part of a spare's.
            try:
                import triton  # noqa: F401 - a reference may use it
            except ImportError:
                pass
        on_gpu = torch.cuda.is_available()
        PHASES.mark("imports done")
        if spec.gate_fd is not None:
            channel.expect(runner.receive(), "at gate")  # its imports and profiler libraries done
            PHASES.mark("at gate")  # kgit opens the gate on this line, unless the device is timing
            _await_gate(spec.gate_fd, runner)
        PHASES.mark("gate opened")
        if on_gpu:
            torch.empty(1, device="cuda")  # the device context, made now rather than by the first input
            if ahead:
                _warm_device_libraries(torch)
        PHASES.mark("device ready")
    except BaseException:
        runner.close()
        raise
    return runner, torch, on_gpu


def _warm_device_libraries(torch) -> None:
    """A matrix product in each dtype a reference or a check commonly uses: the BLAS handles
    and their workspaces made, off the critical path of a pair started ahead of need, rather
    than by the needs check's first reference call once the candidate is there."""
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        x = torch.ones(64, 64, device="cuda", dtype=dtype)
        x @ x
    torch.cuda.synchronize()


def _await_gate(fd: int, runner: Runner) -> None:
    """Wait until kgit opens the pair's device gate (kgit/evaluation/child.py, Pair.open_gate),
    then let the runner go on too. Everything before it is CPU work (imports); the device
    contexts come after it, never beside another evaluation's timed loop on the same GPU.
    The gate closed unopened: kgit ended the pair, and so does the judge."""
    with os.fdopen(fd, "rb", buffering=0) as gate:
        opened = gate.read(1)
    if not opened:
        runner.close()
        os._exit(0)
    runner.send({"op": "device"})


def run(doc: dict) -> dict:
    """One evaluation whose candidate is already there, from its spec (a JSON object, read by
    spec.Spec) to the result document (kgit.result/1)."""
    spec = Spec.from_dict(doc)
    runner, torch, on_gpu = start(spec.start)
    PHASES.mark("candidate arrived")
    return run_started(spec, runner, torch, on_gpu)


def run_started(spec: Spec, runner: Runner, torch, on_gpu: bool) -> dict:
    """One evaluation, from the candidate's arrival to the result document (a dict of kgit.result/1)."""
    started = _clock()
    doc = result_mod.new("crash")
    timeout_s = spec.timeout_s
    deadline = time.monotonic() + max(timeout_s - DEADLINE_MARGIN_S, timeout_s * 0.8)
    runner.begin(deadline, timeout_s)
    try:
        task = problem.load_task(Path(spec.problem_dir))
        protocol = _protocol(spec, task)
        doc["protocol"] = protocol.name
        doc["harness"] = result_mod.harness_id(protocol.name)
        doc["ranking"] = task.ranking if protocol.statistic == "task" else protocol.statistic
        doc["device"] = torch.cuda.get_device_name() if on_gpu else "cpu"
        doc["timing"] = "events" if on_gpu else "interpreter"
        doc["versions"] = timing.versions(torch)
        sources = _sources(spec, task)
        refused = _static_policy(sources, task, spec.computed_names)
        if refused is not None:
            raise refused
        # The problem's own code runs first: what fails there is the machine's lack, not the kernel's.
        try:
            with PHASES.span("problem: reference import"):
                reference = _load_reference(Path(spec.problem_dir) / "reference.py")
            with PHASES.span("problem: needs check (the reference on a test input)"):
                settings, reference_ran = needs.check(task, reference, on_gpu, torch, _record(spec, on_gpu, torch))
        except needs.Unsupported as e:
            raise Verdict("unsupported", _excerpt(e.__cause__ or e), reason=str(e)) from None
        except Exception as e:  # noqa: BLE001 - the reference failed to import or to make an input
            raise Verdict("unsupported", _excerpt(e), reason=needs.reason(e, on_gpu)) from None
        PHASES.mark("reference ready")
        ready = runner.receive()
        channel.expect(ready, "ready")
        runner.ready = True
        PHASES.runner_marks(ready.get("marks"))
        PHASES.mark("runner ready")
        doc["confine"] = reported.clean_confine(ready.get("confine"))
        if ready.get("on_gpu") is not on_gpu:
            raise Verdict("crash", f"the runner sees {'a' if ready.get('on_gpu') else 'no'} GPU and the judge "
                          f"{'does' if on_gpu else 'does not'}: check CUDA_VISIBLE_DEVICES and the sandbox")
        # Before any candidate code runs: the caps on what the runner could inflate later.
        calibration = timing.calibrate(lambda: runner.ask({"op": "ping"}), torch, on_gpu)
        runner.ask({"op": "load", "files": task.files, "forbidden": task.forbidden, "output": task.output,
                    "helpers": _helpers(spec, task), "torch_settings": settings})
        PHASES.mark("candidate imported")
        doc.update(_evaluate(spec, task, reference, runner, on_gpu, torch, doc, calibration, reference_ran))
        PHASES.mark("timed")
    except Verdict as v:
        # Every rejection names its rule; one without is a harness bug, said as such.
        reason = v.reason or ("unexplained (a harness bug: the rule was not recorded)" if v.status == "rejected" else None)
        doc.update(status=v.status, error=v.error, reason=reason)
        if v.status in RUNNER_STATUSES:
            lacks = needs.machine_lacks(on_gpu)
            if lacks:
                doc["lacks"] = lacks
    except channel.ChannelError as e:
        doc.update(status="rejected", error=f"the runner sent {e}", reason="broken channel protocol")
    except checking.InputFailed as e:
        doc.update(_input_failed(e, on_gpu))
    except problem.ProblemError as e:
        doc.update(status="crash", error=f"the problem could not be run: {e}")
    finally:
        if runner is not None:
            _targets_finish(runner, doc)  # the build facts captured meanwhile (docs/targets.md)
            runner.close()
        PHASES.mark("result")
    doc["eval_s"] = round(_clock() - started, 3)
    doc["phases"] = PHASES.to_dict()
    return doc


def _input_failed(e: checking.InputFailed, on_gpu: bool) -> dict:
    """The result when the problem's generate_input fails on a shape past the needs check."""
    cause = e.__cause__ or e
    why = needs.reason(cause, on_gpu)
    if why.startswith("needs more memory"):
        # After kernels ran the GPU's free memory is partly theirs: a crash, not the machine's lack.
        return {"status": "crash", "error": f"{e}: it ran out of memory\n{_excerpt(cause)}"}
    return {"status": "unsupported", "error": _excerpt(cause),
            "reason": f"{why} (generate_input, shape {problem.shape_key(e.shape)})"}


def _targets_build(runner, names):
    """Ask the runner to start its cross-compiles, even after a failed check; a runner that is
    gone or refuses leaves the build facts out, never changes the verdict."""
    runner.targets_started = False
    try:
        runner.ask({"op": "targets_build", "names": list(names)})
        runner.targets_started = True
    except (Verdict, channel.ChannelError):
        pass


def _targets_finish(runner, doc):
    """The runner's build facts into doc["targets"] (a cached entry stays), stored for reuse
    when the checks ran to their end (harness/factcache.py).

    An attempt racing stopped does not wait for its compiles: they ran beside a timed loop
    that ended early, for facts about a kernel nobody will build on. Those not in yet are
    labelled (targets.CUT_SHORT), and the incomplete entry is not cached."""
    wait = doc.get("status") != "stopped"
    facts = _targets_collect(runner, wait)
    if facts is not None:
        if not wait:
            runner.targets_cache = None
        _keep_facts(runner, doc, facts)


def _keep_facts(runner, doc, facts):
    """Build facts into doc["targets"], and into the judge's cache where this evaluation may store them.

    The runner's report is held to the facts' schema first (harness/reported.py): only the
    targets the judge asked for, only kernels the candidate's source defines."""
    names, sources = getattr(runner, "facts_rules", (None, None))
    facts = reported.clean_targets(facts, names, sources)
    doc["targets"] = facts
    cache = getattr(runner, "targets_cache", None)
    if cache is not None:
        cache.write(facts)


def _targets_collect(runner, wait: bool = True) -> dict | None:
    """The runner's build facts (candidate-reported), or None when none were started or it is gone.
    `wait` False: only the compiles already done (targets.Build.finish)."""
    if not getattr(runner, "targets_started", False):
        return None
    try:
        facts = runner.ask({"op": "targets_collect", "wait": wait}).get("targets")
    except (Verdict, channel.ChannelError):
        return None
    return facts


def _record(spec: Spec, on_gpu, torch) -> needs.Record:
    """What earlier evaluations learnt of the problem here (needs.Record), beside the build-facts
    cache (both the judge's alone)."""
    facts = spec.targets_cache
    folder = str(Path(facts).parent / "problem-records") if facts else None
    return needs.Record(folder, needs.problem_digest(Path(spec.problem_dir), torch, on_gpu) if folder else "")


def _helpers_folder(spec: StartSpec) -> Path:
    return Path(spec.runner_cwd or Path(spec.candidate_dir).parent) / "problem-helpers"


def _helpers(spec: Spec, task) -> bool:
    """Copy the problem's helper modules the candidate imports into the helpers folder; any?

    Imported problems keep type aliases and helpers next to their reference (GPU MODE's
    `from task import input_t`); the runner never sees the problem folder, so the judge
    copies just those modules, found by reading the candidate's imports as text, into the
    folder the runner's view was given at its start. The reference itself is never copied.
    """
    import ast

    candidate_dir = Path(spec.candidate_dir)
    wanted: set = set()
    for name in task.files:
        try:
            tree = ast.parse((candidate_dir / name).read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                wanted.add(node.module.split(".")[0])
    wanted -= set(sys.stdlib_module_names) | {"torch", "triton", "numpy", "reference"}
    wanted -= {Path(f).stem for f in task.files}
    problem_dir = Path(spec.problem_dir)
    found = {}
    for name in sorted(wanted):
        hits = sorted(p for p in problem_dir.rglob(f"{name}.py") if p.is_file())
        if hits:
            found[name] = hits[0]
    folder = _helpers_folder(spec.start)
    for name, path in found.items():
        (folder / f"{name}.py").write_bytes(path.read_bytes())
    return bool(found)


def _runner_sandbox(spec: StartSpec) -> dict:
    settings = dict(spec.sandbox)
    if settings.get("parent_pid"):
        # kgit computed it for the process it starts; the runner's parent is the judge.
        settings["parent_pid"] = os.getpid()
    return settings


def _sources(spec: Spec, task) -> dict[str, str]:
    """The candidate's editable files as text (the judge reads them; it never imports them)."""
    candidate_dir = Path(spec.candidate_dir)
    return {f: (candidate_dir / f).read_text(encoding="utf-8", errors="replace")
            for f in task.files if (candidate_dir / f).is_file()}


def _static_policy(sources: dict[str, str], task, computed_names: bool = False) -> Verdict | None:
    """The candidate's editable files read as text: the verdict that ends it now, or None.

    `computed_names` (Spec.computed_names, never set by kgit for a real evaluation): attribute names
    built at run time pass, so that the harness's tests can reach the defences behind."""
    if not sources:
        return Verdict("compile-error", f"none of the editable files {task.files} exist in the candidate")
    violation = policy.check(sources, task.forbidden, computed_names)
    if violation:
        rule, detail = violation
        return Verdict("rejected", detail, reason=rule)
    return None


def _evaluate(spec: Spec, task, reference, runner, on_gpu, torch, doc, calibration, reference_ran: bool) -> dict:
    secret = spec.secret_seed
    tests = []
    # [build targets] The runner captures the checks' launches and cross-compiles them
    # for the build targets while the timing runs; collected in run() (docs/targets.md).
    # Facts of byte-identical code measured before are served from the judge's cache
    # (harness/factcache.py): no capture, no compile.
    names = task.targets if spec.targets is None else list(spec.targets)
    runner.facts_rules = (list(names or []), _sources(spec, task))
    cache = factcache.Cache(spec.targets_cache, factcache.key(spec, task, names, doc)) if names else None
    if cache is not None and (hit := cache.read()) is not None:
        doc["targets"], names = hit, []
    if names:
        runner.ask({"op": "targets_start"})
    checked = False
    # The published seed and one derived from the secret: outputs memorised for the
    # published inputs fail the second.
    checks = [(shape, (int(shape.get("seed", 0)), checking.mix_seed(shape.get("seed", 0), secret, 7)))
              for shape in task.shapes("tests", on_gpu)]
    made: dict = {}
    try:
        if on_gpu:
            made = _compile_ahead(task, reference, runner, doc, checks, warm=not reference_ran)
        for i, (shape, seeds) in enumerate(checks):
            sample = made.pop(i) if i in made else checking.make_input(reference, shape, seeds[0])
            slots = Slots(torch, runner, task, reference, sample, 1, on_gpu)
            for seed in seeds:
                tests.append(_check_shape(task, reference, slots, shape, seed))
            slots.close()
        checked = True
    finally:
        if names:
            _targets_build(runner, names)
            runner.targets_cache = cache if checked else None
    # [end build targets]
    PHASES.mark("checked")
    failed = [t for t in tests if not t["ok"]]
    if failed:
        return {"status": "incorrect", "tests": tests,
                "error": "\n".join(f"{t['key']} (seed {t['seed']}): {t['message']}" for t in failed)[:4000]}

    shapes: list = []
    benchmarks = task.shapes("benchmarks", on_gpu)
    protocol = _protocol(spec, task)
    stat = doc["ranking"] + "_us"
    ctx = TimingContext(spec, task, reference, runner, on_gpu, torch, calibration, len(benchmarks))
    try:
        outcome = _time_shapes(spec, task, reference, runner, on_gpu, torch, doc, calibration, protocol, ctx,
                               tests, shapes, benchmarks, stat)
    finally:
        ctx.close()
    if outcome is not None:
        return outcome
    sol = _speed_of_light(spec, task, shapes, on_gpu, torch)
    if sol.pop("verdict", None):
        doc.update(tests=tests, shapes=shapes, speed_of_light=sol)
        raise Verdict("rejected", sol["why"], reason="faster than physically possible")
    geo = result_mod.geomean(s[stat] for s in shapes)
    if geo is None:
        raise Verdict("runtime-error", "a benchmark shape timed at zero or less; the timer saw no work, "
                      "so there is no geometric mean to rank by")
    PHASES.mark("benchmarks timed")
    if on_gpu and spec.kernel_split:
        _kernel_splits(task, reference, runner, torch, benchmarks, shapes, on_gpu)
        PHASES.mark("kernels split")
    elif names and spec.targets_gpu_shapes:
        _dry_targets(task, reference, runner, torch, doc)  # build facts at the GPU shapes
        PHASES.mark("gpu shapes captured")
    return {"status": "ok", "tests": tests, "shapes": shapes, "geomean_us": geo, "speed_of_light": sol}


def _protocol(spec: Spec, task) -> protocols.Protocol:
    """The timing protocol: kgit's choice in the spec (`.kgit.yaml`'s timing.protocol), else the problem's."""
    try:
        return protocols.get(spec.protocol or spec.timing.protocol or task.protocol)
    except ValueError as e:
        raise problem.ProblemError(str(e)) from None


# A shape whose figures disagree with the judge's clock is timed once more, this long after, on
# its seed moved by this much (_time_shapes).
RETIME_WAIT_S = 1.0
RETIME_SEED_OFFSET = 1_000_003


def _time_shapes(spec: Spec, task, reference, runner, on_gpu, torch, doc, calibration, protocol, ctx, tests,
                 shapes, benchmarks, stat) -> dict | None:
    """Time every benchmark shape under `protocol` into `shapes`; an early result (incorrect,
    stopped) or None when every shape was timed."""
    secret = spec.secret_seed
    incumbent = dict(spec.race) if spec.race is not None else None

    def timed(index: int, shape: dict, seed: int) -> tuple[dict, str | None, _ShapeRace | None]:
        """The shape's entry, timed on `seed`, why its figures disagree with the judge's clock, and
        the race its timed loop asked (None: nothing to race against)."""
        seeded = dict(shape, seed=seed)
        race = (None if incumbent is None else
                _ShapeRace(incumbent, shapes, problem.shape_key(shape), len(benchmarks), on_gpu, stat))
        if protocol.name == protocols.DEFAULT:
            runs = timing.measure(task, reference, seeded, secret, spec.timing, on_gpu, torch, ctx.new_slots,
                                  calibration, race=race)
            if on_gpu:  # beside the ranking figure: the flushed device time and the host's, a call
                runs.update(device_us=runs.get("events_mean_us"), host_us=runs.get("host_call_us"))
        else:
            try:
                runs = upstream_timing.measure(protocol, ctx, seeded, first_shape=index == 0, race=race)
            except upstream_timing.NoRoom as e:
                raise Verdict("unsupported", f"{problem.shape_key(shape)}: {e}", reason=str(e)) from None
        entry = {"key": problem.shape_key(shape), "shape": {k: v for k, v in shape.items() if k != "seed"}, **runs}
        # A shape racing stopped partway is not settled: its figures rank nothing, and a runner
        # that inflated them only stopped its own candidate.
        return entry, (None if entry.get("refused") or entry.get("error") or entry.get("raced")
                       else timing.settle(entry)), race

    for index, shape in enumerate(benchmarks):
        PHASES.tell(f"shape {index + 1}/{len(benchmarks)}")
        seed = int(shape.get("seed", 0))
        entry, why, shape_race = timed(index, shape, seed)
        if why and on_gpu:
            # Work of other processes on the GPU (other evaluations, a spare judge/runner pair
            # starting) can fall inside the judge's clock and not the runner's figures for a whole
            # shape: it is timed once more after a wait, on inputs of new seeds, so nothing of the
            # first timing can be replayed. A forged figure disagrees again.
            time.sleep(RETIME_WAIT_S)
            entry, again, shape_race = timed(index, shape, seed + RETIME_SEED_OFFSET)
            entry["retimed"], why = why, again
        raced = entry.pop("raced", None)
        shapes.append(entry)
        if entry.get("refused"):
            doc.update(tests=tests, shapes=shapes)
            raise Verdict("rejected", f"{entry['key']}: {entry['error']}", reason=entry["refused"])
        if entry.get("error"):
            return {"status": "incorrect", "tests": tests, "shapes": shapes,
                    "error": f"{entry['key']}: {entry['error']}"[:4000]}
        if why:
            doc.update(tests=tests, shapes=shapes)
            raise Verdict("rejected", f"{entry['key']}: {why}", reason=timing.DISAGREE_REASON)
        race = raced or racing.decide(incumbent, shapes, len(benchmarks), on_gpu, stat,
                                      later=shape_race.later() if shape_race is not None else None)
        if race:
            # Correct on every test, but no ranking on partial data: no geomean, a status of its own.
            return {"status": "stopped", "tests": tests, "shapes": shapes, "race": race,
                    "error": f"stopped timing after {racing.how_far(race)}: "
                             f"{race['slower']:.3f}x the time of {race['incumbent']} on the shapes compared "
                             f"(at least {race['bound']:.3f}x beyond the noise)"}
    return None


# A dry run's inputs are laid out, never filled: a GPU shape whose inputs span more is left out.
DRY_BYTES = 512 << 20
# The judge's wait for a dry run: the runner's call budget and one target compile.
DRY_WAIT_S = 240.0


def _dry_targets(task, reference, runner, torch, doc):
    """In the interpreter, after timing: the build facts of the kernel
    configurations the GPU shapes would launch (the checks' CPU shapes reach only some).

    The checks' facts are collected (and cached) first; the runner then calls the candidate on
    inputs laid out like each GPU shape's, launching nothing (harness/targets.py `dry`), and
    compiles the new variants. Failing or slow, it leaves the checks' facts and the verdict
    as they were; a guard the candidate trips still rejects.
    """
    _targets_finish(runner, doc)
    runner.targets_started = False  # collected: run() does not ask again
    if not isinstance(doc.get("targets"), dict):
        return
    shapes, skipped = _dry_shapes(task, reference)
    if not shapes:
        doc["targets"]["dry"] = {"captured": [], "failed": {}, "skipped": skipped}
        return
    saved = runner.deadline
    runner.deadline = min(saved, time.monotonic() + DRY_WAIT_S)
    try:
        reply = runner.ask({"op": "targets_dry", "shapes": shapes, "skipped": skipped})
    except Verdict as v:
        if v.status == "rejected":
            raise
        doc["targets"]["dry"] = {"error": f"the dry run of the GPU shapes failed ({v.status})"}
        return
    finally:
        runner.deadline = saved
        runner.timed_out = False  # a dry run that overran is killed with the runner, not reported as a timeout
    if reply.get("targets") is not None:
        _keep_facts(runner, doc, reply["targets"])


def _dry_shapes(task, reference) -> tuple[list, dict]:
    """The layouts of the GPU shapes' inputs (no storage: the reference makes them on the meta
    device, as the needs check sizes them), those the CPU checks did not already run; and why
    others were left out."""
    ran = {problem.shape_key(s) for s in task.shapes("tests", False)}
    shapes, skipped = [], {}
    for shape in task.shapes("benchmarks", True) + task.shapes("tests", True):
        key = problem.shape_key(shape)
        if key in ran:
            continue
        ran.add(key)
        layout, size, why = _meta_layout(reference, shape)
        if layout is None:
            skipped[key] = why
            continue
        shapes.append({"key": key, "layout": layout, "size": size})
    return shapes, skipped


def _kernel_splits(task, reference, runner, torch, benchmarks, shapes, on_gpu):
    """Each timed shape's device kernels (harness/kernelsplit.py) into its entry as `kernels`.

    Run after every shape is timed and the result decided, so neither a profiler's set-up
    nor its after-effects reach a timed call; candidate-reported, never ranked. One
    profiler session for all the shapes, each shape's arena made and freed in turn. A
    kernel failing this one extra call leaves its split out with the reason and the
    verdict as it was; a guard it trips, or a runner that is gone, ends the evaluation as
    anywhere else.
    """
    runner.ask({"op": "kernels_start"})
    called = []  # [entry, why its call failed or None], one per `kernels` request
    for shape, entry in zip(benchmarks, shapes):
        sample = checking.make_input(reference, shape, int(shape.get("seed", 0)))
        slots = Slots(torch, runner, task, reference, sample, 1, on_gpu)
        try:
            slots.fill(0, sample)
            called.append([entry, None])
            runner.ask({"op": "kernels", "id": slots.id, "slot": 0})
        except Verdict as v:
            if v.status not in RUNNER_STATUSES:
                raise
            last = ((v.error or "").strip().splitlines() or [""])[-1]
            called[-1][1] = f"the profiled call failed ({v.status}): {last}"[:300]
        finally:
            slots.close()
    reply = runner.ask({"op": "kernels_stop"})
    splits = reply.get("splits")
    why_none = channel.text(reply, "why", 300, optional=True) or "no kernel rows reported"
    if splits is not None and (not isinstance(splits, list) or len(splits) != len(called)
                               or not all(isinstance(s, dict) for s in splits)):
        splits, why_none = None, f"the runner's kernel rows were malformed: {len(called)} calls, not that many splits"
    for i, (entry, failed) in enumerate(called):
        if failed:
            entry["kernels"] = kernelsplit.entry(None, failed)
            continue
        split = splits[i] if splits is not None else {"kernels": None, "why": why_none}
        why = channel.text(split, "why", 300, optional=True)
        try:
            rows = kernelsplit.clean(split.get("kernels")) if split.get("kernels") is not None else None
        except ValueError as e:
            rows, why = None, f"the runner's kernel rows were malformed: {e}"
        entry["kernels"] = kernelsplit.entry(rows, why or (None if rows else "no kernel rows reported"))


def _compile_ahead(task, reference, runner, doc, checks: list, warm: bool = False) -> dict:
    """Before the checks: the runner compiles the candidate's launches on every test shape side
    by side (harness/precompile.py), from the layouts of the checks' first inputs, made now
    and returned for the checks ({index in `checks`: input}) while they fit in DRY_BYTES.
    Meanwhile, with `warm` (the needs check knew the reference from its record and did not
    run it), the judge runs the reference and its check on the first input
    (needs.warm_reference), on the GPU the runner's compiles do not use.
    Laid out from real inputs, not the meta device: they are the layouts the checks' calls
    see, and on the H200 the meta device's first use (torch's symbolic shapes) cost the
    judge more than the compiles saved. The runner's report, the candidate's process's, goes
    into doc["precompile"] as it came, never into the verdict; a runner that does nothing only
    compiles in its checks, as before."""
    made, shapes, total = {}, [], 0
    with PHASES.span("checks: inputs"):
        for i, (shape, seeds) in enumerate(checks):
            try:
                sample = checking.make_input(reference, shape, seeds[0])
            except checking.InputFailed:
                # Memory these inputs hold, or the problem's own failure: the check makes this
                # input again and meets whichever it is as it did before the compiles ahead.
                break
            planner = shared.Planner()
            try:
                layout = planner.tree(sample)
            except TypeError:  # not a tree of tensors and plain values: the checks say so
                break
            if total + planner.size > DRY_BYTES:
                break
            made[i], total = sample, total + planner.size
            shapes.append({"layout": layout, "size": planner.size})
    if shapes:
        with PHASES.span("checks: compiles side by side"):
            runner.send({"op": "precompile", "shapes": shapes})
            if warm:
                with PHASES.span("checks: reference warmed meanwhile"):
                    needs.warm_reference(task, reference, made[0])
            reply = runner.answer()
        report = reported.clean_precompile(reply.get("precompile"))
        if report is not None:
            doc["precompile"] = report
    return made


def _meta_layout(reference, shape) -> tuple[dict | None, int, str | None]:
    """(the layout of the shape's inputs, their bytes, why there is none), from the reference's
    generate_input on the meta device: no storage, no values."""
    sample = portable.meta_input(reference.generate_input, shape)
    planner = shared.Planner()
    try:
        layout = planner.tree(sample) if sample is not None else None
    except TypeError:  # not a tree of tensors and plain values (shared.Planner)
        layout = None
    if layout is None:
        return None, 0, "its inputs cannot be laid out without values (the reference needs them)"
    if planner.size > DRY_BYTES:
        return None, planner.size, f"inputs of {planner.size >> 20} MiB, more than the dry run's {DRY_BYTES >> 20} MiB"
    return layout, planner.size, None


def _check_shape(task, reference, slots: Slots, shape, seed) -> dict:
    key = problem.shape_key(shape)
    with PHASES.span("checks: inputs"):
        private = checking.make_input(reference, shape, seed)
        slots.fill(0, private)
    # The first call of a shape compiles the candidate's kernels (JIT) where it runs on a GPU.
    with PHASES.span("checks: candidate calls"):
        reply = slots.call(0)
    out = slots.take(0)
    if reply["output"]:
        return {"key": key, "seed": seed, "ok": False, "message": reply["output"]}
    with PHASES.span("checks: compare"):
        ok, message = checking.inputs_unchanged(private, slots.data(0), task.output)
        if ok:
            ok, message = checking.compare(task, reference, private, out)
    return {"key": key, "seed": seed, "ok": ok, "message": message}


def _speed_of_light(spec: Spec, task, shapes, on_gpu, torch) -> dict:
    if not on_gpu:
        return {"checked": False, "why": "not checked: interpreter timings are host time on the CPU, not a GPU's"}
    if spec.device_peaks:
        peak = peaks.from_override(dict(spec.device_peaks))
    else:
        peak = peaks.lookup(torch.cuda.get_device_name()) or peaks.measure(torch)
    info = {"checked": True, "peak": peak.to_dict(), "margin": peaks.MARGIN, "why": "within physical limits"}
    verdict = peaks.judge(task, shapes, peak)
    if verdict:
        info.update(why=verdict, verdict=True)
    return info


def _receive_task(fd: int) -> dict | None:
    """The evaluation kgit sends a judge started ahead of need (JSON, then end of file); None
    when kgit closed the pipe without one (the pair was discarded unused)."""
    with os.fdopen(fd, "rb") as pipe:
        data = pipe.read()
    return json.loads(data) if data.strip() else None


def _timing_notices(fd: int):
    """Tell kgit, on a pipe of its own, each stage mark and each timed shape ("shape k/n"): kgit
    shows the stage while it waits, and keeps its spare pairs for this device from making their
    device contexts while the timed loop runs, from "checked" to "timed"
    (kgit/evaluation/backends.py). A short line each; a parent that stopped listening costs
    nothing."""
    os.set_inheritable(fd, False)  # the runner never holds it

    def tell(name: str):
        try:
            os.write(fd, name.encode()[:80].replace(b"\n", b" ") + b"\n")
        except OSError:
            pass

    return tell


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kgit_harness judge")
    parser.add_argument("--spec", help="the whole evaluation, run at once (deleted once read)")
    parser.add_argument("--start", help="the start-up part only; the evaluation then arrives on --go-fd")
    parser.add_argument("--go-fd", type=int)
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    if bool(args.spec) == bool(args.start) or bool(args.start) != (args.go_fd is not None):
        parser.error("give --spec SPEC, or --start START with --go-fd FD")
    with open(args.spec or args.start, encoding="utf-8") as f:
        first_doc = json.load(f)
    # The spec holds the secret seed; the runner works in this folder, so the file goes first.
    os.unlink(args.spec or args.start)
    out = os.fdopen(args.result_fd, "w")
    try:
        first = StartSpec.from_dict(first_doc)
        PHASES.origin = first.spawned_at or PHASES.origin
        PHASES.mark("judge up")
        if first.lifeline_fd is not None:
            # kgit gone, however it went: this process and its group (the runner) go too.
            confine.watch_lifeline(first.lifeline_fd, own_group=True)
        if first.parent_pid and sys.platform.startswith("linux"):
            confine.die_with_parent(first.parent_pid)  # and at once, without waiting for the pipe
        if first.notice_fd is not None:
            PHASES.listener = _timing_notices(first.notice_fd)
        # A whole spec is checked before anything starts; a started pair's evaluation when it arrives.
        whole = Spec.from_dict(first_doc) if args.spec else None
        runner, torch, on_gpu = start(first, ahead=first.ahead)
        try:
            task = first_doc if args.spec else _receive_task(args.go_fd)
        except BaseException:
            runner.close()
            raise
        if task is None:
            runner.close()
            return 0
        PHASES.mark("candidate arrived")
        try:
            spec = whole or Spec.from_dict({**first_doc, **task})
            for key in ("candidate_dir", "problem_dir"):
                if getattr(spec, key) != getattr(first, key):
                    raise ValueError(f"the evaluation's {key} differs from the one the runner was started with")
        except BaseException:
            runner.close()
            raise
        doc = run_started(spec, runner, torch, on_gpu)
    except BaseException as e:  # noqa: BLE001 - report, then exit non-zero
        doc = result_mod.new("crash", error="harness failure:\n" + _excerpt(e))
    sys.stdout.flush()
    sys.stderr.flush()  # all of the judge's own output is in its pipes before the result
    out.write(json.dumps(result_mod.Result.from_dict(doc).to_dict()))
    out.flush()
    out.close()
    # Interpreter shutdown with torch loaded takes seconds and nothing needs it; kgit ends
    # the process group once the result is in anyway.
    os._exit(0)
