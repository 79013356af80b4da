"""Problems people already have: GPU MODE problem folders and KernelBench problem files.

Each importer writes a kgit problem folder (task.yml, reference.py, helpers) into a
scratch folder and returns it with the source of the editable kernel; `kgit init`
then measures and commits the baseline as for a shipped problem. Nothing is executed
while importing: the sources are only parsed, and run for the first time inside the
harness's child process.
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import sys
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path

import yaml

from kgit import workflow
from kgit.errors import KgitError
from kgit_harness import problem as problem_format

GPUMODE_HELPERS = "gpumode"  # subfolder of the problem holding the GPU MODE sources
KERNELBENCH_INIT_SEED = 0
# Seeded before every forward of Model and of ModelNew, as KernelBench's own eval seeds
# before each: a model in training mode (level2/66's nn.Dropout) draws the same mask in both.
KERNELBENCH_FORWARD_SEED = 1
ADAPTER_MARK = "# ---- added by kgit init --from-{} ----"


class ImportProblemError(KgitError):
    """A folder or file that is not the kind of problem it was given as."""


def init_from_gpumode(directory: Path, source: Path, protocol: str | None = None,
                      **init_options) -> workflow.Outcome:
    """`kgit init DIRECTORY --from-gpumode SOURCE`: measure and commit the imported baseline."""
    with tempfile.TemporaryDirectory(prefix="kgit-import-") as scratch:
        problem_dir, kernel = gpumode_problem(Path(source), Path(scratch) / "problem", protocol)
        return workflow.init(directory, problem_dir=problem_dir, kernel_source=kernel, **init_options)


def init_from_kernelbench(directory: Path, source: Path, protocol: str | None = None,
                          **init_options) -> workflow.Outcome:
    """`kgit init DIRECTORY --from-kernelbench SOURCE`: measure and commit the imported baseline."""
    with tempfile.TemporaryDirectory(prefix="kgit-import-") as scratch:
        problem_dir, kernel = kernelbench_problem(Path(source), Path(scratch) / "problem", protocol)
        return workflow.init(directory, problem_dir=problem_dir, kernel_source=kernel, **init_options)


# -- timing protocols -----------------------------------------------------------------------
# What each of GPU MODE's evaluators does in its timed loop, as read from its eval.py: the
# markers of its leaderboard mode (harness/protocols.py names the protocols).
_EVAL_MARKERS = (
    ("gpumode-batch", ("NUM_ITERATIONS_PER_BENCHMARK", "elapsed_time", "custom_kernel(data)")),
    ("gpumode-leaderboard-events", ("Event(enable_timing=True)", "clear_l2_cache()", "elapsed_time",
                                    "custom_kernel(data)")),
    ("gpumode-leaderboard-wall", ("perf_counter_ns()", "synchronize()", "custom_kernel(data)", "leaderboard")),
)


def _chosen_protocol(protocol: str | None) -> str | None:
    if protocol is None:
        return None
    from kgit_harness import protocols

    try:
        return protocols.get(protocol).name
    except ValueError as e:
        raise ImportProblemError(f"--protocol: {e}.") from None


def gpumode_eval(source: Path, spec: dict) -> Path | None:
    """The eval.py that runs this GPU MODE problem: its own, the one task.yml's `files` names, or
    the one beside it in a reference-kernels checkout (problems/amd/eval.py for problems/amd/fp8-mm)."""
    for entry in spec.get("files") or []:
        if isinstance(entry, dict) and entry.get("name") == "eval.py" and isinstance(entry.get("source"), str):
            path = (source / entry["source"]).resolve()
            if path.is_file():
                return path
    for path in (source / "eval.py", source.parent / "eval.py"):
        if path.is_file():
            return path
    return None


def recognise_eval(path: Path) -> str | None:
    """The protocol of a GPU MODE eval.py's leaderboard mode, or None when it is none kgit knows."""
    text = _read(path)
    for name, markers in _EVAL_MARKERS:
        if all(marker in text for marker in markers):
            return name
    return None


def _gpumode_protocol(source: Path, spec: dict, protocol: str | None) -> tuple[str, str]:
    """(the protocol, the sentence task.yml keeps about where it came from)."""
    chosen = _chosen_protocol(protocol)
    path = gpumode_eval(source, spec)
    if chosen is not None:
        return chosen, "chosen with --protocol" + (f" (the problem's evaluator is {path.name})" if path else "")
    if path is None:
        return "kgit-adaptive", ("no eval.py came with the problem (its own folder, task.yml's files, the folder "
                                 "above), so kgit's own protocol; choose another with --protocol")
    found = recognise_eval(path)
    if found is None:
        from kgit_harness import protocols

        raise ImportProblemError(f"{path}: kgit does not recognise this eval.py's leaderboard timing, so it cannot "
                                 "time the problem the way its evaluator does. Name the protocol that matches it: "
                                 f"`kgit init ... --protocol NAME`, one of {', '.join(protocols.PROTOCOLS)} "
                                 "(docs/problems.md, \"Timing protocols\").")
    return found, f"recognised from {path.name}, the problem's evaluator"


# -- GPU MODE ---------------------------------------------------------------------------------
GPUMODE_SHAPE = ("a GPU MODE problem folder holds reference.py (generate_input, ref_kernel, optionally "
                 "check_implementation), task.yml (tests, benchmarks) and submission.py (custom_kernel)")


def gpumode_problem(source: Path, dest: Path, protocol: str | None = None) -> tuple[Path, str]:
    """Write a kgit problem folder for the GPU MODE folder `source`; return it and the kernel source.

    The timing protocol is `protocol`, else the one its eval.py's leaderboard mode follows."""
    if not source.is_dir():
        raise ImportProblemError(f"{source} is not a folder: {GPUMODE_SHAPE}.")
    missing = [name for name in ("reference.py", "task.yml") if not (source / name).is_file()]
    spec = _read_yaml(source / "task.yml") if "task.yml" not in missing else {}
    submission = _gpumode_submission(source, spec)
    if submission is None:
        missing.append("submission.py")
    if missing:
        raise ImportProblemError(f"{source} has no {' and no '.join(missing)}: {GPUMODE_SHAPE}.")
    reference_text = _read(source / "reference.py")
    if _is_forward_backward(reference_text, source):
        # Its own eval.py times forward then backward, which no GPU MODE leaderboard protocol does.
        return _forward_backward_problem(source, dest, spec, reference_text, submission,
                                         _chosen_protocol(protocol) or "kgit-adaptive")
    timed_by, timed_why = _gpumode_protocol(source, spec, protocol)
    _require_names(source / "reference.py", reference_text, ("generate_input", "ref_kernel"))
    kernel = _read(submission)
    _require_names(submission, kernel, ("custom_kernel",))
    for kind in ("tests", "benchmarks"):
        shapes = spec.get(kind)
        if not isinstance(shapes, list) or not shapes or not all(isinstance(s, dict) and s for s in shapes):
            raise ImportProblemError(f"{source / 'task.yml'} has no {kind!r} list of shapes "
                                     "(such as - {m: 64, n: 64, seed: 1}): kgit needs tests and benchmarks.")

    helpers = dest / GPUMODE_HELPERS
    helpers.mkdir(parents=True)
    (helpers / "reference.py").write_text(reference_text, encoding="utf-8")
    for name, path in _gpumode_helpers(source, spec, submission):
        shutil.copy2(path, helpers / name)
    has_check = "check_implementation" in _top_level_names(reference_text)
    reference_tree = _parse(source / "reference.py", reference_text)
    output = _returned_input(reference_tree)
    if output is None:
        output = _unread_buffer(reference_tree)
    if output is None:
        output = _written_by_submission(_parse(submission, kernel))
    (dest / "reference.py").write_text(_gpumode_adapter(has_check, output is not None), encoding="utf-8")
    helper_texts = [_read(p) for name, p in _gpumode_helpers(source, spec, submission) if name.endswith(".py")]
    # The submission's imports are the baseline kernel's, not the problem's: a later kernel
    # may drop them. Its words still tell which GPU the problem is for.
    requires = _gpumode_requires(source, [reference_text, kernel, *helper_texts], reference_tree,
                                 [ast.parse(t) for t in helper_texts], spec)
    description = str(spec.get("description") or "").strip()
    task = {
        "name": _gpumode_name(source),
        "summary": _first_line(description) or f"GPU MODE problem {source.name}",
        "description": description + "\n\n(Imported from the GPU MODE problem folder " + source.name
                       + f"; its sources are in problem/gpumode/. Timed by {timed_by}: {timed_why}.)",
        "files": ["kernel.py"],
        "tests": spec["tests"],
        "benchmarks": spec["benchmarks"],
        "cpu": _gpumode_cpu_shapes(spec["tests"]),
        "ranking": "mean",
        "protocol": timed_by,
        **({"output": output} if output is not None else {}),
        **({"requires": requires} if requires else {}),
        "tolerance": {"why": "The GPU MODE reference's check_implementation decides." if has_check
                      else "No check_implementation in the GPU MODE reference: an allclose at kgit's default tolerance."},
    }
    _write_task(dest, task)
    return dest, kernel


def _gpumode_submission(source: Path, spec: dict) -> Path | None:
    """submission.py, else the Python template that task.yml names."""
    names = ["submission.py"]
    templates = spec.get("templates") if isinstance(spec.get("templates"), dict) else {}
    names += [str(t) for lang, t in templates.items() if str(lang).lower() in ("python", "py")]
    return next((source / name for name in names if (source / name).is_file()), None)


def _gpumode_helpers(source: Path, spec: dict, submission: Path):
    """(name, path) of the modules the reference and submission import: the `files` of task.yml."""
    skip = {"reference.py", "eval.py", submission.name}
    entries = spec.get("files")
    if not isinstance(entries, list):
        # No list of files: take the sibling modules, as GPU MODE's runner would see them.
        return [(p.name, p) for p in sorted(source.glob("*.py")) if p.name not in skip and not p.name.startswith("template")]
    found = []
    for entry in entries:
        if not isinstance(entry, dict) or "name" not in entry:
            continue
        name, where = str(entry["name"]), str(entry.get("source", entry["name"]))
        if name in skip or where.startswith("@"):
            continue
        path = (source / where).resolve()
        # task.yml is input from elsewhere: its names stay plain file names, and its sources
        # stay within the problem collection (GPU MODE keeps shared helpers one level up).
        collection = source.resolve().parent.parent
        if Path(name).name != name or name in ("", ".", "..") or Path(where).is_absolute() \
                or not path.is_relative_to(collection):
            raise ImportProblemError(f"{source / 'task.yml'} lists {name!r} from {where!r}, outside the problem "
                                     f"collection {collection}; only plain file names from there can be imported.")
        if not path.is_file():
            raise ImportProblemError(f"{source / 'task.yml'} lists {name} from {where}, but {path} does not exist; "
                                     "import from a full checkout of the problem repository.")
        found.append((name, path))
    return found


def _returned_input(tree: ast.Module) -> int | list | None:
    """The index in `data` of a preallocated output, read from ref_kernel's source.

    GPU MODE references unpack `a, b, c = data` and `return c` when c is filled in place;
    that c is the harness's `output` (poisoned before each call, and the one input a
    kernel may write). `return x_q, x_s` of two unpacked buffers (helion's int8_quant)
    gives a list of indices. Other shapes of ref_kernel leave it unknown.
    """
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "ref_kernel"), None)
    if func is None or not func.args.args:
        return None
    data = func.args.args[0].arg
    unpacked: list[str | None] | None = None
    returned: str | list[str] | None = None
    for node in ast.walk(func):
        if (unpacked is None and isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                and node.value.id == data and isinstance(node.targets[0], ast.Tuple)):
            unpacked = [t.id if isinstance(t, ast.Name) else None for t in node.targets[0].elts]
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
            returned = node.value.id
        elif (isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple)
              and all(isinstance(e, ast.Name) for e in node.value.elts)):
            returned = [e.id for e in node.value.elts if isinstance(e, ast.Name)]
    if unpacked and isinstance(returned, list) and returned and all(r in unpacked for r in returned):
        return [unpacked.index(r) for r in returned]
    if unpacked and isinstance(returned, str) and returned in unpacked:
        return unpacked.index(returned)
    return None


# Calls that make a fresh buffer for a kernel to fill: no values a reference could read.
_BUFFER_CALLS = {"empty", "zeros", "empty_like", "zeros_like", "empty_strided", "new_empty", "new_zeros"}


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _unpacked(func: ast.FunctionDef) -> list | None:
    """The names `a, b, c = data` binds from the function's first argument, in order."""
    if not func.args.args:
        return None
    data = func.args.args[0].arg
    for node in ast.walk(func):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == data
                and isinstance(node.targets[0], (ast.Tuple, ast.List))):
            return [t.id if isinstance(t, ast.Name) else None for t in node.targets[0].elts]
    return None


def _loaded(func: ast.FunctionDef) -> set:
    return {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _unread_buffer(tree: ast.Module) -> int | None:
    """The index of an output buffer that generate_input makes and ref_kernel never reads.

    The pmpp_v2 convention: generate_input returns `(..., torch.empty(...))`, ref_kernel
    unpacks `..., output = data` and returns a fresh tensor, and a submission fills the
    buffer. Both must agree: the element is a fresh buffer, and the reference ignores it.
    """
    ref, gen = _function(tree, "ref_kernel"), _function(tree, "generate_input")
    names = _unpacked(ref) if ref else None
    if not names or gen is None:
        return None
    unread = [i for i, name in enumerate(names) if name and name not in _loaded(ref)]
    returns = [n.value for n in ast.walk(gen) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)]
    if len(unread) != 1 or len(returns) != 1 or len(returns[0].elts) != len(names):
        return None
    made = returns[0].elts[unread[0]]
    if isinstance(made, ast.Name):  # out = torch.empty(...); return a, b, out
        made = next((n.value for n in ast.walk(gen) if isinstance(n, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == made.id for t in n.targets)), None)
    callee = made.func if isinstance(made, ast.Call) else None
    name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
    return unread[0] if name in _BUFFER_CALLS else None


def _written_by_submission(tree: ast.Module) -> int | None:
    """The index of the input that custom_kernel writes into and returns, e.g. `c.copy_(...)`; `return c`."""
    func = _function(tree, "custom_kernel")
    names = _unpacked(func) if func else None
    if not names:
        return None
    returned = {n.value.id for n in ast.walk(func) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)}
    written = set()
    for node in ast.walk(func):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_")
                and not node.func.attr.startswith("_") and isinstance(node.func.value, ast.Name)):
            written.add(node.func.value.id)  # out.copy_(...), out.zero_()
        if isinstance(node, ast.Call):
            written |= {k.value.id for k in node.keywords if k.arg == "out" and isinstance(k.value, ast.Name)}
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name):
            written.add(node.value.id)  # out[...] = ...
    hits = [i for i, name in enumerate(names) if name and name in written and name in returned]
    return hits[0] if len(hits) == 1 else None


# Words in a problem's sources that only an sm_100 GPU (B200) runs: Blackwell's tensor-core
# instructions and the fp4 types its kernels and checks are written in. GPU MODE's `gpus:`
# says where a competition ran (qr_v2 lists the B200 and runs on any CUDA GPU), so it is
# not read as a requirement.
_SM100_MARKERS = ("tcgen05", "sm_100", "sm100a", "float4_e2m1fn")
_PROVIDED = {"task", "utils", "reference", "submission"}


def _gpumode_requires(source: Path, texts: list, reference: ast.Module, others: list, spec: dict) -> dict:
    """What the problem needs of the machine, read from its shapes and sources.

    - gpus: the largest `world_size` of the shapes (distributed problems take `rank`);
    - arch: sm_100 when the sources use what only Blackwell runs (_SM100_MARKERS);
    - modules: the reference's and helpers' top-level imports that are neither the
      standard library nor modules of the problem folder (aiter, cutlass, helion, cuda).
    """
    requires = {}
    gen = _function(reference, "generate_input")
    params = {a.arg for a in gen.args.args + gen.args.kwonlyargs} if gen else set()
    sizes = [s.get("world_size") for s in spec["tests"] + spec["benchmarks"] if isinstance(s.get("world_size"), int)]
    if sizes or "rank" in params:
        requires["gpus"] = max(sizes + [2])
    if any(marker in text for text in texts for marker in _SM100_MARKERS):
        requires["arch"] = ["sm_100"]
    local = _PROVIDED | {p.stem for p in source.glob("*.py")}
    modules = set()
    for tree in [reference] + others:
        for node in tree.body:  # imports inside try/except or functions are optional ones
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                modules.add(node.module.split(".")[0])
    needed = sorted(m for m in modules if m not in sys.stdlib_module_names and m not in local
                    and m not in ("torch", "triton", "numpy"))
    if needed:
        requires["modules"] = needed
    return requires


def _size(shape: dict) -> int:
    product = 1
    for key, value in shape.items():
        if key != "seed" and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            product *= value
    return product


def _gpumode_cpu_shapes(tests: list) -> dict:
    """Shapes for a host without a GPU: the two smallest tests, and the smallest as the benchmark.

    GPU MODE benchmarks are sized for a GPU (linalg's reach n = 32768); its tests are
    the problem author's own small cases, so correctness on a laptop uses those.
    """
    ordered = sorted(tests, key=_size)
    return {"tests": ordered[:2], "benchmarks": ordered[:1]}


_FORWARD_BACKWARD = ("generate_inputs", "reference_forward", "reference_backward")


def _is_forward_backward(text: str, source: Path) -> bool:
    names = _top_level_names(text, source / "reference.py")
    return "generate_input" not in names and any(n in names for n in _FORWARD_BACKWARD)


@dataclass(frozen=True)
class _ForwardBackward:
    """What a forward-and-backward folder's sources say, read and checked."""

    generate: ast.FunctionDef  # reference.py's generate_inputs
    forward: ast.FunctionDef  # reference_forward
    backward: ast.FunctionDef  # reference_backward
    params: list[str]  # generate_inputs' parameters
    returned: list[str]  # the names generate_inputs returns
    fixed: dict  # sizes eval.py's own call of generate_inputs fixes (its batch size)
    seed: int  # generate_inputs' default seed
    kernel_text: str  # the submission
    kernel_forward: ast.FunctionDef  # its *_forward
    kernel_backward: ast.FunctionDef  # its *_backward
    constants: dict  # the reference's module-level numbers (RTOL, ATOL)


def _forward_backward_problem(source: Path, dest: Path, spec: dict, reference_text: str,
                              submission: Path, protocol: str) -> tuple[Path, str]:
    """A forward-and-backward folder (princeton/cross_entropy_py) as one kgit problem.

    Its reference defines generate_inputs(batch, ..., seed=S), reference_forward and
    reference_backward; its submission two functions named *_forward and *_backward; its
    own eval.py fixes the batch size and times forward then backward. kgit's problem calls
    both in one custom_kernel(data) and compares the pair, so a call is timed as eval.py's
    combined figure is. Every name is read from the sources, never guessed: what cannot be
    read is refused with what to write instead.
    """
    found = _read_forward_backward(source, spec, reference_text, submission)
    helpers = dest / GPUMODE_HELPERS
    helpers.mkdir(parents=True)
    (helpers / "reference.py").write_text(reference_text, encoding="utf-8")
    (dest / "reference.py").write_text(_forward_backward_adapter(found.params, found.returned, found.forward,
                                                                 found.backward), encoding="utf-8")
    _write_task(dest, _forward_backward_task(source, spec, found, protocol))
    return dest, _forward_backward_kernel(found)


def _read_forward_backward(source: Path, spec: dict, reference_text: str, submission: Path) -> _ForwardBackward:
    """The names and sizes the folder's sources give; ImportProblemError saying what to write
    where one cannot be read."""
    reference_tree = _parse(source / "reference.py", reference_text)
    gen, fwd, bwd = (_function(reference_tree, n) for n in _FORWARD_BACKWARD)
    kernel_text = _read(submission)
    kernel_tree = _parse(submission, kernel_text)
    mine = {n.name: n for n in kernel_tree.body if isinstance(n, ast.FunctionDef)}
    forward = [n for n in mine if n.endswith("_forward")]
    backward = [n for n in mine if n.endswith("_backward")]
    returned = _returned_names(gen) if gen else None
    fixed = _eval_call_sizes(source / "eval.py", gen) if gen else {}
    problems = []
    if gen is None or fwd is None or bwd is None:
        problems.append(f"reference.py defines no {', no '.join(n for n, f in zip(_FORWARD_BACKWARD, (gen, fwd, bwd)) if f is None)}")
    elif returned is None or not all(a.arg in returned for f in (fwd, bwd) for a in f.args.args):
        problems.append("generate_inputs does not end in `return a, b, ...` naming what reference_forward and "
                        "reference_backward take")
    if len(forward) != 1 or len(backward) != 1:
        problems.append(f"{submission.name} defines {len(forward)} function(s) named *_forward and {len(backward)} "
                        "named *_backward, not one of each")
    if problems or gen is None or fwd is None or bwd is None or returned is None:
        raise ImportProblemError(
            f"{source} is a forward-and-backward problem, but {'; '.join(problems)}. kgit reads these folders when "
            "generate_inputs returns named tensors that reference_forward/reference_backward take by the same "
            "names; otherwise write generate_input(**shape), ref_kernel(data) and custom_kernel(data) (returning "
            "the forward and backward outputs as a tuple) in the folder and import it again.")
    params = [a.arg for a in gen.args.args]
    defaults = dict(zip(params[len(params) - len(gen.args.defaults):], gen.args.defaults))
    shape_keys = {k for s in spec["tests"] + spec["benchmarks"] for k in s}
    missing = [p for p in params if p not in shape_keys and p not in fixed and p not in defaults]
    if missing:
        raise ImportProblemError(
            f"{source}: generate_inputs takes {', '.join(missing)}, which neither task.yml's shapes nor eval.py's call "
            f"of generate_inputs give a value; add {missing[0]} to every shape in task.yml and import it again.")
    seed_default = defaults.get("seed")
    seed = seed_default.value if isinstance(seed_default, ast.Constant) and isinstance(seed_default.value, int) else 0
    kernel_forward, kernel_backward = mine[forward[0]], mine[backward[0]]
    unknown = [a.arg for f in (kernel_forward, kernel_backward) for a in f.args.args if a.arg not in returned]
    if unknown:
        raise ImportProblemError(f"{submission} takes {unknown[0]}, which generate_inputs does not return "
                                 f"({', '.join(returned)}); name the arguments as the reference does.")
    return _ForwardBackward(gen, fwd, bwd, params, [str(r) for r in returned], fixed, seed, kernel_text,
                            kernel_forward, kernel_backward, _module_numbers(reference_tree))


def _forward_backward_kernel(found: _ForwardBackward) -> str:
    """The submission with the custom_kernel(data) kgit calls appended: both functions, one call."""
    f_args = ", ".join(a.arg for a in found.kernel_forward.args.args)
    b_args = ", ".join(a.arg for a in found.kernel_backward.args.args)
    return found.kernel_text.rstrip() + "\n\n\n" + f'''{ADAPTER_MARK.format("gpumode")}
# kgit calls custom_kernel(data) with generate_inputs' ({", ".join(found.returned)}) and compares
# both outputs with the reference's; one call is timed as eval.py's forward+backward figure.
def custom_kernel(data):
    {", ".join(found.returned)}, = data
    return {found.kernel_forward.name}({f_args}), {found.kernel_backward.name}({b_args})
'''


def _forward_backward_task(source: Path, spec: dict, found: _ForwardBackward, protocol: str) -> dict:
    """The task.yml of the imported problem: eval.py's fixed sizes, then each shape's own keys and seed."""
    def full(shape: dict, n: int) -> dict:
        return {**{k: v for k, v in found.fixed.items() if k not in shape}, **shape,
                "seed": shape.get("seed", found.seed + n)}

    tests = [full(s, 0) for s in spec["tests"]]
    benchmarks = [full(s, 1) for s in spec["benchmarks"]]
    constants = found.constants
    description = str(spec.get("description") or "").strip()
    batch_note = "".join(f" {k} = {v} comes from its eval.py." for k, v in found.fixed.items())
    return {
        "name": _gpumode_name(source),
        "summary": _first_line(description) or f"GPU MODE problem {source.name}",
        "description": description + f"\n\n(Imported from the GPU MODE forward-and-backward folder {source.name}; "
                       "custom_kernel(data) returns (forward output, backward output)." + batch_note
                       + " Its sources are in problem/gpumode/.)",
        "files": ["kernel.py"],
        "tests": tests,
        "benchmarks": benchmarks,
        "cpu": _forward_backward_cpu(tests, found.fixed),
        "ranking": "mean",
        "protocol": protocol,
        "tolerance": {"rtol": float(constants.get("RTOL", 1e-5)), "atol": float(constants.get("ATOL", 1e-6)),
                      "why": "The reference's own RTOL and ATOL, applied to the forward and the backward output "
                             "as its eval.py does (torch.allclose on each)." if "RTOL" in constants
                      else "No RTOL/ATOL in the reference: kgit's default tolerance."},
    }


def _returned_names(func: ast.FunctionDef) -> list | None:
    """The names a function returns as `return a, b, c` (its last return), or None."""
    returns = [n for n in ast.walk(func) if isinstance(n, ast.Return) and n.value is not None]
    if not returns or not isinstance(returns[-1].value, ast.Tuple):
        return None
    names = [e.id if isinstance(e, ast.Name) else None for e in returns[-1].value.elts]
    return names if all(names) else None


def _module_numbers(tree: ast.Module) -> dict:
    return {n.targets[0].id: n.value.value for n in tree.body
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.Constant) and type(n.value.value) in (int, float)}


def _eval_call_sizes(eval_path: Path, gen: ast.FunctionDef) -> dict:
    """Arguments eval.py passes to generate_inputs as module-level numbers (`B = 4_096`)."""
    if not eval_path.is_file():
        return {}
    tree = _parse(eval_path, _read(eval_path))
    numbers = _module_numbers(tree)
    params = [a.arg for a in gen.args.args]
    sizes: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "generate_inputs":
            for name, arg in zip(params, node.args):
                if isinstance(arg, ast.Name) and isinstance(numbers.get(arg.id), int):
                    sizes.setdefault(name, numbers[arg.id])
    return sizes


# A forward-and-backward problem on a host without a GPU: eval.py's batch cut to this
# many rows (the rows are independent; the vocabulary, what a kernel tiles over, stays).
FORWARD_BACKWARD_CPU_BATCH = 8


def _forward_backward_cpu(tests: list, fixed: dict) -> dict:
    small = [{**s, **{k: min(int(s[k]), FORWARD_BACKWARD_CPU_BATCH) for k in fixed if isinstance(s.get(k), int)}}
             for s in tests]
    return {"tests": small[:2], "benchmarks": [dict(s) for s in small[:1]]}


def _forward_backward_adapter(params: list, returned: list, fwd: ast.FunctionDef, bwd: ast.FunctionDef) -> str:
    f_args = ", ".join(a.arg for a in fwd.args.args)
    b_args = ", ".join(a.arg for a in bwd.args.args)
    call = ", ".join(f"{p}={p}" for p in params)
    return f'''"""Written by `kgit init --from-gpumode`: a forward-and-backward problem as one kgit problem.

The folder's own reference is in gpumode/; generate_input and ref_kernel call its
generate_inputs, reference_forward and reference_backward, with `device="cuda"` mapped
to the CPU on a host without a GPU (kgit_harness.portable).
"""

import importlib.util
from pathlib import Path

from kgit_harness import portable as _portable

_HERE = Path(__file__).resolve().parent / "{GPUMODE_HELPERS}"
_spec = importlib.util.spec_from_file_location("gpumode_reference", _HERE / "reference.py")
_reference = importlib.util.module_from_spec(_spec)
with _portable.on_cpu():
    _spec.loader.exec_module(_reference)


def generate_input({", ".join(params)}):
    with _portable.on_cpu():
        return tuple(_reference.generate_inputs({call}))


def ref_kernel(data):
    {", ".join(returned)}, = data
    with _portable.on_cpu():
        return (_reference.reference_forward({f_args}), _reference.reference_backward({b_args}))
'''


def _gpumode_name(source: Path) -> str:
    first = _read(source / "task.yml").splitlines()[:1]
    match = re.match(r"#\s*name:\s*(.+?)\s*$", first[0]) if first else None
    name = match.group(1).strip("\"'").strip() if match else ""
    return name or source.name


def _gpumode_adapter(has_check: bool, has_buffer: bool = False) -> str:
    # With an output buffer among the inputs, the check is given the buffer in the shape the
    # reference's result has where they differ only by dimensions of size 1 (vectorsum's (1,)
    # buffer and 0-d sum): the problem's own check compares shapes first.
    reshape = ("        output = _portable.shaped_as_reference(_reference.ref_kernel, data, output, _RESULT_SHAPES)\n"
               if has_buffer else "")
    check = f'''

_RESULT_SHAPES = {{}}


def check_implementation(data, output):
    with _portable.on_cpu():
{reshape}        return _reference.check_implementation(data, output)
''' if has_check else ""
    return f'''"""Written by `kgit init --from-gpumode`: the problem's own reference lives in gpumode/.

GPU MODE references import their sibling modules (task.py, utils.py), so that folder
goes on the import path before the reference is loaded. They also name `device="cuda"`
outright; on a host without a GPU, `portable.on_cpu()` maps it to the CPU while the
reference's own code runs (on a GPU host it changes nothing).
"""

import importlib.util
import sys
from pathlib import Path

from kgit_harness import portable as _portable

_HERE = Path(__file__).resolve().parent / "{GPUMODE_HELPERS}"
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))
_spec = importlib.util.spec_from_file_location("gpumode_reference", _HERE / "reference.py")
_reference = importlib.util.module_from_spec(_spec)
with _portable.on_cpu():
    _spec.loader.exec_module(_reference)


def generate_input(**shape):
    with _portable.on_cpu():
        return _reference.generate_input(**shape)


def ref_kernel(data):
    with _portable.on_cpu():
        return _reference.ref_kernel(data)
{check}'''


# -- KernelBench --------------------------------------------------------------------------------
KERNELBENCH_SHAPE = ("a KernelBench problem file defines class Model (an nn.Module), get_inputs() "
                     "and get_init_inputs()")


def kernelbench_problem(source: Path, dest: Path, protocol: str | None = None) -> tuple[Path, str]:
    """Write a kgit problem folder for the KernelBench file `source`; return it and the kernel source.

    Timed as KernelBench times a kernel (kernelbench-events) unless `protocol` says otherwise."""
    if not source.is_file():
        raise ImportProblemError(f"{source} is not a file: {KERNELBENCH_SHAPE}.")
    text = _read(source)
    tree = _parse(source, text)
    names = _top_level_names(text, source)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        raise ImportProblemError(f"{source} defines no {', no '.join(missing)}: {KERNELBENCH_SHAPE}.")
    if "ModelNew" in names:
        raise ImportProblemError(f"{source} already defines ModelNew: import the problem file, not a solution; "
                                 "kgit writes the first ModelNew itself.")

    sizes = _kernelbench_sizes(tree)
    shape = sizes or {"inputs": "get_inputs"}
    cpu_shape = _kernelbench_cpu_shape(tree, sizes) if sizes else None
    dest.mkdir(parents=True)
    (dest / "reference.py").write_text(text.rstrip() + "\n\n\n" + _kernelbench_reference(), encoding="utf-8")
    kernel = _rename_model(text).rstrip() + "\n\n\n" + _kernelbench_kernel()
    doc = ast.get_docstring(tree) or _class_doc(tree, "Model") or ""
    task = {
        "name": re.sub(r"[^A-Za-z0-9_.-]+", "_", source.stem),
        "summary": _first_line(doc) or f"KernelBench problem {source.stem}",
        "description": (doc + "\n\n" if doc else "") + (
            f"Imported from the KernelBench file {source.name}. `data` is the tuple get_inputs() returns; "
            "custom_kernel(data) must return what Model.forward returns. kernel.py starts as ModelNew, a "
            "copy of Model; both are built after torch.manual_seed("
            f"{KERNELBENCH_INIT_SEED}), so they hold the same weights while ModelNew creates its parameters "
            f"in the same order, and both forwards run after torch.manual_seed({KERNELBENCH_FORWARD_SEED}), so "
            "random layers (dropout, in training mode as in KernelBench) draw the same values."),
        "files": ["kernel.py"],
        "tests": [{**shape, "seed": 1}, {**shape, "seed": 2}],
        "benchmarks": [{**shape, "seed": 3}],
        **({"cpu": {"tests": [{**cpu_shape, "seed": 1}, {**cpu_shape, "seed": 2}],
                    "benchmarks": [{**cpu_shape, "seed": 3}]}} if cpu_shape else {}),
        "ranking": "mean",
        "protocol": _chosen_protocol(protocol) or "kernelbench-events",
        "tolerance": {"rtol": 1e-2, "atol": 1e-2, "relative": 1e-2,
                      "why": "KernelBench's own tolerance: fp32 outputs within 1e-2 absolute and relative; and, "
                             "as kgit adds, an error RMS within 1e-2 of the output's RMS, so outputs far "
                             "below atol (softmaxes of ~1e-4) cannot pass as zeros."},
    }
    _write_task(dest, task)
    return dest, kernel


def _kernelbench_sizes(tree: ast.Module) -> dict:
    """Module-level numbers that get_inputs or get_init_inputs read: the benchmark's sizes.

    A size may be an expression over earlier ones (`N = 2048 * 2`, `dim = N // 4`); it is
    evaluated with the harness's arithmetic-only formula evaluator, never executed.
    """
    constants: dict = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value = _arithmetic(node.value, constants)
        if value is not None:
            constants[node.targets[0].id] = value
    used = _names_read(tree, ("get_inputs", "get_init_inputs"))
    return {name: value for name, value in constants.items() if name in used and name != "seed"}


def _arithmetic(node: ast.expr, known: dict) -> int | float | None:
    """The value of a constant expression over `known` names, or None if it is anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and type(node.value) in (int, float):
        return node.value
    if not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Call)):
        return None
    try:
        value = problem_format.formula(ast.unparse(node), known)
    except (problem_format.TaskError, ArithmeticError, TypeError, ValueError, SyntaxError):
        return None
    floats = any(isinstance(n, ast.Constant) and isinstance(n.value, float) for n in ast.walk(node)) \
        or any(isinstance(n, ast.Div) for n in ast.walk(node)) \
        or any(isinstance(known.get(n.id), float) for n in ast.walk(node) if isinstance(n, ast.Name))
    return value if floats or value != int(value) else int(value)


def _names_read(tree: ast.Module, functions: tuple) -> set:
    used = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in functions:
            used |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return used


# The CPU shape keeps a batch of 2 and every other size at most 64: Model on the CPU,
# checked in seconds, not the GPU's gigabytes.
CPU_BATCH, CPU_SIZE = 2, 64


def _kernelbench_cpu_shape(tree: ast.Module, sizes: dict) -> dict | None:
    """The shape for a host without a GPU: get_inputs' sizes made small, or None if none can be.

    Only sizes that nothing but get_inputs reads are shrunk: get_init_inputs builds the
    weights (the kernel's ModelNew reads its own copy of those sizes), and a size Model
    reads as a global must match between the reference and the kernel.
    """
    fixed = _names_read(tree, ("get_init_inputs",))
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fixed |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    small = {}
    for name, value in sizes.items():
        if name in fixed or not isinstance(value, int) or value <= 0:
            small[name] = value
        else:
            small[name] = min(value, CPU_BATCH if "batch" in name.lower() else CPU_SIZE)
    return small if small != sizes else None


def _kernelbench_reference() -> str:
    return f'''{ADAPTER_MARK.format("kernelbench")}
# The problem above is KernelBench's; these functions give it kgit's interface.
import torch as _kgit_torch

_kgit_models = {{}}


def _kgit_device():
    return "cuda" if _kgit_torch.cuda.is_available() else "cpu"


def generate_input(seed, **sizes):
    globals().update({{k: v for k, v in sizes.items() if k != "inputs"}})
    _kgit_torch.manual_seed(seed)
    return tuple(x.to(_kgit_device()) if isinstance(x, _kgit_torch.Tensor) else x for x in get_inputs())


def ref_kernel(data):
    key = _kgit_device()
    if key not in _kgit_models:
        # The same seed as kernel.py's ModelNew: both start from the same weights.
        _kgit_torch.manual_seed({KERNELBENCH_INIT_SEED})
        _kgit_models[key] = Model(*get_init_inputs()).to(key)
    _kgit_torch.manual_seed({KERNELBENCH_FORWARD_SEED})  # dropout draws what ModelNew's forward draws
    with _kgit_torch.no_grad():
        return _kgit_models[key](*data)
'''


def _kernelbench_kernel() -> str:
    return f'''{ADAPTER_MARK.format("kernelbench")}
# kgit calls custom_kernel(data) with the tuple get_inputs() returns. Make ModelNew fast;
# keep creating its parameters in Model's order, so the seeded weights stay equal.
import torch as _torch

_models = {{}}


def custom_kernel(data):
    device = next((x.device for x in data if isinstance(x, _torch.Tensor)), None)
    if device is None:
        device = _torch.device("cuda" if _torch.cuda.is_available() else "cpu")
    if device not in _models:
        _torch.manual_seed({KERNELBENCH_INIT_SEED})
        _models[device] = ModelNew(*get_init_inputs()).to(device)
    _torch.manual_seed({KERNELBENCH_FORWARD_SEED})  # as before Model's forward: the same dropout masks
    with _torch.no_grad():
        return _models[device](*data)
'''


def _rename_model(text: str) -> str:
    """The source with the name Model (class, super() calls, annotations) renamed ModelNew."""
    lines = text.splitlines(keepends=True)
    hits = [tok.start for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.NAME and tok.string == "Model"]
    for row, col in reversed(hits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + "ModelNew" + line[col + len("Model"):]
    return "".join(lines)


def _class_doc(tree: ast.Module, name: str) -> str | None:
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    return ast.get_docstring(node) if node else None


# -- shared ------------------------------------------------------------------------------------
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(_read(path))
    except yaml.YAMLError as e:
        raise ImportProblemError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ImportProblemError(f"{path} must be a mapping with tests and benchmarks.")
    return data


def _parse(path: Path, text: str) -> ast.Module:
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise ImportProblemError(f"{path}:{e.lineno}: {e.msg}; fix the file and import it again.") from None


def _top_level_names(text: str, path: Path | None = None) -> set[str]:
    """Names a module defines at its top level: functions, classes, assignments, imports."""
    names = set()
    for node in _parse(path or Path("reference.py"), text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _require_names(path: Path, text: str, required: tuple) -> None:
    missing = [n for n in required if n not in _top_level_names(text, path)]
    if missing:
        raise ImportProblemError(f"{path} defines no {', no '.join(missing)}: {GPUMODE_SHAPE}.")


def _first_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= 120 else line[:119] + "…"


def _write_task(dest: Path, task: dict) -> None:
    header = "# Written by kgit's importer; edit freely (docs/problems.md lists every key).\n"
    (dest / "task.yml").write_text(header + yaml.safe_dump(task, sort_keys=False, allow_unicode=True), encoding="utf-8")
