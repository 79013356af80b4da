"""A problem folder: `task.yml` plus `reference.py`.

Shared by kgit (to validate and describe problems) and by the child harness (to run
them), so it imports nothing heavy.
"""

from __future__ import annotations

import ast
import math
import operator
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from kgit_harness import protocols
from kgit_harness.targets import DEFAULT as DEFAULT_TARGETS
from kgit_harness.targets import check_names as check_target_names


class ProblemError(Exception):
    """A problem folder is missing or unreadable; the message names the fix.

    The harness imports nothing from kgit, so it has its own errors; kgit turns them
    into its KgitError family (kgit/problems.py).
    """


class TaskError(ProblemError):
    """A task.yml (or a formula in it) is invalid."""

TASK_KEYS = {
    "name", "summary", "description", "files", "output", "tests", "benchmarks", "cpu",
    "ranking", "tolerance", "flops", "bytes", "forbidden", "references", "requires", "targets", "protocol",
}
REQUIRES_KEYS = {"gpus", "arch", "modules"}
RANKINGS = ("mean", "median", "min")


@dataclass
class Task:
    name: str
    summary: str
    description: str
    files: list
    tests: list
    benchmarks: list
    cpu_tests: list
    cpu_benchmarks: list
    ranking: str = "mean"
    rtol: float = 1e-5
    atol: float = 1e-6
    tolerance_why: str = ""
    # The input indices a kernel fills in place (`output: 2`, or `output: [1, 2]` for several).
    output: int | list | None = None
    # The error's RMS over the reference output's RMS must stay within this (per output
    # tensor), on top of rtol/atol: a kernel returning zeros where the outputs are small
    # passes any atol, not this.
    relative: float | None = None
    # What the problem needs of the machine (harness/needs.py): {gpus, arch, modules}.
    requires: dict = field(default_factory=dict)
    flops: str | None = None
    bytes: str | None = None
    forbidden: list = field(default_factory=list)
    # Reference geomeans for the report, {device name: {label: us}}, e.g. a vendor library.
    references: dict = field(default_factory=dict)
    # GPUs every candidate is cross-compiled for (harness/targets.py); absent: MI300X and H100/H200.
    targets: list = field(default_factory=lambda: list(DEFAULT_TARGETS))
    # How the benchmark shapes are timed: the protocol of the problem's real evaluator (harness/protocols.py).
    protocol: str = protocols.DEFAULT

    def shapes(self, kind: str, on_gpu: bool) -> list:
        if on_gpu:
            return getattr(self, kind)
        return getattr(self, "cpu_" + kind) or getattr(self, kind)

    def work(self, shape: dict) -> tuple[float | None, float | None]:
        """FLOPs and bytes moved for one shape, from the task's formulas."""
        return (formula(self.flops, shape) if self.flops else None,
                formula(self.bytes, shape) if self.bytes else None)


def output_indices(output) -> tuple:
    """The indices of a task's `output`: (2,) for `output: 2`, (1, 2) for `[1, 2]`, () for none."""
    if output is None:
        return ()
    return tuple(output) if isinstance(output, (list, tuple)) else (output,)


def pick_output(data, output):
    """What a kernel filled among its inputs: data[i], or a tuple of them for a list of indices."""
    if isinstance(output, (list, tuple)):
        return tuple(data[i] for i in output)
    return data[output]


def same_but_unit_dims(shape, other) -> bool:
    """Whether two shapes differ only by dimensions of size 1: () and (1,), (n,) and (n, 1)."""
    return [d for d in shape if d != 1] == [d for d in other if d != 1]


def load_module(path: Path, name: str):
    """Import the Python file `path` as module `name` (registered: dataclasses and pickling look it up)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def shape_key(shape: dict) -> str:
    """The canonical name of a shape: its keys but the seed, in order, e.g. m=64,n=128."""
    return ",".join(f"{k}={v}" for k, v in shape.items() if k != "seed")


def load_task(problem_dir: Path) -> Task:
    path = Path(problem_dir) / "task.yml"
    if not path.exists():
        raise ProblemError(f"{path} is missing: a problem folder needs task.yml and reference.py "
                        "(see docs/problems.md), or re-create the repository with `kgit init --problem NAME`.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise TaskError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise TaskError(f"{path} must be a mapping of keys (see docs/problems.md).")
    unknown = sorted(set(data) - TASK_KEYS)
    if unknown:
        raise TaskError(f"{path}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(TASK_KEYS))}.")
    for key in ("name", "tests", "benchmarks"):
        if not data.get(key):
            raise TaskError(f"{path}: {key!r} is required (see docs/problems.md).")
    for kind in ("tests", "benchmarks"):
        _check_shapes(path, kind, data[kind])
    cpu = data.get("cpu") or {}
    if set(cpu) - {"tests", "benchmarks"}:
        raise TaskError(f"{path}: cpu may only hold 'tests' and 'benchmarks'.")
    for kind in ("tests", "benchmarks"):
        if cpu.get(kind):
            _check_shapes(path, "cpu." + kind, cpu[kind])
    ranking = data.get("ranking", "mean")
    if ranking not in RANKINGS:
        raise TaskError(f"{path}: ranking must be one of {', '.join(RANKINGS)}, not {ranking!r}.")
    try:
        protocol = protocols.get(data.get("protocol"))
    except ValueError as e:
        raise TaskError(f"{path}: protocol: {e}.") from None
    if protocol.statistic != "task" and "ranking" in data and ranking != protocol.statistic:
        raise TaskError(f"{path}: the {protocol.name} protocol ranks by its {protocol.statistic}; "
                        f"remove `ranking: {ranking}` or choose protocol: kgit-adaptive.")
    tol = data.get("tolerance") or {}
    if set(tol) - {"rtol", "atol", "relative", "why"}:
        raise TaskError(f"{path}: tolerance may only hold rtol, atol, relative and why.")
    requires = data.get("requires") or {}
    if not isinstance(requires, dict) or set(requires) - REQUIRES_KEYS:
        raise TaskError(f"{path}: requires may only hold gpus (a count), arch (e.g. [sm_100]) and modules "
                        "(Python module names).")
    files = data.get("files") or ["kernel.py"]
    output = data.get("output")
    listed = output if isinstance(output, list) else [output]
    if output is not None and (not listed or len(set(listed)) != len(listed)
                               or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in listed)):
        raise TaskError(f"{path}: output is the index of the input a kernel fills (output: 2), or a list of "
                        f"distinct indices (output: [1, 2]), not {output!r}.")
    return Task(
        name=str(data["name"]), summary=str(data.get("summary", "")).strip(),
        description=str(data.get("description", "")).strip(), files=[str(f) for f in files],
        tests=data["tests"], benchmarks=data["benchmarks"],
        cpu_tests=cpu.get("tests") or [], cpu_benchmarks=cpu.get("benchmarks") or [],
        ranking=ranking, rtol=float(tol.get("rtol", 1e-5)), atol=float(tol.get("atol", 1e-6)),
        tolerance_why=str(tol.get("why", "")), output=data.get("output"),
        relative=float(tol["relative"]) if tol.get("relative") is not None else None, requires=requires,
        flops=data.get("flops"), bytes=data.get("bytes"),
        forbidden=[str(f) for f in data.get("forbidden") or []],
        references=_check_references(path, data.get("references") or {}),
        targets=_check_targets(path, data.get("targets", list(DEFAULT_TARGETS))), protocol=protocol.name,
    )


def _check_targets(path, names) -> list:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TaskError(f"{path}: targets lists build targets such as [gfx942, sm_90a], not {names!r}.")
    try:
        return check_target_names(names)
    except ValueError as e:
        raise TaskError(f"{path}: {e}.") from None


def _check_references(path, refs) -> dict:
    ok = isinstance(refs, dict) and all(
        isinstance(lines, dict) and all(isinstance(us, (int, float)) and us > 0 for us in lines.values())
        for lines in refs.values())
    if not ok:
        raise TaskError(f"{path}: references maps a device name to labelled geomeans in microseconds, "
                          "e.g. references: {NVIDIA H200: {cuBLASLt fp8: 44.0}}.")
    return {str(device): {str(label): float(us) for label, us in lines.items()} for device, lines in refs.items()}


def _check_shapes(path, kind, shapes):
    if not isinstance(shapes, list) or not all(isinstance(s, dict) and s for s in shapes):
        raise TaskError(f"{path}: {kind} must be a list of shape mappings such as {{size: 1024, seed: 1}}.")


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
        ast.USub: operator.neg}
_FUNCS = {"ceil": math.ceil, "cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


def formula(expr: str, shape: dict) -> float:
    """Evaluate an arithmetic formula over the shape's keys (no names, calls or attributes beyond these)."""

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name) and node.id in shape:
            return shape[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise TaskError(f"task.yml formula {expr!r}: unsupported element {ast.dump(node)[:60]}")

    return float(ev(ast.parse(str(expr), mode="eval")))


def shipped_dir() -> Path:
    return Path(str(resources.files("kgit_harness").joinpath("problems")))


def shipped() -> dict[str, Path]:
    root = shipped_dir()
    return {p.name: p for p in sorted(root.iterdir()) if (p / "task.yml").exists()}
