"""The child side of an evaluation: check the candidate, then time it.

Run as `python -I -B -m kgit_harness --spec SPEC --result-fd FD`. The result goes to
FD as one JSON document; stdout and stderr belong to the candidate and are only
captured, never parsed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
import traceback
import uuid
from pathlib import Path

from kgit_harness import checking, peaks as devices, policy, problem, timing
from kgit_harness import targets as build_targets
from kgit_harness import result as result_mod
from kgit_harness.guards import Guards

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
        doc.update(_evaluate(spec, task, on_gpu, torch, doc))
    except Verdict as v:
        doc.update(status=v.status, error=v.error, reason=v.reason)
    build_targets.collect_into(doc)  # [kgit targets] the build facts started after the checks
    doc["eval_s"] = round(_perf_counter() - started, 3)
    return doc


class Candidate:
    """The candidate's kernel, called only through the runtime guards."""

    def __init__(self, kernel, guards, clock):
        self.kernel, self.guards, self.clock = kernel, guards, clock

    def call(self, data):
        """One guarded call, outside any timed region."""
        with self.guarded():
            return self.kernel(data)

    @contextlib.contextmanager
    def guarded(self):
        """Runtime guards armed around the block; a failure inside becomes a Verdict.

        Timing enters it before the start event and leaves it after the end event, so
        the guards' own Python never sits between the events.
        """
        try:
            with self.guards.armed():
                yield
        except Verdict:
            raise
        except BaseException as e:  # noqa: BLE001 - a failing kernel is a result, not a harness error
            self.verify()
            status = "compile-error" if _is_compile_error(e) else "runtime-error"
            raise Verdict(status, _excerpt(e)) from None

    def verify(self):
        """After a call (outside any timed region): did a guard trip, or a timer change?"""
        self.guards.after_call()
        if self.guards.violation:
            rule, detail = self.guards.violation
            raise Verdict("rejected", detail, reason=rule)
        changed = self.clock.tampered()
        if changed:
            raise Verdict("rejected", f"the candidate replaced {', '.join(changed)}", reason="patched timers")


def _evaluate(spec, task, on_gpu, torch, doc) -> dict:
    candidate_dir = Path(spec["candidate_dir"])
    sources = {f: (candidate_dir / f).read_text(encoding="utf-8", errors="replace")
               for f in task.files if (candidate_dir / f).exists()}
    if not sources:
        raise Verdict("compile-error", f"none of the editable files {task.files} exist in the candidate")
    violation = policy.check(sources, task.forbidden)
    if violation:
        rule, detail = violation
        raise Verdict("rejected", detail, reason=rule)

    module = _load_module(Path(spec["problem_dir"]) / "reference.py", f"_kgit_ref_{uuid.uuid4().hex}", hidden=True)
    guards = Guards(torch, task.forbidden, module)
    reference = guards.reference_proxy(module)
    del module  # from here on the real functions run only through reference_call
    clock = timing.Clock(torch, on_gpu)
    guards.arm_reference()
    guards.snapshot_threads()

    sys.path.insert(0, str(candidate_dir))
    try:
        with guards.armed():
            loaded = _load_module(candidate_dir / task.files[0], "kernel_under_test", hidden=False)
    except BaseException as e:  # noqa: BLE001 - anything the import does is the candidate's failure
        if guards.violation:
            raise Verdict("rejected", guards.violation[1], reason=guards.violation[0]) from None
        raise Verdict("compile-error", _excerpt(e)) from None
    kernel = getattr(loaded, "custom_kernel", None)
    if not callable(kernel):
        raise Verdict("compile-error", f"{task.files[0]} defines no custom_kernel(data) function")
    candidate = Candidate(kernel, guards, clock)
    candidate.verify()

    secret = int(spec.get("secret_seed", 0))
    tests = []
    # [kgit targets, issue 14] The checks' launches are captured, then cross-compiled for the
    # build targets while the timing runs (untrusted side: this compiles candidate code).
    names = task.targets if spec.get("targets") is None else spec["targets"]
    with build_targets.facts_into(doc, names):
        for shape in task.shapes("tests", on_gpu):
            # The published seed and one derived from the secret: outputs memorised for the
            # published inputs fail the second.
            for seed in (int(shape.get("seed", 0)), checking.mix_seed(shape.get("seed", 0), secret, 7)):
                tests.append(_check_shape(task, reference, candidate, shape, seed, torch))
    # [end kgit targets]
    failed = [t for t in tests if not t["ok"]]
    if failed:
        return {"status": "incorrect", "tests": tests,
                "error": "\n".join(f"{t['key']} (seed {t['seed']}): {t['message']}" for t in failed)[:4000]}

    shapes = []
    for shape in task.shapes("benchmarks", on_gpu):
        runs = timing.measure(task, reference, candidate, shape, secret, clock, spec["timing"], torch)
        entry = {"key": problem.shape_key(shape), "shape": {k: v for k, v in shape.items() if k != "seed"}, **runs}
        shapes.append(entry)
        if entry.get("error"):
            return {"status": "incorrect", "tests": tests, "shapes": shapes,
                    "error": f"{entry['key']}: {entry['error']}"[:4000]}
        why = timing.escaped(entry)
        if why:
            doc.update(tests=tests, shapes=shapes)
            raise Verdict("rejected", f"{entry['key']}: {why}", reason="work escaped the timing events")
    candidate.verify()
    sol = _speed_of_light(spec, task, shapes, on_gpu, torch)
    if sol.pop("verdict", None):
        doc.update(tests=tests, shapes=shapes, speed_of_light=sol)
        raise Verdict("rejected", sol["why"], reason="faster than physically possible")
    geo = result_mod.geomean(s[task.ranking + "_us"] for s in shapes)
    if geo is None:
        raise Verdict("runtime-error", "a benchmark shape timed at zero or less; the timer saw no work, "
                      "so there is no geometric mean to rank by")
    return {"status": "ok", "tests": tests, "shapes": shapes, "geomean_us": geo, "speed_of_light": sol}


def _speed_of_light(spec, task, shapes, on_gpu, torch) -> dict:
    if not on_gpu:
        return {"checked": False, "why": "not checked: interpreter timings are host time on the CPU, not a GPU's"}
    if spec.get("device_peaks"):
        peak = devices.from_override(spec["device_peaks"])
    else:
        peak = devices.lookup(torch.cuda.get_device_name()) or devices.measure(torch)
    info = {"checked": True, "peak": peak.to_dict(), "margin": devices.MARGIN, "why": "within physical limits"}
    verdict = devices.judge(task, shapes, peak)
    if verdict:
        info.update(why=verdict, verdict=True)
    return info


def _check_shape(task, reference, candidate, shape, seed, torch) -> dict:
    key = problem.shape_key(shape)
    data = checking.make_input(reference, shape, seed)
    pristine = checking.clone(data)
    checking.poison(data, task.output)
    out = candidate.call(data)
    checking.sync(torch)
    candidate.verify()
    # The expected output is computed inside compare, only now that the call returned.
    ok, message = checking.inputs_unchanged(pristine, data, task.output)
    if ok:
        ok, message = checking.compare(task, reference, pristine, out)
    return {"key": key, "seed": seed, "ok": ok, "message": message}


def main(argv=None, spec: dict | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kgit_harness")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    if spec is None:
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
