"""Compiling a candidate's launches side by side before its checks (harness/precompile.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kgit_harness import checking, problem, reported, shared

DATA = Path(__file__).parent / "data" / "precompile"


def _probe(kernel: Path, cache: Path, *args: str) -> dict:
    """compile_ahead in a fresh process, with MI300X's target (tests/precompile_probe.py)."""
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "precompile_probe.py"), str(kernel), str(cache),
                           *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_launches_compiled_ahead_are_what_the_checks_first_call_then_reads(tmp_path):
    """A dry run in a forked child finds vector_add's one launch on two shapes and compiles it
    for the device's target (here gfx942, which Triton's AMD back end compiles on the CPU)
    through Triton's own launch path; the check's call then adds nothing to the cache: it
    read the entry under the key it computes itself."""
    cache = tmp_path / "triton-cache"
    probe = _probe(problem.shipped()["vector_add"] / "kernel.py", cache)
    ahead = probe["ahead"]
    assert ahead["variants"] == 1 and ahead["compiled"] == 1 and ahead["failed"] == [], ahead
    # Its launcher stub: once from the compile's source and options while it compiled, then
    # once after it, from the compiled kernel (on a real driver, a read of the first's build).
    assert ahead["launchers"] == 1 and ahead["early_launchers"] == 1, ahead
    early, late = [json.loads(line) for line in (tmp_path / "launchers.jsonl").read_text().splitlines()]
    assert early["at"] < late["at"] and early["kernel"] == late["kernel"] == "_add"
    assert early["signature"] == late["signature"] and early["warp_size"] == late["warp_size"] == 64
    assert early["tensordesc_meta"] is None
    # Where its seconds went: the compile is the longest part, and no part outlasts the whole.
    parts = [ahead[k] for k in ("fork_s", "dry_s", "slowest_compile_s", "slowest_launcher_s")]
    assert all(0 <= p <= ahead["seconds"] for p in parts) and ahead["slowest_compile_s"] == max(parts), ahead
    assert probe["cached"] >= 2  # the warm-up's kernel and the candidate's
    assert probe["new_after_call"] == []


def test_the_early_launcher_wraps_the_compile_only_inside_its_block(monkeypatch):
    """Triton's compile, as the module has it and as a kernel's binder bound it, is wrapped for
    the block and given back after it; the first compile starts one child building the launcher,
    from its own source and its options, with what only the compile can know guessed."""
    import triton.compiler

    from kgit_harness import precompile, targets

    built, compiled, forked = [], [], []
    monkeypatch.setattr(precompile, "_launcher", lambda src, guess: built.append((src, guess)) or {"launcher": "built"})
    monkeypatch.setattr(targets, "_fork", lambda work, beside_timing=True: forked.append(beside_timing) or work())
    monkeypatch.setattr(targets, "_collect", lambda children, timeout_s, late=None: children)

    class Kernel:
        def compile(self, src, target=None, options=None):
            compiled.append((src, options))
            return "compiled"

    kernel = Kernel()
    bound = kernel.compile
    kernel.compile = bound  # as a binder leaves it: in the kernel's own dict
    real = triton.compiler.compile
    with precompile._EarlyLauncher(kernel, deadline=time.monotonic() + 60) as early:
        assert triton.compiler.compile is not real and kernel.compile is not bound
        assert kernel.compile("source", target="t", options={"warp_size": 64}) == "compiled"
        kernel.compile("source", target="t", options={"warp_size": 64})
    assert triton.compiler.compile is real and kernel.compile == bound
    assert early.answer() == "built"
    assert compiled == [("source", {"warp_size": 64})] * 2
    [(src, guess)] = built
    assert src == "source" and guess.warp_size == 64 and guess.tensordesc_meta is None
    assert forked == [False]  # at the runner's own priority: the checks wait for it
    assert precompile._EarlyLauncher(kernel, deadline=0.0).answer() == "not started"


def test_a_dry_run_that_cannot_launch_reports_why_and_compiles_nothing(tmp_path):
    probe = _probe(DATA / "needs_values.py", tmp_path / "cache")
    ahead = probe["ahead"]
    assert ahead["variants"] == 0 and ahead["compiled"] == 0
    assert len(ahead["failed"]) == 2 and all("Error" in why for why in ahead["failed"]), ahead


def test_a_dry_run_that_never_returns_is_ended_at_the_wait(tmp_path):
    probe = _probe(DATA / "stuck.py", tmp_path / "cache", "2")
    assert probe["ahead"]["crash"] == "the dry run did not end within 3 s", probe


class _Runner:
    """The judge's side of a runner that answers a precompile request with `report`."""

    def __init__(self, asked: list, report: dict | None = None):
        self.asked, self.report = asked, report

    def send(self, message):
        self.asked.append(message)

    def answer(self):
        return {"op": "done", "precompile": self.report}


def test_the_judge_sends_every_test_shapes_layout_and_keeps_only_counts_seconds_and_a_short_reason():
    """The runner's report is the candidate's process's: the judge keeps finite, non-negative
    numbers and a reason of at most 300 characters, and nothing else (reported.clean_precompile)."""
    from kgit_harness import judge

    folder = problem.shipped()["fp8_blockscale_gemm"]
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "_kgit_test_fp8_reference")
    asked: list = []
    report = {"variants": 3, "compiled": float("nan"), "launchers": -1, "seconds": 0.5, "error": "x" * 1000,
              "verdict": "ok", "failed": ["anything"]}
    doc: dict = {}
    checks = [(shape, (int(shape.get("seed", 0)), 99)) for shape in task.shapes("tests", True)]
    made = judge._compile_ahead(task, reference, _Runner(asked, report), doc, checks)
    [message] = asked
    assert message["op"] == "precompile" and len(message["shapes"]) == len(checks)
    # Laid out from the checks' first inputs, which the judge keeps for them: a, b, a_scale,
    # b_scale and c of the first test shape (m=n=64, k=128), as the checks' arena lays them out.
    assert sorted(made) == list(range(len(checks)))
    first = made[0]
    assert [tuple(t.shape) for t in first] == [(64, 128), (64, 128), (64, 1), (1, 1), (64, 64)]
    planner = shared.Planner()
    assert message["shapes"][0] == {"layout": planner.tree(first), "size": planner.size}
    assert doc["precompile"] == {"variants": 3.0, "seconds": 0.5, "error": "x" * 297 + "..."}
    assert reported.clean_precompile({"dry_s": 0.2, "slowest_compile_s": "0.4", "fork_s": -1}) == {"dry_s": 0.2}
    # The inputs are the published seed's, as the checks' own first input is.
    again = checking.make_input(reference, checks[0][0], checks[0][1][0])
    assert all(torch.equal(x.float(), y.float()) for x, y in zip(first[:4], again[:4]))


def test_only_the_first_test_inputs_that_fit_the_dry_runs_bytes_are_made_ahead(monkeypatch):
    from kgit_harness import judge

    folder = problem.shipped()["fp8_blockscale_gemm"]
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "_kgit_test_fp8_reference")
    checks = [(shape, (int(shape.get("seed", 0)), 99)) for shape in task.shapes("tests", True)]
    sizes = []
    for shape, _ in checks[:2]:
        planner = shared.Planner()
        planner.tree(checking.make_input(reference, shape, 0))
        sizes.append(planner.size)
    monkeypatch.setattr(judge, "DRY_BYTES", sum(sizes))
    asked: list = []
    doc: dict = {}
    made = judge._compile_ahead(task, reference, _Runner(asked), doc, checks)
    assert sorted(made) == [0, 1] and len(asked[0]["shapes"]) == 2 and "precompile" not in doc
    monkeypatch.setattr(judge, "DRY_BYTES", sizes[0] - 1)
    assert judge._compile_ahead(task, reference, _Runner(asked), doc, checks) == {} and len(asked) == 1


def test_an_input_that_fails_to_be_made_ahead_is_left_to_its_check():
    """Out of memory with the inputs held, or the problem's own failure: the inputs made before it
    go ahead, and the check makes that input again itself, meeting the failure as before."""
    from kgit_harness import judge

    folder = problem.shipped()["fp8_blockscale_gemm"]
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "_kgit_test_fp8_reference")
    checks = [(shape, (int(shape.get("seed", 0)), 99)) for shape in task.shapes("tests", True)]

    class Failing:
        calls = 0

        def generate_input(self, **shape):
            Failing.calls += 1
            if Failing.calls == 3:
                raise torch.OutOfMemoryError("CUDA out of memory")
            return reference.generate_input(**shape)

    asked: list = []
    made = judge._compile_ahead(task, Failing(), _Runner(asked), {}, checks)
    assert sorted(made) == [0, 1] and len(asked[0]["shapes"]) == 2 and Failing.calls == 3


def test_a_reference_known_from_its_record_is_warmed_while_the_runner_compiles():
    """needs.check skips the reference's own run when the judge's record has this device: its
    first kernels then run on the GPU between the request and the runner's answer."""
    from kgit_harness import judge

    folder = problem.shipped()["fp8_blockscale_gemm"]
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "_kgit_test_fp8_reference_warm")
    checks = [(shape, (int(shape.get("seed", 0)), 99)) for shape in task.shapes("tests", True)]
    events: list = []
    ref_kernel = reference.ref_kernel
    reference.ref_kernel = lambda data: events.append("reference") or ref_kernel(data)

    class Runner(_Runner):
        def answer(self):
            events.append("answer")
            return super().answer()

    made = judge._compile_ahead(task, reference, Runner(events), {}, checks, warm=True)
    assert [e if isinstance(e, str) else e["op"] for e in events] == ["precompile", "reference", "answer"]
    assert made  # the checks' inputs, the reference's warm-up on clones of the first
    events.clear()
    judge._compile_ahead(task, reference, Runner(events), {}, checks, warm=False)
    assert "reference" not in events


@pytest.mark.gpu
def test_gpu_the_checks_find_the_candidates_kernels_compiled_ahead(kernel_repo, tmp_path):
    """On a GPU the judge asks for the compiles before the checks and records the runner's report."""
    import torch

    from kgit import workflow
    from kgit.evaluation import child

    if not torch.cuda.is_available():
        pytest.fail("gpu tests need a CUDA or ROCm device (deselect them with -m 'not gpu')")
    repo, config = workflow.load(kernel_repo)
    doc = child.evaluate_tree(kernel_repo, config, state_dir=tmp_path / "state")
    assert doc["status"] == "ok", doc.get("error")
    report = doc["precompile"]
    assert report["variants"] >= 1 and report["compiled"] == report["variants"], report
    # Each launcher stub built while its kernel compiled (no tensor descriptors here to guess wrong).
    assert report["early_launchers"] == report["launchers"] == report["variants"], report
    assert "checks: compiles side by side" in doc["phases"]["spans"]
