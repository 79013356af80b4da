"""Runtime guards around every call into candidate code.

The static policy reads the source; these watch what the code does, which catches
what a source check cannot see (names built from strings, objects found through gc):

- the problem's forbidden library ops, at the ATen ops they lower to (so aliases such as
  `torch._softmax`, `torch.ops.aten._softmax` or `torch.linalg.matmul` are caught too):
  a trap registered for those ops at a dispatch key the runner includes for the calling
  thread around every call (`trap_key`), the same in every call, checked and timed
  alike. A key included that way is passed by every dispatch of the thread, whatever
  sits below it: inference mode, a dispatch below autograd, a custom op's own body and
  torch.compile's traces all reach it. Only for names with no ATen op found, a
  TorchFunctionMode (the Python names), also in every call;
- calls into the reference, through tripwires swapped into its functions;
- threads started by the candidate (work deferred past the end of a timed call), gc
  object hunting and network access, through an audit hook (sys.addaudithook: the
  interpreter reports these events however they are reached, and a hook cannot be
  removed); plus a check for threads left running;
- a CUDA stream switched and not restored.

These are policy, not security: code in the same process can undo any of them (the
sandbox, the judge/runner boundary and the judge's static read of the source are what
hold against that). A guard that trips reports the violation to the judge at once,
through the `report` callable the runner gives (its channel), so nothing the candidate
does afterwards takes it back; it is also kept in a flag the candidate cannot catch away
(it may swallow the exception, not the record).
"""

from __future__ import annotations

import sys
import threading
import types
import warnings

# Audit events that no kernel call has a reason to raise. Process spawning and file
# access are left to the sandbox: Triton runs ptxas and writes its cache mid-call.
AUDITED = {
    "_thread.start_new_thread": "threads started by the kernel",  # raised from Python 3.13 on
    "gc.get_objects": "object hunting through gc", "gc.get_referrers": "object hunting through gc",
    "gc.get_referents": "object hunting through gc",
    "socket.connect": "network access", "socket.bind": "network access",
}
_armed = [None]  # the Guards whose candidate code is running, if any
_hook_installed = [False]


def _audit(event, args):
    guards = _armed[0]
    if guards is not None and event in AUDITED:
        guards.trip(AUDITED[event], f"the kernel raised the audit event {event}")


class Tripped(BaseException):
    """Raised into candidate code when a guard trips; BaseException so `except Exception` misses it."""


class Guards:
    def __init__(self, torch, forbidden: list[str], reference: types.ModuleType | None, report=None):
        self.torch = torch
        self.violation: tuple[str, str] | None = None
        self._report = report
        bases = aten_bases(torch, forbidden)
        self._aten = _by_base(bases)
        # The Python-name guard only for names the ATen guard cannot see (no ATen op
        # found for them): every tensor method a Triton launcher reads (data_ptr, dtype,
        # stride) passes through a TorchFunctionMode, which made a guarded launch cost
        # 100+ us on the host (benchmarks/runner_overhead.py), while a name that lowers
        # to a forbidden ATen op is caught below, aliases included.
        self._ops = _resolve([name for name, found in bases.items() if not found])
        self._mode = _op_mode(torch, self) if self._ops else None
        # The trap costs the ops it does not watch nothing (a fallthrough), unlike a
        # TorchDispatchMode, which sent every op of a call through Python (the fp8
        # campaign's best wrapper: 168 us a call on the H200 host under it, 111 us bare).
        self._key = trap_key(torch) if self._aten else None
        if self._aten and not _trap(torch, self._aten, self._key):
            self._key = None  # an op that could not be trapped: the mode-free guard is incomplete
            self._ops = {**self._ops, **_resolve(list(bases))}
            self._mode = _op_mode(torch, self)
        _current[0] = self
        self._trap_kernels = _trap_kernels(torch, [q for q, base in _trapped.items() if base in self._aten],
                                           self._key)
        self._threads: set = set()
        self._stream = None
        self._tripwire = _Tripwire(reference, self) if reference is not None else None
        if not _hook_installed[0]:
            sys.addaudithook(_audit)
            _guard_thread_start()
            _hook_installed[0] = True

    def trip(self, rule: str, detail: str):
        self.record(rule, detail)
        raise Tripped(rule)

    def record(self, rule: str, detail: str):
        """Keep the first violation, and tell the judge at once."""
        if self.violation is None:
            self.violation = (rule, detail)
            if self._report is not None:
                self._report(rule, detail)

    def snapshot_threads(self):
        """Threads alive now are the harness's; any later one is the candidate's."""
        self._threads = {t.ident for t in threading.enumerate()}

    def armed(self):
        """Context manager: the guards that watch a candidate call (or its import); the same
        for every kind of call, so nothing in them tells a timed call from a checked one."""
        return _Armed(self)

    def reference_call(self, fn, *args, **kwargs):
        """Run a reference function with its real code; tripwires everywhere else."""
        if _armed[0] is not None:
            # The candidate found the harness's own handle on the reference (through frames).
            self.trip("calling the reference", "the kernel called the reference through the harness's handle")
        if self._tripwire is None:
            return fn(*args, **kwargs)
        with self._tripwire.disarmed():
            return fn(*args, **kwargs)

    def arm_reference(self):
        if self._tripwire is not None:
            self._tripwire.arm()

    def reference_proxy(self, module):
        """An object with the reference's functions, each run through reference_call."""
        return _ReferenceProxy(module, self)

    def after_call(self, trap: bool = True):
        """The checks too slow to run inside a timed call: new threads, a switched stream,
        and (`trap`; ~0.1 ms, so not after each back-to-back batch) the ATen trap in place."""
        if trap and self.violation is None and self._trap_kernels and \
                _trap_kernels(self.torch, set(self._trap_kernels), self._key) != self._trap_kernels:
            self.record("op guard removed", "the kernel replaced the harness's kernels of the forbidden ATen ops")
        new = [t for t in threading.enumerate() if t.ident not in self._threads and t.is_alive()]
        if new and self.violation is None:
            self.record("threads started by the kernel",
                        f"the kernel left {len(new)} thread(s) running: {', '.join(t.name for t in new)[:200]}")
        if self._stream is not None and self.violation is None:
            now = self.torch.cuda.current_stream()
            if now != self._stream:
                self.record("side streams", "the kernel switched the current CUDA stream and did not restore it")


def _guard_thread_start():
    """Before Python 3.13 starting a thread raises no audit event: wrap the one primitive
    every Python thread starts through, before any candidate code can keep the original."""
    import _thread

    original = _thread.start_new_thread

    def start_new_thread(*args, **kwargs):
        guards = _armed[0]
        if guards is not None:
            guards.trip("threads started by the kernel", "the kernel started a thread")
        return original(*args, **kwargs)

    _thread.start_new_thread = _thread.start_new = start_new_thread
    threading._start_new_thread = start_new_thread


class _Armed:
    def __init__(self, guards):
        self.g = guards

    def __enter__(self):
        g = self.g
        if g.torch.cuda.is_available():
            g._stream = g.torch.cuda.current_stream()
        if g._key is not None:
            _include(g.torch, g._key, True)
        if g._mode is not None:
            g._mode.__enter__()
        _armed[0] = g
        return g

    def __exit__(self, *exc):
        g = self.g
        _armed[0] = None
        if g._mode is not None:
            C = g.torch._C
            n = C._len_torch_function_stack()
            if n > 0 and C._get_function_stack_at(n - 1) is g._mode:
                g._mode.__exit__(*exc)
            elif g.violation is None:
                g.record("op guard removed", "the kernel removed the harness's TorchFunctionMode")
        if g._key is not None:
            C = g.torch._C
            intact = C._dispatch_tls_is_dispatch_key_included(g._key) and \
                not C._dispatch_tls_is_dispatch_key_excluded(g._key)
            _include(g.torch, g._key, False)
            if not intact and g.violation is None:
                g.record("op guard removed", "the kernel took the harness's dispatch key off its thread")
        return False


class _ReferenceProxy:
    def __init__(self, module, guards):
        self._module, self._guards = module, guards

    def __getattr__(self, name):
        fn = getattr(self._module, name)
        if not callable(fn):
            return fn
        return lambda *args, **kwargs: self._guards.reference_call(fn, *args, **kwargs)


def _resolve(names: list[str]) -> dict:
    """Map each forbidden dotted name (e.g. torch.Tensor.add) to the object a call passes to __torch_function__."""
    import importlib

    found = {}
    for name in names:
        parts = name.split(".")
        obj = None
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr, None)
            break
        if obj is not None:
            found[obj] = name
    return found


def _op_mode(torch, guards):
    from torch.overrides import TorchFunctionMode

    ops = guards._ops

    class ForbiddenOps(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = ops.get(func) if _hashable(func) else None
            if name is not None:
                guards.trip(f"forbidden by the problem: {name}", f"the kernel called {name} at run time")
            return func(*args, **(kwargs or {}))

    return ForbiddenOps()


# The ATen ops a forbidden name lowers to, by the name's last part. A family is
# forbidden whole: torch.matmul on 3-D inputs becomes bmm, with a bias addmm, so
# forbidding "a matmul" means every matrix-product op. Names not listed here are
# traced once (called on a small tensor under a recording mode).
_MATRIX_PRODUCTS = frozenset({"mm", "bmm", "addmm", "addbmm", "baddbmm", "mv", "addmv", "dot", "vdot", "matmul",
                              "_scaled_mm", "_int_mm", "linear", "_addmm_activation"})
ATEN_FAMILIES = {
    **dict.fromkeys(("matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum", "tensordot", "linear", "_scaled_mm", "mv", "dot", "inner"), _MATRIX_PRODUCTS),
    "softmax": frozenset({"softmax", "_softmax", "_safe_softmax"}),
    "log_softmax": frozenset({"log_softmax", "_log_softmax"}),
}
# Ops that only rearrange or allocate; a traced call that shows them forbids nothing by them.
_PLUMBING = frozenset({"view", "_unsafe_view", "reshape", "expand", "permute", "t", "transpose", "select", "slice",
                       "unsqueeze", "squeeze", "clone", "contiguous", "detach", "alias", "as_strided", "copy",
                       "_to_copy", "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "fill", "lift_fresh"})


def aten_base(func) -> str:
    """"aten::add_.Tensor" -> "add": the op's name without namespace, overload or in-place mark."""
    name = func._schema.name.split("::", 1)[-1]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def aten_ops(torch, forbidden: list[str]) -> dict:
    """{ATen base name: the forbidden name it stands for} for the problem's forbidden names."""
    return _by_base(aten_bases(torch, forbidden))


def _by_base(bases: dict) -> dict:
    found: dict = {}
    for name, names in bases.items():
        for base in names:
            found.setdefault(base, name)  # the first forbidden name that lowers to it
    return found


def aten_bases(torch, forbidden: list[str]) -> dict:
    """{forbidden name: the ATen base names it lowers to} (an empty set: none found)."""
    found = {}
    for name in forbidden:
        last = name.rsplit(".", 1)[-1]
        found[name] = set(ATEN_FAMILIES.get(last) or ATEN_FAMILIES.get(last.rstrip("_")) or _trace(torch, name))
    return found


def _trace(torch, name: str) -> set:
    """The non-plumbing ATen ops one call of `name` reaches, on small CPU tensors."""
    from torch.utils._python_dispatch import TorchDispatchMode

    fn = next(iter(_resolve([name])), None)
    if fn is None or not callable(fn) or not _takes_tensors(torch, name):
        return set()  # not a tensor op (a config call, a stream): nothing to trace, nothing to call
    seen = set()

    @_without_dynamo_import
    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(aten_base(func))
            return func(*args, **(kwargs or {}))

    x = torch.ones(4, 4)
    for args in ((x, x), (x, -1), (x,)):
        seen.clear()
        try:
            with Recorder():
                fn(*args)
        except Exception:  # noqa: BLE001 - a signature that does not fit; try the next one
            continue
        ops = seen - _PLUMBING
        if ops:
            return ops
    return set()


def _without_dynamo_import(mode_cls):
    """Spare the first dispatch the import of torch._dynamo (seconds on a loaded CPU host).

    torch wraps every TorchDispatchMode's __torch_dispatch__ so that dynamo never traces
    it, importing torch._dynamo at the first call to do so. Until something else (a
    candidate's torch.compile) has imported dynamo there is nothing to keep out, so the
    plain function runs; afterwards the wrapper gets dynamo's real `disable` as usual.
    """
    raw = getattr(mode_cls.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if raw is None:
        return mode_cls  # a torch without the lazy wrapper: nothing to spare

    def call(*args, **kwargs):
        if "torch._dynamo" in sys.modules:
            import torch._dynamo

            disabled = torch._dynamo.disable(raw)
            setattr(raw, "__dynamo_disable", disabled)
            return disabled(*args, **kwargs)
        return raw(*args, **kwargs)

    setattr(raw, "__dynamo_disable", call)
    return mode_cls


# Namespaces of tensor ops: only names in these are traced by calling them.
_TENSOR_OP_PREFIXES = ("torch.Tensor.", "torch.nn.functional.", "torch.linalg.", "torch.special.", "torch.fft.")


def _takes_tensors(torch, name: str) -> bool:
    """Is `name` a tensor op (safe to call on a small tensor), not a config call or a stream?"""
    if name.startswith(_TENSOR_OP_PREFIXES):
        return True
    head, _, last = name.rpartition(".")
    return head == "torch" and hasattr(torch._C._VariableFunctions, last)


# The process's ATen trap: one registration per op, shared by every Guards (the tests build
# several in one process), reporting to the newest.
_trapped: dict = {}  # "aten::mm.out" -> the forbidden base it belongs to
_trap_lib: list = []
_current: list[Guards | None] = [None]  # the Guards the trap reports to
# Dispatch keys the trap may sit at, in order of preference: each is passed by every dispatch
# of a thread that includes it, above autograd, and sees no use in the runner otherwise.
# AutocastPrivateUse1 is autocast's key for an out-of-tree backend (none is loaded);
# PreDispatch is export's pre-dispatch tracing key.
_KEY_CHOICES = ("AutocastPrivateUse1", "PreDispatch")


def trap_key(torch):
    """The dispatch key the trap sits at: the first of _KEY_CHOICES with no kernels of its own,
    given a fallthrough for every op so that an included key costs the other ops nothing."""
    C = torch._C
    for name in _KEY_CHOICES:
        key = getattr(C.DispatchKey, name, None)
        if key is None:
            continue
        mine = set(_trapped)
        if set(C._dispatch_get_registrations_for_dispatch_key(name)) - mine:
            continue
        if not C._dispatch_has_backend_fallback(key):
            lib = torch.library.Library("_", "IMPL")
            lib.fallback(torch.library.fallthrough_kernel, name)
            _trap_lib.append(lib)
        return key
    raise RuntimeError("no dispatch key for the op trap: this torch has none of " + ", ".join(_KEY_CHOICES))


def _include(torch, key, on: bool):
    C = torch._C
    C._dispatch_tls_set_dispatch_key_included(key, on)
    if on:
        C._dispatch_tls_set_dispatch_key_excluded(key, False)


def _trap(torch, bases: dict, key) -> bool:
    """Register the trap for these ATen bases' ops at `key`; False if one could not be registered.

    Every dispatch passes the key while the runner includes it for the thread, whatever the
    Python name or alias that reached the op and whatever runs below it; the trap reports
    and raises, so a forbidden op never runs inside a call. Outside the calls the key is not
    included and the ops run as they always do.
    """
    lib = torch.library.Library("aten", "IMPL")
    _trap_lib.append(lib)
    name = torch._C._dispatch_key_name(key)
    whole = True
    for base in bases:
        for packet_name in (base, base + "_"):
            packet = getattr(torch.ops.aten, packet_name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                qual = packet_name if overload == "default" else f"{packet_name}.{overload}"
                # TorchScript's scalar overloads (add.int, add.t) are not the dispatcher's.
                if f"aten::{qual}" in _trapped or not torch._C._dispatch_has_kernel(f"aten::{qual}"):
                    continue
                op = getattr(packet, overload)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        lib.impl(qual, _trap_kernel(torch, op, base, key), name, with_keyset=True)
                except (RuntimeError, ValueError):
                    whole = False
                    continue
                _trapped[f"aten::{qual}"] = base
    return whole


def _trap_kernel(torch, op, base, key):
    schema = op._schema.name
    below = torch._C._dispatch_keyset_full_after(key)

    def kernel(keyset, *args, **kwargs):
        guards = _current[0]
        name = guards._aten.get(base) if guards is not None else None
        if name is not None:
            guards.trip(f"forbidden by the problem: {name}",
                        f"the kernel reached {name} at run time, as the ATen op {schema}")
        # An op the newest Guards does not forbid (another problem's, in one test process).
        return op.redispatch(keyset & below, *args, **kwargs)

    return kernel


def _trap_kernels(torch, quals, key) -> dict:
    """{op: what the dispatcher runs at the trap's key}, to see that no one registered over the trap."""
    lookup = getattr(torch._C, "_dispatch_get_computed_kernel_for_dispatch_key", None)
    if lookup is None or key is None:
        return {}
    return {qual: str(lookup(qual, key)) for qual in quals}


def _hashable(obj) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


_TRIP_SOURCE = """
def _kgit_tripwire(*args, **kwargs):
    _kgit_tripped()
"""


class _Tripwire:
    """Swap every function of the reference module for a tripwire while candidate code may run.

    A candidate that digs the reference's functions out of gc finds objects whose code
    is the tripwire; the real code is put back only while the harness calls them.
    """

    def __init__(self, module, guards):
        self.functions = [f for f in vars(module).values()
                          if isinstance(f, types.FunctionType) and f.__module__ == module.__name__ and not f.__code__.co_freevars]
        self.real = {f: f.__code__ for f in self.functions}
        namespace = {}
        exec(compile(_TRIP_SOURCE, "<kgit tripwire>", "exec"), namespace)
        self.trip_code = namespace["_kgit_tripwire"].__code__

        def tripped():
            guards.trip("calling the reference", "the kernel called a function of the problem's reference")

        vars(module)["_kgit_tripped"] = tripped
        self.depth = 0

    def arm(self):
        for f in self.functions:
            f.__code__ = self.trip_code

    def disarmed(self):
        return _Disarmed(self)


class _Disarmed:
    def __init__(self, wire):
        self.w = wire

    def __enter__(self):
        if self.w.depth == 0:
            for f, code in self.w.real.items():
                f.__code__ = code
        self.w.depth += 1

    def __exit__(self, *exc):
        self.w.depth -= 1
        if self.w.depth == 0:
            self.w.arm()
        return False
