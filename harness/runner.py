"""The runner: the untrusted side of an evaluation, where the candidate's code runs.

Started by the judge as `python -I -B -m kgit_harness runner --channel-fd N --lifeline-fd M`
(wrapped in the sandbox prefix kgit chose), possibly before its candidate exists: it
confines itself with the paths it is sent, imports torch and triton, makes the device
context and says `ready`; the candidate's files and the task's facts come with `load`. It holds the candidate folder, the channel
and the task facts it needs (editable files, forbidden ops, the output index); never the
problem folder, the reference, the seeds, expected outputs or the result channel. It
confines itself, imports the candidate under the runtime guards and then calls it on
inputs the judge placed in shared memory, copying each returned tensor into the judge's
output buffer outside the timed region. Everything it reports is checked by the judge;
the guards here are defence in depth (docs/harness.md says what each still catches).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kgit_harness import (
    channel,
    confine,
    jitwarm,
    kernelsplit,
    portable,
    precompile,
    problem,
    shared,
    timing,
    torchflags,
)
from kgit_harness import targets as build_targets
from kgit_harness.guards import Guards

# Wall seconds all of a dry run's candidate calls may take (op_targets_dry): host code that
# is heavy at the GPU shapes' sizes costs that much at most, never the evaluation.
DRY_BUDGET_S = 60.0
# The most a request may ask the runner's allocator to hold free (Session._hold).
HOLD_MAX_BYTES = 16 << 30


class _Budget:
    """SIGALRM after `seconds`: an exception inside `call()` blocks, a flag outside them."""

    class Spent(BaseException):
        pass

    def __init__(self, seconds: float):
        self.seconds, self.expired, self.inside = seconds, False, False

    def __enter__(self):
        import signal

        def ring(signum, frame):
            self.expired = True
            if self.inside:
                raise _Budget.Spent()

        self._old = signal.signal(signal.SIGALRM, ring)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        import signal

        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old)
        return False

    @contextlib.contextmanager
    def call(self):
        self.inside = True
        try:
            yield
        finally:
            self.inside = False


class Verdict(Exception):
    """Ends a request with a failure the runner reports; the judge decides what it means."""

    def __init__(self, status, error, reason=None):
        super().__init__(error)
        self.status, self.error, self.reason = status, error, reason

    def message(self) -> dict:
        if self.status == "rejected":
            return {"op": "violation", "rule": self.reason or "rejected", "detail": self.error[:4000]}
        return {"op": "error", "status": self.status, "error": self.error[-4000:]}


def excerpt(exc: BaseException, limit: int = 4000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:]


def _is_compile_error(exc: BaseException) -> bool:
    if isinstance(exc, (SyntaxError, ImportError, NameError)):
        return True
    names = {cls.__module__ + "." + cls.__name__ for cls in type(exc).__mro__}
    return any("triton.compiler" in n or "CompilationError" in n for n in names)


class Candidate:
    """The candidate's kernel, called only through the runtime guards."""

    def __init__(self, kernel, guards, clock):
        self.kernel, self.guards, self.clock = kernel, guards, clock

    @contextlib.contextmanager
    def guarded(self):
        """Runtime guards armed around the block, the same for every call; a failure inside
        becomes a Verdict. Timing enters it before the start event (or clock) and leaves it
        after the end, so the guards' own Python never sits between the two."""
        try:
            with self.guards.armed():
                yield
        except Verdict:
            raise
        except BaseException as e:  # noqa: BLE001 - a failing kernel is a result, not a harness error
            self.verify()
            status = "compile-error" if _is_compile_error(e) else "runtime-error"
            raise Verdict(status, excerpt(e)) from None

    def verify(self, trap: bool = True):
        """After a call (outside any timed region): did a guard trip, or a timer change?

        `trap`: also see that the ATen trap is still in place (~0.1 ms; not after each
        back-to-back batch, whose overhead the judge's clock counts; the split's call after
        the last batch checks it).
        """
        self.guards.after_call(trap)
        if self.guards.violation:
            rule, detail = self.guards.violation
            raise Verdict("rejected", detail, reason=rule)
        changed = self.clock.tampered()
        if changed:
            raise Verdict("rejected", f"the candidate replaced {', '.join(changed)}", reason="patched timers")


def deliver(torch, out, target, buffer_given: bool = False, dtypes: list | None = None) -> str | None:
    """Copy what the kernel returned into the judge's buffer; why it cannot be, or None.

    `buffer_given`: the target is the problem's own preallocated output (task.yml's
    `output`), whose shape may differ from the reference's result by dimensions of size 1
    (GPU MODE's vectorsum gives a (1,) buffer and its reference returns a 0-d sum, so
    its baseline returns `output[0]`): a result that differs from it only so is copied in.
    Where the buffer is the judge's, shaped like the reference's result, a result of a
    narrower dtype (float32 where the reference returns float64: GPU MODE's prefixsum) is
    widened into it exactly, and its dtype appended to `dtypes` (None where it matched), so
    that the judge checks it as the kernel returned it, as upstream's check does.
    """
    if isinstance(target, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(target):
            return f"expected a sequence of {len(target)} outputs, got {type(out).__name__}"
        for i, (o, t) in enumerate(zip(out, target)):
            why = deliver(torch, o, t, buffer_given, dtypes)
            if why:
                return f"output {i}: {why}"
        return None
    if not isinstance(out, torch.Tensor):
        return f"expected a tensor, got {type(out).__name__}"
    if type(out) is not torch.Tensor:
        # A subclass can compute its values when they are read, after timing ended.
        return f"returned a {type(out).__name__}, a torch.Tensor subclass; return a plain tensor"
    if out.shape != target.shape and buffer_given and problem.same_but_unit_dims(out.shape, target.shape):
        out = out.reshape(target.shape)
    if out.shape != target.shape:
        return f"shape {tuple(out.shape)} != expected {tuple(target.shape)}"
    if out.dtype != target.dtype and (buffer_given or not shared.widens(torch, out.dtype, target.dtype)):
        return f"dtype {out.dtype} != expected {target.dtype}"
    if out.device != target.device:
        return f"device {out.device} != expected {target.device}"
    if dtypes is not None:
        dtypes.append(str(out.dtype).removeprefix("torch.") if out.dtype != target.dtype else None)
    same = out.data_ptr() == target.data_ptr() and out.stride() == target.stride() and out.dtype == target.dtype
    if not same:
        target.copy_(out)
    return None


def _cast(dtypes: list) -> list | None:
    """The dtypes outputs were widened from (None for each that matched), or None when none was."""
    return dtypes if any(dtypes) else None


class Session:
    """Serves the judge's requests until it says bye or the channel closes."""

    def __init__(self, sock, setup: dict, torch, on_gpu: bool):
        self.sock, self.setup, self.torch, self.on_gpu = sock, setup, torch, on_gpu
        self.output = setup.get("output")
        self.shapes: dict = {}
        # Arenas kept mapped, with their views, after the judge forgets them, on the CPU only:
        # an address or object once handed to the kernel is then never handed out again in
        # this evaluation (a GPU's arenas are too large to keep; see docs/harness.md).
        self.retired: list = []
        self.candidate: Candidate | None = None
        self.split: kernelsplit.Session | None = None
        self.rid = None  # the request being served: every message about it carries its id
        self.after: Callable[..., Any] | None = None  # checks to run once the reply is sent (see serve)
        self.bye = False  # the judge ended the session (rather than the channel closing)
        self._own = torch.zeros(1, dtype=torch.int32, device="cuda") if on_gpu else None

    def serve(self) -> int:
        while True:
            try:
                message, fds = channel.recv(self.sock, accept_fds=True)
            except channel.Closed:
                return 0
            op = message["op"]
            if op == "bye":
                self.bye = True
                return 0
            self.rid, self.after = message.get("rid"), None
            try:
                reply = getattr(self, "op_" + op)(message, fds)
            except Verdict as v:
                reply = v.message()
                self.after = None
            self.tell(reply)
            if self.after is not None:
                # The runner's own checks of a call (guards, timers, threads), after its
                # reply: outside whatever the judge's clock measures, so skipping them
                # would gain a runner nothing. The judge reads this second message before
                # its next request.
                try:
                    self.after()
                    second = {"op": "checked"}
                except Verdict as v:
                    second = v.message()
                self.tell(second)

    def tell(self, message: dict):
        channel.send(self.sock, {**message, "rid": self.rid})

    def report(self, rule: str, detail: str):
        """A guard tripped: the judge hears it now, before the candidate can do anything more."""
        self.tell({"op": "violation", "rule": rule, "detail": detail[:4000]})

    # -- requests ------------------------------------------------------------------
    def op_load(self, message, fds) -> dict:
        # The task's facts come with the candidate: a runner started ahead of need had only paths.
        self.setup.update({k: message[k] for k in ("files", "forbidden", "output") if k in message})
        self.output = self.setup.get("output")
        torch, setup = self.torch, self.setup
        candidate_dir = Path(setup["candidate_dir"])
        guards = Guards(torch, list(setup.get("forbidden") or []), None, report=self.report)
        clock = timing.Clock(torch, self.on_gpu)
        guards.snapshot_threads()
        # The backend settings the reference ran under (TF32 off, deterministic algorithms):
        # upstream harnesses run both in one process, so its kernels were judged under them.
        torchflags.apply(torch, message.get("torch_settings") or {})
        if setup.get("helpers_dir") and message.get("helpers"):
            sys.path.insert(0, str(setup["helpers_dir"]))  # the problem's helpers the judge copied
        sys.path.insert(0, str(candidate_dir))
        try:
            with guards.armed():
                loaded = problem.load_module(candidate_dir / setup["files"][0], "kernel_under_test")
        except BaseException as e:  # noqa: BLE001 - anything the import does is the candidate's failure
            if guards.violation:
                raise Verdict("rejected", guards.violation[1], reason=guards.violation[0]) from None
            raise Verdict("compile-error", excerpt(e)) from None
        kernel = getattr(loaded, "custom_kernel", None)
        if not callable(kernel):
            raise Verdict("compile-error", f"{setup['files'][0]} defines no custom_kernel(data) function")
        self.candidate = Candidate(kernel, guards, clock)
        self.candidate.verify()
        return {"op": "done"}

    def op_ping(self, message, fds) -> dict:
        """The judge's measure of a bare round trip, taken before the candidate is imported."""
        self._sync(own=True)
        return {"op": "done"}

    def op_shape(self, message, fds) -> dict:
        arena, keep = shared.attach(self.torch, message["arena"], fds)
        slots = []
        for slot in message["slots"]:
            data = shared.view(self.torch, arena, slot["input"])
            out = shared.view(self.torch, arena, slot["output"]) if slot.get("output") else None
            slots.append((data, out))
        self.shapes[message["id"]] = (slots, arena, keep)
        return {"op": "done"}

    def op_forget(self, message, fds) -> dict:
        gone = self.shapes.pop(message["id"], None)
        if gone is not None and not self.on_gpu:
            self.retired.append(gone)  # the views too: no later tensor takes one of their id()s
        return {"op": "done"}

    def _target(self, data, out):
        return out if out is not None else problem.pick_output(data, self.output)

    def op_call(self, message, fds) -> dict:
        """One call: untimed, or timed by the clock the judge names (`clock`: events or wall)."""
        slots = self.shapes[message["id"]][0]
        data, out_buffer = slots[int(message["slot"])]
        cand = self.candidate
        sizes = self._hold_sizes(message.get("hold"))
        if message.get("empty"):
            # The judge's measure of its own round trip: everything but the kernel. No call ran,
            # so the ATen trap (~0.1 ms) is seen again after the next one, which is.
            self.after = lambda: cand.verify(trap=False)
            self._hold(sizes)
            self._sync(own=True)
            return {"op": "done", "us": 0.0, "host_us": 0.0, "output": None}

        def after():
            cand.verify()
            # After the reply, outside both clocks: the allocator's state for the next call.
            self._hold(sizes)

        self.after = after
        clock = message.get("clock")
        if clock in ("events", "wall"):
            out, us, host_us = cand.clock.time_call(lambda: cand.kernel(data), cand.guarded(), clock=clock,
                                                    flush=bool(message.get("flush", True)))
        else:
            with cand.guarded():
                out = cand.kernel(data)
            us = host_us = 0.0
        copied = cand.clock.perf_counter()
        dtypes: list = []
        why = deliver(self.torch, out, self._target(data, out_buffer), out_buffer is None, dtypes)
        if clock:
            # Back-to-back calls pay for the copy-out too: part of the host time the judge allows.
            host_us += (cand.clock.perf_counter() - copied) * 1e6
        self._sync()
        return {"op": "done", "us": us, "host_us": host_us, "output": why, "dtypes": _cast(dtypes)}

    def op_batch(self, message, fds) -> dict:
        """Back-to-back calls ended by a device-wide synchronize; `timed`: after an L2 flush,
        between one pair of events, the figure a call being the pair's time over the calls."""
        slots = self.shapes[message["id"]][0]
        chosen = [slots[int(i)] for i in message["slots"]]
        cand = self.candidate
        clock = cand.clock
        self.after = lambda: cand.verify(trap=False)
        results = []
        timed = bool(message.get("timed")) and self.on_gpu
        if timed:
            self._sync()
            clock.flush.zero_()
            clock.hold_gpu()
        started = clock.perf_counter()
        if self.on_gpu:
            clock.start.record()
        if not message.get("empty"):
            with cand.guarded():
                for data, _ in chosen:
                    results.append(cand.kernel(data))
        launched = clock.perf_counter()
        if timed:
            clock.end.record()
        casts: list[list] = [[] for _ in chosen]
        whys = [deliver(self.torch, out, self._target(data, buf), buf is None, cast)
                for out, (data, buf), cast in zip(results, chosen, casts)]
        if self.on_gpu and not timed:
            clock.end.record()
        # Host time of the launches and copy-outs, before the wait: work the GPU still has
        # to do after them (a side stream, escaped work) is not in it.
        delivered = clock.perf_counter()
        self._sync()
        if timed:
            clock.host_us = (launched - started) * 1e6
        # Diagnostics (benchmarks/harness_fidelity.py prints them; nothing ranks on them) and,
        # `timed`, the events over the calls alone.
        span_us = clock.start.elapsed_time(clock.end) * 1e3 if self.on_gpu else 0.0
        return {"op": "done", "output": next((w for w in whys if w), None), "dtypes": [_cast(c) for c in casts],
                "host_us": (delivered - started) * 1e6,
                "launch_us": (launched - started) * 1e6, "span_us": span_us,
                "served_us": (clock.perf_counter() - started) * 1e6}

    # The judge brackets the per-kernel split's calls (harness/kernelsplit.py) with these:
    # one profiler session for all the shapes, asked for only after every shape is timed.
    def op_kernels_start(self, message, fds) -> dict:
        marker = None
        if self.on_gpu and hasattr(self.torch.cuda, "_sleep"):
            marker = lambda: self.torch.cuda._sleep(1)  # noqa: E731 - kernelsplit.MARKER_KERNEL
        self.split = kernelsplit.Session(self.torch, self._sync, marker=marker) if self.on_gpu else None
        if self.split is not None:
            self.split.start()
        return {"op": "done"}

    def op_kernels(self, message, fds) -> dict:
        """One more call, untimed, in the split's session. The output is not delivered (the
        judge checked this shape's outputs already) and the rows never rank anything."""
        if self.split is None:
            return {"op": "done"}
        data, _ = self.shapes[message["id"]][0][int(message["slot"])]
        cand = self.candidate

        def call():
            with cand.guarded():
                cand.kernel(data)

        self.split.call(call)
        self.after = cand.verify
        return {"op": "done"}

    def op_kernels_stop(self, message, fds) -> dict:
        if self.split is None:
            return {"op": "done", "splits": None, "why": "no device kernels in the CPU interpreter"}
        splits, self.split = self.split.stop(), None
        return {"op": "done", "splits": [{"kernels": rows, "why": why} for rows, why in splits]}

    def op_precompile(self, message, fds) -> dict:
        """Before the checks, on a GPU: the candidate's Triton launches on the shapes laid out in
        `shapes` compiled side by side for this device (harness/precompile.py). A report the
        judge only records; the checks compile whatever it missed."""
        if not self.on_gpu or self.candidate is None:
            return {"op": "done", "precompile": None}
        inputs = [self._laid_out(item) for item in message["shapes"]]
        try:
            report = precompile.compile_ahead(self.candidate.kernel, inputs)
        except Exception as e:  # noqa: BLE001 - a speed-up that failed: the checks compile as before
            report = {"error": f"{type(e).__name__}: {e}"[:300]}
        return {"op": "done", "precompile": report}

    # [build targets] The judge brackets its checks with these: the runner captures
    # the candidate's Triton launches and cross-compiles them (candidate-reported facts).
    def op_targets_start(self, message, fds) -> dict:
        self.capture = build_targets.capture()
        self.launches = self.capture.__enter__()
        return {"op": "done"}

    def op_targets_build(self, message, fds) -> dict:
        self.capture.__exit__(None, None, None)
        self.build = build_targets.start_build(self.launches, list(message["names"]))
        return {"op": "done"}

    def op_targets_collect(self, message, fds) -> dict:
        wait = message.get("wait", True)
        if not isinstance(wait, bool):
            raise channel.ChannelError("'targets_collect' message: 'wait' must be true or false")
        self.facts = self.build.finish(wait) if getattr(self, "build", None) else None
        return {"op": "done", "targets": self.facts}

    def op_targets_dry(self, message, fds) -> dict:
        """After timing, in the interpreter: the GPU shapes' Triton launches captured without
        running them (inputs laid out as the judge says, never filled), and the variants the
        checks did not launch compiled for the targets; the checks' facts merged with them.

        The calls get DRY_BUDGET_S in all; what does not finish in time or fails is reported,
        and what was captured before it still counts.
        """
        facts = getattr(self, "facts", None)
        if facts is None or self.on_gpu:
            return {"op": "done", "targets": None}
        cand = self.candidate
        report: dict[str, Any] = {"captured": [], "failed": {}, "skipped": dict(message.get("skipped") or {})}
        budget = _Budget(DRY_BUDGET_S)
        with build_targets.capture(known=getattr(self, "launches", None)) as launches, budget:
            for item in message["shapes"]:
                key = str(item["key"])
                if budget.expired:
                    report["failed"][key] = f"not run: the dry run's {DRY_BUDGET_S:g} s were spent"
                    continue
                data = self._laid_out(item)
                try:
                    with build_targets.dry(), budget.call():
                        with cand.guarded():
                            cand.kernel(data)
                    report["captured"].append(key)
                except _Budget.Spent:  # rang between the guards and the end of the block
                    report["failed"][key] = f"ran past the dry run's {DRY_BUDGET_S:g} s"
                except Verdict as v:
                    if v.status == "rejected":
                        raise
                    why = ((v.error or "").strip().splitlines() or [v.status])[-1]
                    report["failed"][key] = (f"ran past the dry run's {DRY_BUDGET_S:g} s" if budget.expired
                                             else why)[:200]
                del data
        cand.verify()
        extra = build_targets.build_facts(launches, list(facts.get("results") or {})) if launches.variants else {}
        self.facts = build_targets.merge(facts, extra, report)
        return {"op": "done", "targets": self.facts}
    # [end build targets]

    def _laid_out(self, item: dict):
        """CPU tensors in the layout the judge sent (`layout`, `size` bytes), never filled: a dry run's inputs."""
        torch = self.torch
        return shared.view(torch, torch.empty(int(item["size"]), dtype=torch.uint8), item["layout"])

    @staticmethod
    def _hold_sizes(sizes) -> list[int]:
        """A request's `hold`, checked: a list of block sizes within HOLD_MAX_BYTES in all."""
        if sizes is None:
            return []
        if not isinstance(sizes, list) or not all(type(n) is int and 0 < n <= HOLD_MAX_BYTES for n in sizes) \
                or sum(sizes) > HOLD_MAX_BYTES:
            raise channel.ChannelError(f"'call' message: 'hold' must be a list of sizes within {HOLD_MAX_BYTES} bytes")
        return sizes

    def _hold(self, sizes: list[int]) -> None:
        """Take blocks of `sizes` bytes from the caching allocator and give them back: it then holds
        them free, as the allocator of an evaluator that makes its inputs in the timing process
        does when a call starts (timing.free_segments). Where memory is short, fewer."""
        if not self.on_gpu or not sizes:
            return
        held = []
        try:
            for size in sizes:
                held.append(self.torch.empty(size, dtype=self.torch.uint8, device="cuda"))
        except self.torch.OutOfMemoryError:
            pass
        del held

    def _sync(self, own: bool = False):
        """Wait for the device; `own`: after a one-element op of the runner's, as a wall-clock
        call starts (timing.Clock.time_call), so that an empty request pays the GPU's switch
        from the judge's context to the runner's as a timed call does."""
        if self.on_gpu:
            if own:
                self._own.zero_()
            self.torch.cuda.synchronize()


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kgit_harness runner")
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--lifeline-fd", type=int)
    args = parser.parse_args(argv)
    marks = {"runner up": time.monotonic()}  # python and the harness imported (harness/phases.py)
    sock = socket.socket(fileno=args.channel_fd)
    setup, _ = channel.recv(sock)
    channel.expect(setup, "setup")
    # A segfault or abort then leaves the Python stack in stderr: the excerpt the writer sees.
    faulthandler.enable()
    # The folders the view keeps (the candidate, the problem helpers the judge copied)
    # and the problem folder it hides: paths only, the runner reads none of the problem.
    report = confine.apply({"sandbox": setup.get("sandbox") or {}, "lifeline_fd": args.lifeline_fd,
                            "candidate_dir": setup.get("candidate_dir"), "helpers_dir": setup.get("helpers_dir"),
                            "problem_dir": setup.get("problem_dir")})
    marks["runner confined"] = time.monotonic()
    import torch

    marks["runner torch imported"] = time.monotonic()
    portable.quiet_torch_compile()  # before any candidate code: torch's own threads are not the kernel's
    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        # Must be set before triton.jit decorates anything in the candidate.
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        # Imported now, not by the candidate: a runner started ahead of need has it ready.
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except ImportError:
        pass
    marks["runner triton imported"] = time.monotonic()
    rid = setup.get("rid")
    if on_gpu and setup.get("warm_profiler"):
        # A pair started ahead of need loads the profiler now, off the critical path, rather
        # than when the per-kernel split first asks for it (kernelsplit.warm_up: CPU work only,
        # so it goes on before the gate).
        kernelsplit.warm_up(torch)
    marks["runner profiler ready"] = time.monotonic()
    warm_jit = on_gpu and setup.get("warm_jit")
    if warm_jit:
        jitwarm.before_device()  # host work: before the gate, as the imports
    marks["runner jit helper ready"] = time.monotonic()
    if setup.get("gated"):
        # Started ahead of need: the device context waits until kgit opens the pair's gate
        # (never beside another evaluation's timed loop on this GPU); the judge passes it on.
        # kgit opens it only once both processes wait at it, so that what follows the
        # opening is the two contexts and nothing slower.
        channel.send(sock, {"op": "at gate", "rid": rid})
        device, _ = channel.recv(sock)
        channel.expect(device, "device")
        rid = device.get("rid")  # `ready` answers the judge's last request
    marks["runner gate opened"] = time.monotonic()
    if on_gpu:
        torch.empty(1, device="cuda")  # the device context, before the candidate arrives
    marks["runner device ready"] = time.monotonic()
    if warm_jit:
        jitwarm.after_device(torch)
    marks["runner jit warmed"] = time.monotonic()
    marks["runner ready"] = time.monotonic()
    channel.send(sock, {"op": "ready", "confine": report, "on_gpu": on_gpu, "marks": marks, "rid": rid})
    session = Session(sock, setup, torch, on_gpu)
    code = session.serve()
    # Interpreter shutdown with torch and triton loaded takes up to seconds, and nothing
    # here needs it: the judge has every answer already.
    sys.stdout.flush()
    sys.stderr.flush()
    if session.bye:
        # The judge goes on once told, not once this process is gone (the end of a process with
        # a device context takes its time), and kgit reads the output pipes until the judge's
        # end: let go of first, they no longer wait for this one's.
        _let_go_of_output()
        try:
            channel.send(sock, {"op": "bye", "rid": None})
        except OSError:
            pass
    os._exit(code)


def _let_go_of_output() -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)
