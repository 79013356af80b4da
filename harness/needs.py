"""What a problem needs that this machine may lack: the `unsupported` verdict.

A problem written for a B200, for ROCm, for eight GPUs or around a module that is not
installed cannot be judged here, and that is no fault of the kernel. The harness asks
before the candidate is imported: the task's `requires` (task.yml), then the problem's
own code (the reference's import, a dry run sizing every shape's inputs, one real
`generate_input`, and `ref_kernel` and `check_implementation` on it). Whatever fails there is the problem's, and the result is
`unsupported` with a reason that says what is missing, e.g. `needs sm_100`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import resource
import traceback
from pathlib import Path

from kgit_harness import checking, factcache, portable, problem, torchflags

# Copies of a shape's inputs alive at once while it is checked and timed: the input,
# its pristine clone, and the re-check's regenerated inputs.
HELD_COPIES = 3
_NO_GPU = ("Torch not compiled with CUDA", "Found no NVIDIA driver", "No CUDA GPUs are available",
           "no HIP GPUs are available", "CUDA driver initialization failed")
_NO_MEMORY = ("can't allocate memory", "out of memory", "CUDA out of memory", "Cannot allocate memory")


class Unsupported(Exception):
    """The problem cannot run here; the message is the reason (`needs ...`)."""


def check(task, reference, on_gpu: bool, torch, record: Record | None = None) -> tuple[dict, bool]:
    """Raise Unsupported if this machine lacks what the problem needs.

    `record` keeps what an earlier evaluation of this problem learnt here: its inputs' sizes
    (the dry run that measures them imports torch._dynamo on its first arithmetic on a meta
    tensor, 2-3 s of the judge's start that no candidate changes) and, per device, that the
    reference ran on its own input and under which settings (0.19 s of every fp8 evaluation
    on the H200, before the candidate could be imported). What the machine has now (the
    task's `requires`, the memory each shape's inputs need) is asked every time.

    Returns (the torch backend settings the reference's ref_kernel ran under
    (harness/torchflags.py), for the runner to apply before it imports the candidate;
    whether the reference ran now, rather than being known from the record).
    """
    missing = required(task.requires, on_gpu, torch)
    if missing:
        raise Unsupported(missing)
    available = _available_bytes(on_gpu, torch)
    record = record or Record(None, "")
    for kind in ("tests", "benchmarks"):
        for shape in task.shapes(kind, on_gpu):
            size = record.measure(f"{kind} {problem.shape_key(shape)}",
                                  lambda: portable.input_bytes(reference.generate_input, shape))
            if size is not None and available is not None and size * HELD_COPIES > available:
                raise Unsupported(
                    f"needs {_gb(size * HELD_COPIES)} of {'GPU ' if on_gpu else ''}memory for the {kind[:-1]} "
                    f"shape {problem.shape_key(shape)} ({HELD_COPIES} copies of its {_gb(size)} of inputs), "
                    f"{_gb(available)} available; give that shape a smaller `cpu:` entry in task.yml or run "
                    "on a larger machine")
    record.save()
    device = torch.cuda.get_device_name() if on_gpu else "cpu"
    known = record.ran.get(device)
    if known is not None:
        return dict(known), False
    first = task.shapes("tests", on_gpu)[0]
    try:
        data = reference.generate_input(**first)
        # The reference on its own input, before any kernel: a ref_kernel or a check that
        # cannot run (a module, a GPU, or a bug of its own: at one upstream commit
        # pmpp_v2/matmul_py unpacked two of its three inputs, and prefixsum_py's check
        # called .numel() on the input tuple) is the problem's failure, not a crash of
        # every kernel judged by it. Only a raise counts: what the check says of the
        # reference's own output is not judged here.
        with torchflags.watched(torch) as settings:
            expected = reference.ref_kernel(data)
        check = getattr(reference, "check_implementation", None)
        if check is not None:
            check(data, expected)
    except Exception as e:  # noqa: BLE001 - the problem's own failure, classified below
        raise Unsupported(reason(e, on_gpu)) from e
    record.ran[device] = dict(settings)
    record.changed = True
    record.save()
    return settings, True


def warm_reference(task, reference, sample) -> None:
    """The reference and its check on clones of `sample` (one of the checks' inputs), where
    `check` did not run them: the device's first use of their kernels, paid here rather than by
    the checks, while the runner compiles the candidate (judge._compile_ahead). Nothing
    depends on it: a reference that fails here fails the checks too, which say so."""
    try:
        expected = reference.ref_kernel(checking.clone(sample))
        checking.compare(task, reference, checking.clone(sample), expected)
    except Exception:  # noqa: BLE001 - the checks meet and classify the same failure
        pass


class Record:
    """The judge's record of a problem on this machine, one JSON file per problem digest: its
    inputs' sizes, and for each device the torch settings the reference ran under when it
    last ran on its own input there.

    Only the judge reads and writes it (in the kernel repository's .git/kgit, hidden from
    the runner, beside the build-facts cache), and the digest covers the problem's files
    and the torch version: what it holds comes from the problem's own code, never a
    candidate's. Written to a temporary name and renamed; an unreadable file is measured again.
    """

    def __init__(self, folder: str | None, digest: str):
        self.path = Path(folder) / f"{digest}.json" if folder and digest else None
        self.known: dict = {}
        self.ran: dict = {}
        self.changed = False
        if self.path is not None:
            try:
                found = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                found = None
            if (isinstance(found, dict) and isinstance(found.get("sizes"), dict) and isinstance(found.get("ran"), dict)
                    and all(isinstance(v, int) or v is None for v in found["sizes"].values())
                    and all(isinstance(v, dict) and set(v) <= set(torchflags.NAMES) for v in found["ran"].values())):
                self.known, self.ran = found["sizes"], found["ran"]

    def measure(self, key: str, size):
        if key not in self.known:
            self.known[key], self.changed = size(), True
        return self.known[key]

    def save(self):
        if self.path is not None and self.changed:
            factcache.write_atomic(self.path, json.dumps({"sizes": self.known, "ran": self.ran}))
            self.changed = False


def problem_digest(problem_dir: Path, torch, on_gpu: bool) -> str:
    """A digest of what a problem's record depends on: its files, torch, the device kind."""
    h = hashlib.sha256(f"record/1\0{torch.__version__}\0{on_gpu}\0".encode())
    for path in factcache.problem_files(problem_dir):
        data = path.read_bytes()
        h.update(f"{path.relative_to(problem_dir).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def required(requires: dict, on_gpu: bool, torch) -> str | None:
    """The first need in a task's `requires` that this machine does not meet, worded `needs ...`."""
    gpus = int(requires.get("gpus") or 1)
    if gpus > 1:
        return (f"needs {gpus} GPUs (a distributed problem: kgit evaluates every kernel in one process "
                "on one GPU)")
    for module in requires.get("modules") or []:
        if importlib.util.find_spec(str(module)) is None:
            return f"needs the Python module {module}"
    arch = [str(a) for a in requires.get("arch") or []]
    if arch and not any(_has_arch(a, on_gpu, torch) for a in arch):
        return "needs " + " or ".join(_arch_name(a) for a in arch)
    return None


def reason(exc: BaseException, on_gpu: bool) -> str:
    """What a failure of the problem's own code says the machine lacks."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return f"needs the Python module {exc.name.split('.')[0]}"
    text = str(exc)
    if not on_gpu and any(marker in text for marker in _NO_GPU):
        return "needs a GPU"
    if isinstance(exc, MemoryError) or any(marker in text for marker in _NO_MEMORY):
        return "needs more memory than this evaluation may use"
    for marker, arch in (("sm_100", "sm_100"), ("sm100", "sm_100"), ("sm_120", "sm_120"), ("gfx942", "gfx942"),
                         ("gfx950", "gfx950")):
        if marker in text:
            return f"needs {arch}"
    line = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return f"the problem's own code failed here: {line[:300]}"


def machine_lacks(on_gpu: bool) -> list[str]:
    """What this machine lacks that kernels often need, by the judge's own probes: no GPU, no
    toolkit to build an extension with. Never read from anything a candidate wrote, so a
    kernel's failure keeps its own status: a "no driver" message the kernel prints cannot
    turn a wrong kernel into "unsupported here". The result carries it as `lacks`."""
    import shutil

    lacks = [] if on_gpu else ["no GPU (kernels run in Triton's CPU interpreter)"]
    if not (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or shutil.which("nvcc")):
        if not (os.environ.get("ROCM_PATH") or os.environ.get("ROCM_HOME") or shutil.which("hipcc")):
            lacks.append("no CUDA or ROCm toolkit (nvcc, hipcc) to build an extension with")
    return lacks


def _has_arch(arch: str, on_gpu: bool, torch) -> bool:
    if not on_gpu:
        return False
    hip = getattr(torch.version, "hip", None)
    if arch == "rocm":
        return bool(hip)
    if arch == "cuda":
        return not hip
    if arch.startswith("gfx"):
        return bool(hip) and torch.cuda.get_device_properties(0).gcnArchName.startswith(arch)
    if arch.startswith("sm_") and arch[3:].rstrip("a").isdigit():
        major, minor = torch.cuda.get_device_capability()
        # Same major version: sm_90a kernels do not run on sm_100, nor sm_100 ones on sm_90.
        return not hip and major == int(arch[3:].rstrip("a")) // 10
    raise problem.TaskError(f"task.yml requires.arch: unknown architecture {arch!r}; use sm_NN, gfxNNN, cuda or rocm.")


def _arch_name(arch: str) -> str:
    return {"rocm": "ROCm", "cuda": "an NVIDIA GPU"}.get(arch, arch)


def _available_bytes(on_gpu: bool, torch) -> int | None:
    if on_gpu:
        free, _total = torch.cuda.mem_get_info()
        return int(free)
    limits = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_DATA, resource.RLIMIT_AS)]
    limits = [v for v in limits if v not in (resource.RLIM_INFINITY, -1) and v > 0]
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    limits.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    return min(limits) if limits else None


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**28 else f"{n / 2**20:.0f} MiB"
