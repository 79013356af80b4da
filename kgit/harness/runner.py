"""The child side of an evaluation: check the candidate, then time it.

Run as `python -I -B -m kgit.harness --spec SPEC --result-fd FD`. The result goes to
FD as one JSON document; stdout and stderr belong to the candidate and are only
captured, never parsed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
import uuid
from pathlib import Path

from . import checking, policy, problem, timing
from . import result as result_mod

# Captured before any candidate code exists, so patching the module attribute later
# does not change the clock the harness reads.
_perf_counter = time.perf_counter


class Verdict(Exception):
    """Ends an evaluation early with a status; raised inside the runner only."""

    def __init__(self, status, error, reason=None):
        super().__init__(error)
        self.status, self.error, self.reason = status, error, reason


def _excerpt(exc: BaseException, limit: int = 4000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:]


def _is_compile_error(exc: BaseException) -> bool:
    if isinstance(exc, (SyntaxError, ImportError, NameError)):
        return True
    names = {cls.__module__ + "." + cls.__name__ for cls in type(exc).__mro__}
    return any("triton.compiler" in n or "CompilationError" in n for n in names)


def _load_module(path: Path, name: str, hidden: bool):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if hidden:
            # The reference stays reachable through our own variable only.
            sys.modules.pop(name, None)
    return module


def run(spec: dict) -> dict:
    started = _perf_counter()
    doc = result_mod.new("crash")
    import torch

    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        # Must be set before triton.jit decorates anything in the candidate.
        os.environ["TRITON_INTERPRET"] = "1"
    doc["device"] = torch.cuda.get_device_name() if on_gpu else "cpu"
    doc["timing"] = "events" if on_gpu else "interpreter"
    doc["versions"] = timing.versions(torch)

    task = problem.load_task(Path(spec["problem_dir"]))
    doc["ranking"] = task.ranking
    try:
        doc.update(_evaluate(spec, task, on_gpu, torch))
    except Verdict as v:
        doc.update(status=v.status, error=v.error, reason=v.reason)
    doc["eval_s"] = round(_perf_counter() - started, 3)
    return doc


def _evaluate(spec, task, on_gpu, torch) -> dict:
    candidate_dir = Path(spec["candidate_dir"])
    sources = {f: (candidate_dir / f).read_text(encoding="utf-8", errors="replace")
               for f in task.files if (candidate_dir / f).exists()}
    if not sources:
        raise Verdict("compile-error", f"none of the editable files {task.files} exist in the candidate")
    violation = policy.check(sources, task.forbidden)
    if violation:
        rule, detail = violation
        raise Verdict("rejected", detail, reason=rule)

    reference = _load_module(Path(spec["problem_dir"]) / "reference.py", f"_kgit_ref_{uuid.uuid4().hex}", hidden=True)
    clock = timing.Clock.capture(torch, on_gpu)

    sys.path.insert(0, str(candidate_dir))
    try:
        candidate = _load_module(candidate_dir / task.files[0], "kernel_under_test", hidden=False)
    except BaseException as e:  # noqa: BLE001 - anything the import does is the candidate's failure
        raise Verdict("compile-error", _excerpt(e)) from None
    kernel = getattr(candidate, "custom_kernel", None)
    if not callable(kernel):
        raise Verdict("compile-error", f"{task.files[0]} defines no custom_kernel(data) function")

    secret = int(spec.get("secret_seed", 0))
    tests = []
    for shape in task.shapes("tests", on_gpu):
        tests.append(_check_shape(task, reference, kernel, shape, secret, torch))
    failed = [t for t in tests if not t["ok"]]
    if failed:
        return {"status": "incorrect", "tests": tests,
                "error": "\n".join(f"{t['key']}: {t['message']}" for t in failed)[:4000]}

    shapes = []
    for shape in task.shapes("benchmarks", on_gpu):
        shapes.append(_time_shape(task, reference, kernel, shape, secret, clock, spec["timing"], torch))
    bad = [s for s in shapes if s.get("error")]
    if bad:
        return {"status": "incorrect", "tests": tests, "shapes": shapes,
                "error": "\n".join(f"{s['key']}: {s['error']}" for s in bad)[:4000]}
    clock.verify(torch)
    geo = result_mod.geomean(s[task.ranking + "_us"] for s in shapes)
    return {"status": "ok", "tests": tests, "shapes": shapes, "geomean_us": geo}


def _call(kernel, data):
    try:
        return kernel(data)
    except BaseException as e:  # noqa: BLE001 - a failing kernel is a result, not a harness error
        status = "compile-error" if _is_compile_error(e) else "runtime-error"
        raise Verdict(status, _excerpt(e)) from None


def _check_shape(task, reference, kernel, shape, secret, torch) -> dict:
    key = problem.shape_key(shape)
    data = checking.make_input(reference, shape, secret)
    pristine = checking.clone(data)
    checking.poison(data, task.output)
    out = _call(kernel, data)
    checking.sync(torch)
    ok, message = checking.compare(task, reference, pristine, out)
    return {"key": key, "ok": ok, "message": message}


def _time_shape(task, reference, kernel, shape, secret, clock, settings, torch) -> dict:
    key = problem.shape_key(shape)
    runs = timing.measure(task, reference, kernel, shape, secret, clock, settings, torch, _call)
    return {"key": key, "shape": {k: v for k, v in shape.items() if k != "seed"}, **runs}


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kgit.harness")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    out = os.fdopen(args.result_fd, "w")
    try:
        doc = run(spec)
    except Verdict as v:
        doc = result_mod.new(v.status, error=v.error, reason=v.reason)
    except BaseException as e:  # noqa: BLE001 - report, then exit non-zero
        doc = result_mod.new("crash", error="harness failure:\n" + _excerpt(e))
    out.write(json.dumps(doc))
    out.flush()
    out.close()
    return 0
