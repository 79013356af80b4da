"""Build facts for the problem's target GPUs, from the candidate's own Triton launches.

Triton's wheel carries both compiler back ends, so any machine (a CPU laptop in the
interpreter as well as a GPU host) can compile a kernel for MI300X (gfx942) and for
Hopper (sm_90a) and read what it costs: registers, LDS/shared memory, spills and
occupancy. Two steps:

- `capture()`: around calls into the candidate, records every launch of a Triton
  kernel as it really happens (compiled `JITFunction` or the interpreter's
  `InterpretedFunction`), reduced to what a compile needs: the specialization each
  back end would compute (argument types, divisibility, integers equal to 1,
  constexprs) and the launch options (num_warps, num_stages, num_ctas, waves_per_eu,
  matrix_instr_nonkdim, ...). Launches made while an autotuner benchmarks its
  configurations are left out: only the configuration it runs counts.
- `build_facts(launches, names)`: compiles each captured kernel for every target, a
  target's kernels split over forked children (an LLVM abort or a hung compile costs that
  target's facts, never the evaluation), and returns the result document's `targets` entry.

Both import and run candidate code, so they belong to the untrusted side (the runner),
never to the judge: the facts are what the candidate's process reports
(`"reported_by": "candidate"`). Compiles go to the candidate's own TRITON_CACHE_DIR
(inside its scratch folder), and the document names the Triton that made them. The
judge serves the facts of byte-identical code again from its own cache
(harness/factcache.py), without asking the runner.

Types follow the target, not the host: MI300's fp8 is the FNUZ family (float8_e4m3fnuz,
float8_e5m2fnuz), every other target here uses the OCP types (float8_e4m3fn,
float8_e5m2); a kernel captured with one family is compiled with the other's
equivalent where the target needs it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

# What each target is and the per-unit limits occupancy is computed from.
# AMD: waves per SIMD (4 SIMDs per CU); NVIDIA: resident blocks per SM.
AMD = {
    # gfx942 (MI300X/MI300A/MI325X) and gfx90a (MI200): 512 VGPRs per lane for a
    # wave (arch + acc), 64 KiB LDS per CU, 8 waves per SIMD.
    "gfx942": {"lds_per_cu": 65536, "max_waves_per_simd": 8, "simds_per_cu": 4},
    "gfx90a": {"lds_per_cu": 65536, "max_waves_per_simd": 8, "simds_per_cu": 4},
    # gfx950 (MI350X/MI355X): 160 KiB LDS per CU.
    "gfx950": {"lds_per_cu": 163840, "max_waves_per_simd": 8, "simds_per_cu": 4},
}
NVIDIA = {
    # H100/H200: 64K registers, 228 KiB shared memory per SM (1 KiB of it reserved per
    # block), 64 warps and 32 blocks per SM.
    "sm_90a": {"capability": 90, "regs_per_sm": 65536, "smem_per_sm": 233472, "smem_reserved_per_block": 1024,
               "max_warps_per_sm": 64, "max_blocks_per_sm": 32},
    "sm_90": {"capability": 90, "regs_per_sm": 65536, "smem_per_sm": 233472, "smem_reserved_per_block": 1024,
              "max_warps_per_sm": 64, "max_blocks_per_sm": 32},
    # A100: 164 KiB shared memory per SM.
    "sm_80": {"capability": 80, "regs_per_sm": 65536, "smem_per_sm": 167936, "smem_reserved_per_block": 1024,
              "max_warps_per_sm": 64, "max_blocks_per_sm": 32},
}
KNOWN = tuple(AMD) + tuple(NVIDIA)
DEFAULT = ("gfx942", "sm_90a")
# fp8 element types as Triton names them: the OCP family and MI300's FNUZ family.
_FNUZ = {"fp8e4nv": "fp8e4b8", "fp8e5": "fp8e5b16"}
_OCP = {v: k for k, v in _FNUZ.items()}
_FNUZ_TARGETS = ("gfx942", "gfx90a")
# Distinct specializations compiled per kernel; the rest are counted, not compiled.
MAX_VARIANTS = 4
# Children a target's variants are split over (at the lowest priority, beside the timed loop):
# one child per target compiled the fp8 baseline's three variants one after the other, which
# outlasted an H200 timed loop of 2.2-2.4 s by 0.08-0.41 s. All targets' children together take
# at most a quarter of the cores this process may run on (at least one child per target), so
# that the timed loop's host threads keep cores of their own.
BUILD_PARTS = 4
# A target whose compiles take longer gives no facts, so that one absurd kernel costs
# a bounded share of the evaluation's time limit.
COMPILE_TIMEOUT_S = 120
# Why a target has no facts when the judge would not wait for its compile (Build.finish(wait=False)).
CUT_SHORT = ("the evaluation ended before this target's compile did (racing stopped the attempt); "
             "`kgit remeasure` builds it")


def check_names(names) -> list[str]:
    """The target names, validated; a ValueError names the known ones."""
    names = [str(n) for n in names]
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ValueError(f"unknown build target {unknown[0]!r}; known targets: {', '.join(KNOWN)}")
    return names


def key_of_name(name: str) -> str:
    """The target as a git trailer key part: sm_90a -> sm-90a (keys allow letters, digits, "-")."""
    return name.replace("_", "-")


def name_of_key(part: str) -> str:
    return next((n for n in KNOWN if key_of_name(n) == part), part)


def gpu_target(name: str):
    from triton.backends.compiler import GPUTarget

    if name in AMD:
        return GPUTarget("hip", name, 64)
    return GPUTarget("cuda", NVIDIA[name]["capability"], 32)


def family(name: str) -> str:
    return "hip" if name in AMD else "cuda"


# ---------------------------------------------------------------- capture


@dataclass
class Variant:
    """One distinct launch of one kernel: what each back end family specializes it to."""

    kernel: str
    fn: object  # the JITFunction or InterpretedFunction, for the compile
    options: dict  # launch keywords that are not kernel parameters (num_warps, ...)
    bound: dict  # the kernel's arguments by name, tensors dropped (constexprs kept)
    specialization: dict  # family -> Triton's specialization list
    grid: object = None
    launches: int = 0


@dataclass
class Launches:
    """What `capture()` saw: distinct variants in launch order, and what it could not read."""

    variants: list = field(default_factory=list)
    unreadable: list = field(default_factory=list)  # (kernel, why)
    total: int = 0
    _index: dict = field(default_factory=dict)


_state = threading.local()


def _binder(fn, fam: str):
    """Triton's own argument binder for `fn`, specializing as back end family `fam` would."""
    cache = fn.__dict__.setdefault("_kgit_binders", {})
    if fam not in cache:
        from triton.compiler import make_backend
        from triton.runtime.jit import create_function_from_signature

        jit = _signature_of(fn)
        backend = make_backend(gpu_target("gfx942" if fam == "hip" else "sm_90a"))
        cache[fam] = create_function_from_signature(jit.signature, jit.params, backend)
    return cache[fam]


def _without_tensors(value):
    """The argument without tensors: constexprs and scalars survive, device memory does not."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return None
    if isinstance(value, tuple):
        return tuple(_without_tensors(v) for v in value)
    return value


def _record(fn, args, kwargs, grid):
    seen: Launches = _state.launches
    seen.total += 1
    name = getattr(fn, "__name__", repr(fn))
    options = launch_options(fn, kwargs)
    specs, bound = {}, None
    for fam in ("hip", "cuda"):
        bound_args, spec, _ = _binder(fn, fam)(*args, **kwargs)
        specs[fam] = spec
        bound = bound or {k: _without_tensors(v) for k, v in bound_args.items()}
    key = (id(fn), repr(specs), repr(sorted(options.items())))
    variant = seen._index.get(key)
    if variant is None:
        variant = Variant(name, fn, options, bound, specs, grid=grid if not callable(grid) else "callable")
        seen._index[key] = variant
        seen.variants.append(variant)
    variant.launches += 1


def launch_options(fn, kwargs: dict) -> dict:
    """The keyword arguments of a launch that are not the kernel's parameters (num_warps, ...)."""
    params = set(_signature_of(fn).arg_names)
    return {k: v for k, v in kwargs.items() if k not in params}


def _wrap_run(original):
    def run(self, *args, grid, warmup, **kwargs):
        dry = getattr(_state, "dry", False)
        # A dry run records every configuration an autotuner tries: the GPU may pick any of them.
        if getattr(_state, "launches", None) is not None and (dry or not getattr(_state, "tuning", 0)):
            try:
                _record(self, args, kwargs, grid)
            except Exception as e:  # noqa: BLE001 - the launch goes on; the facts say what was not read
                _state.launches.unreadable.append((getattr(self, "__name__", "?"), f"{type(e).__name__}: {e}"))
        if dry:
            return None
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    run._kgit_capture = True
    return run


def _wrap_bench(original):
    def bench(self, *args, **kwargs):
        _state.tuning = getattr(_state, "tuning", 0) + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _state.tuning -= 1

    bench._kgit_capture = True
    return bench


@contextlib.contextmanager
def dry():
    """Inside `capture()`: Triton launches are recorded and not run (the GPU shapes' launches,
    captured on a machine that could not run them; their inputs need not even hold values)."""
    _state.dry = True
    try:
        yield
    finally:
        _state.dry = False


@contextlib.contextmanager
def capture(known: Launches | None = None):
    """Record the Triton launches made inside the block: `with capture() as launches:`.

    With `known`, a variant it already holds is counted there, not recorded again.
    """
    from triton.runtime import autotuner, interpreter, jit

    patched = [(jit.JITFunction, "run", _wrap_run), (interpreter.InterpretedFunction, "run", _wrap_run),
               (autotuner.Autotuner, "_bench", _wrap_bench)]
    saved = []
    for cls, attr, wrap in patched:
        original = cls.__dict__.get(attr)
        if original is not None and not getattr(original, "_kgit_capture", False):
            saved.append((cls, attr, original))
            setattr(cls, attr, wrap(original))
    launches = Launches(_index=dict(known._index) if known is not None else {})
    _state.launches, _state.tuning = launches, 0
    try:
        yield launches
    finally:
        _state.launches = None
        for cls, attr, original in saved:
            setattr(cls, attr, original)


@contextlib.contextmanager
def facts_into(doc: dict, names):
    """Capture the launches made in the block, then start compiling them for the targets;
    `collect_into(doc)` later puts the build facts in doc["targets"].

    The compiles start however the block ends short of an interrupt (a kernel that fails
    on this machine may still build for the targets, and that is worth saying), and run in
    other processes while the evaluation goes on (the timing). With no target names,
    nothing is captured and doc["targets"] is None.
    """
    doc["targets"] = None
    if not names:
        yield None
        return
    with capture() as launches:
        try:
            yield launches
        except Exception:
            _pending[id(doc)] = start_build(launches, names)
            raise
    _pending[id(doc)] = start_build(launches, names)


def collect_into(doc: dict) -> None:
    """Wait for the compiles `facts_into` started for `doc`, and record their facts in it."""
    pending = _pending.pop(id(doc), None)
    if pending is not None:
        doc["targets"] = pending.finish()


_pending: dict = {}


# ---------------------------------------------------------------- compile


def _signature_of(fn):
    """A JITFunction with `fn`'s parameters, for binding arguments (not for compiling)."""
    from triton.runtime.jit import JITFunction

    if isinstance(fn, JITFunction):
        return fn
    if "_kgit_signature" not in fn.__dict__:
        fn.__dict__["_kgit_signature"] = JITFunction(fn.fn, **_jit_kwargs(fn))
    return fn.__dict__["_kgit_signature"]


def compilable(fn):
    """A JITFunction for `fn`: `fn` itself in compiled mode; in the interpreter, one made
    from the plain Python function (see `_leave_interpreter`)."""
    from triton.runtime.jit import JITFunction

    if isinstance(fn, JITFunction):
        return fn
    made = fn.__dict__.get("_kgit_jit")
    if made is None:
        # Registered before its globals are translated: two kernels of one module name
        # each other there, and translating one must find the other's copy, not make it
        # again (which recursed until Python gave up, failing every two-launch kernel).
        copy, fill_globals = _compiled_copy(fn.fn)
        made = JITFunction(copy, **_jit_kwargs(fn))
        fn.__dict__["_kgit_jit"] = made
        fill_globals()
    return made


def _jit_kwargs(fn) -> dict:
    keep = ("version", "do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline", "repr",
            "launch_metadata")
    return {k: v for k, v in (getattr(fn, "kwargs", None) or {}).items() if k in keep}


def _leave_interpreter():
    """In a forked compile child of an interpreter run: a fresh, compiling Triton.

    Under TRITON_INTERPRET=1 every @triton.jit function, triton.language's own
    (tl.max, tl.sum, tl.cdiv, ...) included, was made an InterpretedFunction, which the
    code generator cannot compile. The child is thrown away after its compiles, so it
    drops Triton's Python modules (not the compiled extension) and imports them again
    with the interpreter off; `_compiled_copy` then points kernels at the new modules.
    """
    os.environ["TRITON_INTERPRET"] = "0"
    stale = [n for n in sys.modules if (n == "triton" or n.startswith("triton.")) and not n.startswith("triton._C")]
    _stale_modules.update({n: sys.modules.pop(n) for n in stale})
    import importlib

    for name in ("triton", "triton.language", "triton.compiler", "triton.runtime.jit", "triton.backends.compiler"):
        importlib.import_module(name)


_stale_modules: dict = {}


def _fresh(value):
    """`value` as the re-imported Triton has it (a module, or a function or class of one)."""
    import importlib

    from triton.runtime.interpreter import InterpretedFunction as Fresh

    stale_interp = _stale_modules.get("triton.runtime.interpreter")
    if stale_interp is not None and isinstance(value, stale_interp.InterpretedFunction) or isinstance(value, Fresh):
        return compilable(value)
    if isinstance(value, type(sys)):
        if value.__name__ in _stale_modules:
            return importlib.import_module(value.__name__)
        return value
    module = getattr(value, "__module__", None)
    if module in _stale_modules and hasattr(value, "__qualname__"):
        found = importlib.import_module(module)
        for part in value.__qualname__.split("."):
            found = getattr(found, part, None)
        return found if found is not None else value
    return value


def _compiled_copy(py_fn):
    """`py_fn` over a copy of its globals, and the call that makes those globals name the
    compiling Triton's objects (made later, see `compilable`)."""
    import types

    shadow = dict(py_fn.__globals__)
    copy = types.FunctionType(py_fn.__code__, shadow, py_fn.__name__, py_fn.__defaults__, py_fn.__closure__)
    copy.__qualname__, copy.__module__, copy.__doc__ = py_fn.__qualname__, py_fn.__module__, py_fn.__doc__
    copy.__kwdefaults__, copy.__annotations__ = py_fn.__kwdefaults__, py_fn.__annotations__
    copy.__wrapped__ = py_fn  # inspect.getsource follows it to the source file

    def fill_globals():
        for name, value in py_fn.__globals__.items():
            if not name.startswith("__") and getattr(value, "fn", None) is not py_fn:
                shadow[name] = _fresh(value)

    return copy, fill_globals


def _map_types(sig, name: str):
    table = _FNUZ if name in _FNUZ_TARGETS else _OCP

    def one(ty):
        if isinstance(ty, str):
            return re.sub(r"fp8e4nv|fp8e5b16|fp8e4b8|fp8e5", lambda m: table.get(m.group(0), m.group(0)), ty)
        if isinstance(ty, (tuple, list)):
            return type(ty)(one(t) for t in ty)
        return ty

    return {k: one(v) for k, v in sig.items()}


def _compile_variant(variant: Variant, name: str) -> dict:
    """Compile one variant for one target and read its costs; raises what the compiler raised."""
    import triton
    from triton.compiler import ASTSource, make_backend

    jit = compilable(variant.fn)
    target = gpu_target(name)
    backend = make_backend(target)
    spec = variant.specialization[family(name)]
    options, signature, constexprs, attrs = jit._pack_args(backend, dict(variant.options), variant.bound,
                                                           list(spec), dict(variant.options))
    signature = _map_types(signature, name)
    src = ASTSource(jit, signature, constexprs, attrs)
    if name in AMD:
        kernel = triton.compile(src, target=target, options=options.__dict__)
        facts = amd_facts(kernel.asm["amdgcn"], kernel.metadata, name)
    else:
        log = _PtxasLog()
        with log:
            kernel = triton.compile(src, target=target, options=options.__dict__)
        facts = nvidia_facts(log.text or _ptxas_again(kernel, name), kernel.metadata, name)
    facts["signature"] = {k: v for k, v in signature.items() if v != "constexpr"}
    return facts


class _PtxasLog:
    """Triton runs `ptxas -v` and drops its report unless asked to print it: ask, and keep it."""

    def __enter__(self):
        from triton import knobs

        self._was = knobs.nvidia.dump_ptxas_log
        knobs.nvidia.dump_ptxas_log = True
        self._out = contextlib.redirect_stdout(_Tee())
        self._buf = self._out.__enter__()
        return self

    def __exit__(self, *exc):
        from triton import knobs

        self._out.__exit__(*exc)
        knobs.nvidia.dump_ptxas_log = self._was
        self.text = self._buf.getvalue()
        return False


class _Tee:
    def __init__(self):
        self._parts = []

    def write(self, s):
        self._parts.append(s)
        return len(s)

    def flush(self):
        pass

    def getvalue(self):
        return "".join(self._parts)


def _ptxas_again(kernel, name: str) -> str:
    """The ptxas report for a kernel that came from the cache (no ptxas ran to print one)."""
    import subprocess

    from triton.backends.nvidia.compiler import get_ptxas

    cap = NVIDIA[name]["capability"]
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "k.ptx")
        with open(ptx, "w") as f:
            f.write(kernel.asm["ptx"])
        arch = f"sm_{cap}a" if cap >= 90 else f"sm_{cap}"
        done = subprocess.run([get_ptxas(cap).path, "-v", f"--gpu-name={arch}", ptx, "-o", ptx + ".o"],
                              capture_output=True, text=True)
    return done.stderr


def _asm_number(pattern: str, text: str, default=None):
    m = re.search(pattern, text, re.M)
    return int(m.group(1)) if m else default


def amd_facts(asm: str, metadata, name: str) -> dict:
    """Costs of one AMDGCN kernel, from the assembler's own comments and metadata."""
    limits = AMD[name]
    num_warps = int(metadata.num_warps)
    lds = max(int(metadata.shared or 0), _asm_number(r"\.group_segment_fixed_size:\s*(\d+)", asm, 0))
    compiler_occupancy = _asm_number(r"^\s*; Occupancy:\s*(\d+)", asm)
    # The compiler's occupancy counts registers only: Triton's LDS is dynamic, unseen by it.
    if lds:
        groups = limits["lds_per_cu"] // lds
        by_lds = min(limits["max_waves_per_simd"], groups * num_warps // limits["simds_per_cu"])
    else:
        by_lds = limits["max_waves_per_simd"]
    occupancy = min(by_lds, compiler_occupancy) if compiler_occupancy is not None else by_lds
    # Triton checks the LDS size only when it loads the kernel on a GPU; say it here.
    too_big = lds > limits["lds_per_cu"]
    return {
        "fits": not too_big,
        "why": f"needs {_size(lds)} of LDS per workgroup; {name} has {_size(limits['lds_per_cu'])}" if too_big else None,
        "kernel": metadata.name, "num_warps": num_warps, "num_stages": metadata.num_stages,
        "vgpr": _asm_number(r"^\s*; NumVgprs:\s*(\d+)", asm), "agpr": _asm_number(r"^\s*; NumAgprs:\s*(\d+)", asm),
        "sgpr": _asm_number(r"^\s*; (?:Total)?NumSgprs:\s*(\d+)", asm),
        "lds_bytes": lds, "lds_limit": limits["lds_per_cu"],
        "scratch_bytes": _asm_number(r"^\s*; ScratchSize:\s*(\d+)", asm, 0),
        "vgpr_spill": _asm_number(r"\.vgpr_spill_count:\s*(\d+)", asm, 0),
        "sgpr_spill": _asm_number(r"\.sgpr_spill_count:\s*(\d+)", asm, 0),
        "occupancy": occupancy, "occupancy_unit": "waves/SIMD", "compiler_occupancy": compiler_occupancy,
    }


def nvidia_facts(ptxas_log: str, metadata, name: str) -> dict:
    """Costs of one cubin, from `ptxas -v` and the kernel's metadata; occupancy in blocks per SM."""
    limits = NVIDIA[name]
    num_warps = int(metadata.num_warps)
    regs = _asm_number(r"Used (\d+) registers", ptxas_log)
    shared = int(metadata.shared or 0)
    spill_stores = _asm_number(r"(\d+) bytes spill stores", ptxas_log, 0)
    spill_loads = _asm_number(r"(\d+) bytes spill loads", ptxas_log, 0)
    by_warps = limits["max_warps_per_sm"] // num_warps
    by_smem = limits["smem_per_sm"] // (shared + limits["smem_reserved_per_block"])
    # Registers are allocated per warp in units of 256.
    by_regs = (limits["regs_per_sm"] // (num_warps * 256 * math.ceil(regs * 32 / 256))) if regs else by_warps
    occupancy = max(0, min(by_warps, by_smem, by_regs, limits["max_blocks_per_sm"]))
    per_block = limits["smem_per_sm"] - limits["smem_reserved_per_block"]
    too_big = shared > per_block
    return {
        "fits": not too_big,
        "why": f"needs {_size(shared)} of shared memory per block; {name} allows {_size(per_block)}" if too_big else None,
        "kernel": metadata.name, "num_warps": num_warps, "num_stages": metadata.num_stages,
        "registers": regs, "shared_bytes": shared, "shared_limit": per_block,
        "spill_bytes": spill_stores + spill_loads, "spill_stores": spill_stores, "spill_loads": spill_loads,
        "stack_bytes": _asm_number(r"(\d+) bytes stack frame", ptxas_log, 0),
        "occupancy": occupancy, "occupancy_unit": "blocks/SM",
    }


def first_error_line(exc: BaseException, stderr: str = "") -> str:
    """The compiler's first error, as one line: what a trailer and a prompt can quote."""
    for line in stderr.splitlines():
        if re.search(r"\berror\b", line, re.I):
            return " ".join(line.split())[:300]
    text = str(getattr(exc, "error_message", None) or exc) or type(exc).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    picked = next((ln for ln in lines if re.search(r"error|unsupported|not supported", ln, re.I)),
                  lines[-1] if lines else type(exc).__name__)
    return f"{type(exc).__name__}: {picked}"[:300]


def _kept(variants: list) -> tuple[list, int]:
    """The variants compiled, at most MAX_VARIANTS per kernel in launch order, and how many were not."""
    kept: list = []
    per_kernel: dict[int, int] = {}
    for variant in variants:
        per_kernel[id(variant.fn)] = per_kernel.get(id(variant.fn), 0) + 1
        if per_kernel[id(variant.fn)] <= MAX_VARIANTS:
            kept.append(variant)
    return kept, len(variants) - len(kept)


def _build_target(variants: list, name: str) -> dict:
    """Compile `variants` for one target (run in a child)."""
    from triton.runtime.jit import JITFunction

    if any(not isinstance(v.fn, JITFunction) for v in variants):
        _leave_interpreter()
    kernels, errors = [], []
    for variant in variants:
        started = time.perf_counter()
        with _fd_capture(2) as err:
            try:
                facts = _compile_variant(variant, name)
            except Exception as e:  # noqa: BLE001 - a kernel that does not build is a fact about it
                facts = None
                failure = e
        if facts is None:
            errors.append({"kernel": variant.kernel, "error": first_error_line(failure, err.text),
                           "options": _jsonable(variant.options)})
            continue
        facts.update(options=_jsonable(variant.options), launches=variant.launches,
                     compile_s=round(time.perf_counter() - started, 3))
        kernels.append(facts)
        if not facts["fits"]:
            errors.append({"kernel": variant.kernel, "error": f"does not fit: {facts['why']}",
                           "options": facts["options"]})
    return {"kernels": kernels, "failures": errors}


def _target_result(parts: list, not_compiled: int) -> dict:
    """One target's entry from its parts' answers, in variant order: a part that crashed, overran or
    was cut short leaves the target's verdict unknown (builds None), with the others' facts."""
    kernels = [k for part in parts if "crash" not in part for k in part["kernels"]]
    failures = [f for part in parts if "crash" not in part for f in part["failures"]]
    crashed = next((part["crash"] for part in parts if "crash" in part), None)
    if crashed is not None:
        return {"builds": None, "error": f"not built: {crashed}", "kernels": kernels, "failures": failures,
                "not_compiled": not_compiled}
    return {"builds": not failures and bool(kernels), "error": failures[0]["error"] if failures else None,
            "kernels": kernels, "failures": failures, "not_compiled": not_compiled}


class _fd_capture:
    """Collect what C++ code (LLVM, ptxas' driver) writes to a file descriptor."""

    def __init__(self, fd: int):
        self.fd, self.text = fd, ""

    def __enter__(self):
        self._file = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(self.fd)
        os.dup2(self._file.fileno(), self.fd)
        return self

    def __exit__(self, *exc):
        os.dup2(self._saved, self.fd)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", errors="replace")[-20000:]
        self._file.close()
        return False


def _jsonable(value):
    return json.loads(json.dumps(value, default=repr))


def _fork(work, beside_timing: bool = True) -> tuple[int, int]:
    """Start `work()` in a forked child that writes its JSON answer to a pipe: (pid, read end).

    `beside_timing`: the child runs while the parent times calls, so it takes the lowest CPU
    priority; false for work the parent waits on (precompile.py), which keeps the parent's."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running the parent's cleanup
        try:
            os.close(read_fd)
            # Compiles beside the timed loop get only what the timing leaves. A process may
            # always lower its own priority; raising it back needs CAP_SYS_NICE, so candidate
            # code cannot undo this for the compile, and the parent's priority is untouched.
            if beside_timing:
                try:
                    os.nice(19)
                except OSError:
                    pass
            try:
                answer = json.dumps(work(), default=repr).encode()
            except BaseException as e:  # noqa: BLE001 - reported to the parent as the answer
                answer = json.dumps({"crash": f"{type(e).__name__}: {e}"[:2000]}).encode()
            with os.fdopen(write_fd, "wb") as out:
                out.write(answer)
        finally:
            # Whatever happened (the parent gone, the pipe broken), the child never returns
            # into the parent's code.
            os._exit(0)
    os.close(write_fd)
    return pid, read_fd


def _collect(children: dict, timeout_s: float, late: str | None = None) -> dict:
    """The answers of forked children {name: (pid, fd)}; one that dies or overruns answers {"crash": why}
    (`late`, where given, for one still running at the deadline)."""
    import selectors

    sel = selectors.DefaultSelector()
    chunks: dict[str, list] = {name: [] for name in children}
    for name, (_, fd) in children.items():
        sel.register(fd, selectors.EVENT_READ, name)
    deadline = time.monotonic() + timeout_s
    while sel.get_map():
        # Past the deadline (or given none) one last poll still reads what finished children wrote.
        events = sel.select(max(deadline - time.monotonic(), 0.0))
        if not events:
            break
        for key, _ in events:
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                chunks[key.data].append(chunk)
            else:
                sel.unregister(key.fd)
    overran = {key.data for key in sel.get_map().values()}
    answers = {}
    for name, (pid, fd) in children.items():
        if name in overran:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        if name in overran:
            answers[name] = {"crash": late or f"the compile did not finish within {timeout_s:.0f} s"}
        elif not chunks[name]:
            why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
            answers[name] = {"crash": f"the compiler died ({why})"}
        else:
            answers[name] = json.loads(b"".join(chunks[name]))
    return answers


def build_facts(launches: Launches, names, timeout_s: float = COMPILE_TIMEOUT_S) -> dict:
    """The result document's `targets` entry: per target, whether the captured kernels
    build and what each costs. Targets compile side by side in forked children (start_build)."""
    return start_build(launches, names, timeout_s).finish()


def build_parts(targets: int, cores: int | None = None) -> int:
    """Children per target: BUILD_PARTS, or fewer where all targets' children would take more than
    a quarter of `cores` (default: those this process may run on); never fewer than one."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(BUILD_PARTS, cores // (4 * max(1, targets))))


def start_build(launches: Launches, names, timeout_s: float = COMPILE_TIMEOUT_S) -> Build:
    """Fork the compile children (from the calling thread) and return at once: per target, the
    variants split over `build_parts` children, which compile side by side."""
    names = check_names(names)
    kept, skipped = _kept(launches.variants)
    count = min(len(kept), build_parts(len(names)))
    parts = [kept[len(kept) * i // count:len(kept) * (i + 1) // count] for i in range(count)]
    build = Build(launches, names, timeout_s, time.perf_counter(), parts=len(parts), not_compiled=skipped)
    if launches.variants:
        sys.stdout.flush()
        sys.stderr.flush()
        for n in names:
            for i, part in enumerate(parts):
                try:
                    build.children[f"{n} {i}"] = _fork(lambda n=n, part=part: _build_target(part, n))
                except OSError as e:  # a process limit: no facts for this target, the evaluation goes on
                    build.refused[f"{n} {i}"] = f"no compile process could be started ({e})"
    return build


@dataclass
class Build:
    """Compiles under way in forked children; `finish()` waits for them and makes the entry."""

    launches: Launches
    names: list
    timeout_s: float
    started: float
    parts: int = 1  # children per target, each compiling its share of the variants
    not_compiled: int = 0  # variants past MAX_VARIANTS of their kernel
    children: dict = field(default_factory=dict)  # "<target> <part>" -> (pid, fd)
    refused: dict = field(default_factory=dict)  # "<target> <part>" -> why its child could not start

    def finish(self, wait: bool = True) -> dict:
        """`wait` False: only the answers already in; a compile still running is ended (CUT_SHORT)."""
        import triton

        launches = self.launches
        waited = time.perf_counter()
        doc = {"reported_by": "candidate", "triton": triton.__version__,
               "cache_dir": os.environ.get("TRITON_CACHE_DIR"), "launches": launches.total,
               "variants": len(launches.variants), "unreadable": [f"{k}: {why}" for k, why in launches.unreadable],
               "results": {}, "compile_s": 0.0, "waited_s": 0.0}
        if not self.children and not self.refused:
            why = ("no Triton kernel was launched" if not launches.unreadable
                   else "no Triton launch could be read: " + launches.unreadable[0][1])
            doc["results"] = {n: {"builds": None, "error": why, "kernels": [], "failures": [], "not_compiled": 0}
                              for n in self.names}
            return doc
        left = max(1.0, self.timeout_s - (waited - self.started)) if wait else 0.0
        answers = _collect(self.children, left, late=None if wait else CUT_SHORT)
        answers.update({n: {"crash": why} for n, why in self.refused.items()})
        for n in self.names:
            doc["results"][n] = _target_result([answers[f"{n} {i}"] for i in range(self.parts)], self.not_compiled)
        done = time.perf_counter()
        # compile_s: from the fork to the last answer; waited_s: what the evaluation waited for them.
        doc["compile_s"], doc["waited_s"] = round(done - self.started, 3), round(done - waited, 3)
        return doc


def merge(checked: dict, extra: dict, dry_report: dict) -> dict:
    """The checks' build facts with those of the variants only a dry run of the GPU shapes
    launched (`extra`): per target the kernels and failures of both, builds only if both do."""
    out = dict(checked)
    out["launches"] = checked.get("launches", 0) + extra.get("launches", 0)
    out["variants"] = checked.get("variants", 0) + extra.get("variants", 0)
    out["unreadable"] = list(checked.get("unreadable") or []) + list(extra.get("unreadable") or [])
    out["compile_s"] = round((checked.get("compile_s") or 0) + (extra.get("compile_s") or 0), 3)
    out["dry"] = dry_report
    results = {}
    for name, first in (checked.get("results") or {}).items():
        second = (extra.get("results") or {}).get(name)
        if not second or not (second.get("kernels") or second.get("failures")):
            results[name] = first
            continue
        failures = list(first.get("failures") or []) + list(second.get("failures") or [])
        kernels = list(first.get("kernels") or []) + list(second.get("kernels") or [])
        builds = None if first.get("builds") is None and second.get("builds") is None else (
            not failures and bool(kernels))
        results[name] = {"builds": builds, "error": failures[0]["error"] if failures else first.get("error"),
                         "kernels": kernels, "failures": failures,
                         "not_compiled": (first.get("not_compiled") or 0) + (second.get("not_compiled") or 0)}
    out["results"] = results
    return out


# ---------------------------------------------------------------- summaries


def summary(result: dict) -> dict:
    """One target's worst case over its kernels: the figures a trailer and a prompt show."""
    kernels = result.get("kernels") or []
    regs = [k.get("vgpr") if "vgpr" in k else k.get("registers") for k in kernels]
    local = [k.get("lds_bytes") if "lds_bytes" in k else k.get("shared_bytes") for k in kernels]
    spill = [(k.get("scratch_bytes") or 0) + 4 * (k.get("vgpr_spill") or 0) if "vgpr" in k else k.get("spill_bytes")
             for k in kernels]
    occ = [k.get("occupancy") for k in kernels]
    amd = bool(kernels) and "vgpr" in kernels[0]
    return {
        "builds": result.get("builds"), "error": result.get("error"), "kernels": len(kernels),
        "regs": max((r for r in regs if r is not None), default=None), "regs_word": "vgpr" if amd else "regs",
        "local_bytes": max((b for b in local if b is not None), default=None), "local_word": "lds" if amd else "smem",
        "spill_bytes": max((s for s in spill if s is not None), default=None),
        "occupancy": min((o for o in occ if o is not None), default=None),
    }


def _size(n: int) -> str:
    return f"{n // 1024} KiB" if n and n % 1024 == 0 else (f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B")


def trailer_value(result: dict) -> str:
    """`builds; vgpr 213, lds 16 KiB, spill 0, occupancy 2` or `fails: <first error line>`."""
    s = summary(result)
    if s["builds"] is None:
        return f"unknown: {s['error'] or 'not built'}"
    if not s["builds"]:
        return f"fails: {s['error']}"
    spill = s["spill_bytes"] or 0
    return (f"builds; {s['regs_word']} {s['regs']}, {s['local_word']} {_size(s['local_bytes'] or 0)}, "
            f"spill {_size(spill) if spill else 0}, occupancy {s['occupancy']}")


def kernel_lines(result: dict) -> list[list[str]]:
    """[[kernel, `vgpr 213, lds 16 KiB, spill 0, occupancy 2 (num_warps 8, num_stages 2)`], ...]:
    each compiled variant of one target's kernels, which the trailer sums up as the worst."""
    out = []
    for k in result.get("kernels") or []:
        facts = trailer_value({"builds": True, "kernels": [k]}).removeprefix("builds; ")
        line = [str(k.get("kernel")), f"{facts} (num_warps {k.get('num_warps')}, num_stages {k.get('num_stages')})"]
        if line not in out:
            out.append(line)
    return out


def failing(doc: dict | None, names) -> list[str]:
    """The declared targets the captured kernels do not build for."""
    results = (doc or {}).get("results") or {}
    return [n for n in names if (results.get(n) or {}).get("builds") is False]
