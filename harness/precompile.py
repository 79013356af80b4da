"""The candidate's Triton kernels compiled side by side before the checks first call them.

A new candidate's first calls compile each distinct launch of its kernels (a Triton
specialization) one after the other: on the H200 the fp8 baseline's three took 0.66, 0.65 and
0.46 s after kgit's warm-up, and the offline strategist's candidates 3.5-4.6 s of checks an
attempt. `compile_ahead` runs the candidate once more on every shape, in a forked child that
cannot reach the GPU: its inputs are CPU tensors laid out as the device's (never filled), the
devices it names are the CPU (portable.mapped_devices), and every Triton launch is recorded
instead of run. Each distinct launch is compiled for this device by Triton's own launch path
(`JITFunction.run(..., warmup=True)`, the driver answering with this process's device and
target), in a child of its own, into this process's Triton cache; the checks' calls then
load what is there. Where the driver builds a launcher stub with the host's C compiler
(Triton 3.6's CUDA and HIP drivers: 0.22-0.34 s after the H200's compiles), a child of the
variant's builds it while the kernel compiles, from the compile's source and its options.
The children run at the runner's own priority: the checks wait for them, as they would for
the compiles of their own first calls.

Runner side (untrusted) only: it runs candidate code and writes nothing but the runner's own
Triton cache, which the candidate could write anyway; what it reports is diagnostic. The
verdict never depends on it: a launch it did not find, or a key it computed differently, is
compiled by the real call as before. A dry run's host code sees uninitialised inputs, so a
candidate that branches on values may be given other variants than it will launch.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from kgit_harness import portable, targets

# The longest the runner waits for the compiles before the checks begin (a compile of the
# fp8 kernel took 0.5-0.7 s on the H200 host); the dry run is killed then, and the checks
# compile whatever is missing themselves.
WAIT_S = 10.0


def compile_ahead(call, inputs: list, wait_s: float = WAIT_S) -> dict:
    """Compile the Triton launches `call` makes on each of `inputs` (CPU tensors) for this device,
    side by side, in forked children; wait for them (at most `wait_s`).

    Returns {"variants": found, "compiled": built, "launchers": stubs built, "early_launchers": those
    a child built while their kernel compiled, "failed": [why, ...], "seconds": s, and where the
    seconds went: "fork_s" (until the dry run's child ran), "dry_s" (the candidate's dry calls),
    "slowest_compile_s" and "slowest_launcher_s" (of the variants' children; the launcher's after
    the compile, cache reads where the early build guessed right)}, or {"error": why} when the dry
    run could not start (the candidate's process, so diagnostic)."""
    from triton.runtime import driver

    started = time.perf_counter()
    try:
        device = driver.active.get_current_device()
        target = driver.active.get_current_target()
    except Exception as e:  # noqa: BLE001 - no device driver: nothing to compile for
        return {"error": f"no device target ({type(e).__name__}: {e})"[:300]}
    deadline = time.monotonic() + wait_s
    forked = time.time()  # the wall clock, which parent and child share
    try:
        child = targets._fork(lambda: _dry_run(call, inputs, device, target, deadline, forked), beside_timing=False)
    except OSError as e:
        return {"error": f"no process for the dry run ({e})"}
    answer = targets._collect({"dry run": child}, wait_s + 1.0,
                              late=f"the dry run did not end within {wait_s + 1.0:g} s")["dry run"]
    answer["seconds"] = round(time.perf_counter() - started, 3)
    return answer


def _dry_run(call, inputs: list, device, target, deadline: float, forked: float) -> dict:
    """In the forked child: record the launches of `call` on `inputs` and compile each new one in a
    grandchild; their answers, or why each failed."""
    fork_s = time.time() - forked
    from triton.runtime import driver, jit

    # The device's context belongs to the parent: this process answers from what it was told.
    active = driver.active
    active.get_current_device = lambda: device
    active.get_current_stream = lambda *args, **kwargs: 0
    active.get_current_target = lambda: target
    family = target.backend if target.backend in ("cuda", "hip") else "cuda"
    original = jit.JITFunction.run
    seen: set = set()
    children: dict = {}

    def run(self, *args, grid, warmup, **kwargs):
        key = _variant_key(self, family, args, kwargs)
        if key not in seen:
            seen.add(key)
            children[f"variant {len(children)}"] = targets._fork(
                lambda: _compile(original, self, args, kwargs, grid, deadline), beside_timing=False)
        return None  # never launched: nothing here may touch the device

    jit.JITFunction.run = run
    failed = []
    started = time.perf_counter()
    for data in inputs:
        try:
            with portable.mapped_devices("cpu"):
                call(data)
        except BaseException as e:  # noqa: BLE001 - host code that needs what a dry run lacks
            failed.append(f"{type(e).__name__}: {e}"[:200])
    dry_s = time.perf_counter() - started
    answers = targets._collect(children, max(0.0, deadline - time.monotonic()),
                               late="not compiled within the wait")
    built = [a for a in answers.values() if a.get("compiled")]
    failed += [a["crash"] if "crash" in a else a.get("error", "?") for a in answers.values() if not a.get("compiled")]
    return {"variants": len(children), "compiled": len(built), "failed": failed[:20],
            "launchers": sum(1 for a in built if a.get("launcher") == "built"),
            "early_launchers": sum(1 for a in built if a.get("early_launcher") == "built"),
            "fork_s": round(fork_s, 3), "dry_s": round(dry_s, 3),
            "slowest_compile_s": _longest(built, "compile_s"), "slowest_launcher_s": _longest(built, "launcher_s")}


def _longest(answers: list, key: str) -> float:
    return max((a[key] for a in answers if isinstance(a.get(key), (int, float))), default=0.0)


def _variant_key(fn, family: str, args, kwargs):
    """What tells two launches apart for a compile: the kernel, the specialization its back end
    family computes from the arguments, and the launch options."""
    try:
        _, specialization, _ = targets._binder(fn, family)(*args, **kwargs)
    except Exception:  # noqa: BLE001 - unbindable: each launch its own variant (a few compiles too many)
        return (id(fn), object())
    return (id(fn), repr(specialization), repr(sorted(targets.launch_options(fn, kwargs).items())))


def _compile(original, fn, args, kwargs, grid, deadline: float) -> dict:
    """In a grandchild: Triton's launch path without the launch (warmup), which compiles into the
    cache under the key the real call will look up; then the launcher stub, where it can be built
    (from the cache, when the early build beside the compile guessed its source right)."""
    started = time.perf_counter()
    with _EarlyLauncher(fn, deadline) as early:
        kernel = original(fn, *args, grid=grid, warmup=True, **kwargs)
    compiled = time.perf_counter()
    early_answer = early.answer()
    waited = time.perf_counter()
    launcher = "not built"
    try:
        from triton.runtime import driver

        driver.active.launcher_cls(kernel.src, kernel.metadata)
        launcher = "built"
    except Exception as e:  # noqa: BLE001 - the real call builds it then
        launcher = f"not built: {type(e).__name__}"
    return {"compiled": True, "compile_s": round(compiled - started, 3),
            "launcher_s": round(time.perf_counter() - waited, 3), "launcher": launcher,
            "early_launcher": early_answer}


# What a launcher reads of a compiled kernel's metadata besides the compile's options; none of
# it goes into the stub's source, which is what the early build is for.
_NOT_IN_OPTIONS = {"tensordesc_meta": None, "global_scratch_size": 0, "global_scratch_align": 1,
                   "profile_scratch_size": 0, "profile_scratch_align": 1, "shared": 0}


class _EarlyLauncher:
    """While the variant compiles, its launcher stub built in a child from the compile's own
    source and options, into the cache the stub's later build reads first. Triton's launch path
    calls `triton.compiler.compile` (bound on the kernel once its binder is made) with the source
    it compiles: that call, wrapped for the block's length, starts the child. A guess that misses
    (a kernel with tensor descriptors, which the compile decides) costs the child's work only."""

    def __init__(self, fn, deadline: float):
        self.fn, self.deadline = fn, deadline
        self.child: tuple[int, int] | None = None
        self.refused: str | None = None

    def __enter__(self):
        import triton.compiler

        self.module, self.real = triton.compiler, triton.compiler.compile
        self.bound = vars(self.fn).get("compile")  # None until the kernel's binder is made
        real = self.bound or self.real

        def compile_(src, *args, **kwargs):
            if self.child is None and self.refused is None:
                options = kwargs.get("options") or {}
                guess = SimpleNamespace(**{**_NOT_IN_OPTIONS, **options})
                try:
                    self.child = targets._fork(lambda: _launcher(src, guess), beside_timing=False)
                except OSError as e:  # no process: the launcher is built after the compile
                    self.refused = f"no process ({e})"
            return real(src, *args, **kwargs)

        self.module.compile = compile_
        if self.bound:
            self.fn.compile = compile_
        return self

    def __exit__(self, *exc) -> None:
        self.module.compile = self.real
        if vars(self.fn).get("compile") is not None:  # the wrapper, set here or by a binder made in the block
            self.fn.compile = self.bound or self.real

    def answer(self) -> str:
        if self.child is None:
            return self.refused or "not started"
        got = targets._collect({"launcher": self.child}, max(0.0, self.deadline - time.monotonic()),
                               late="not built within the wait")["launcher"]
        return got.get("launcher") or got.get("crash", "?")


def _launcher(src, metadata) -> dict:
    from triton.runtime import driver

    started = time.perf_counter()
    try:
        driver.active.launcher_cls(src, metadata)
    except Exception as e:  # noqa: BLE001 - a guess the stub's maker cannot use
        return {"launcher": f"not built: {type(e).__name__}: {e}"[:200]}
    return {"launcher": "built", "seconds": round(time.perf_counter() - started, 3)}
