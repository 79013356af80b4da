"""What a new user meets in the first hour: the stage of a long evaluation and its limit,
a folder whose .kgit.yaml has no archive, Ctrl-C, errors in the kernel's own terms, and the
demo's last lines."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import fast_config_text, git

from kgit import evolve, live, remeasure, workflow
from kgit.errors import INTERRUPTED_MESSAGE
from kgit.evaluation import child

ROOT = Path(__file__).resolve().parents[1]
BLOCK = "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096"


def _result_like(attempt) -> dict:
    """A correct result on the attempt's own device and harness (nothing is re-timed)."""
    shapes = [{"key": k, "mean_us": v} for k, v in attempt.times.items()]
    return {"schema": "kgit.result/1", "status": "ok", "device": attempt.device, "timing": attempt.timing,
            "harness": attempt.harness, "ranking": "mean", "eval_s": 0.1, "shapes": shapes,
            "geomean_us": attempt.geomean_us}


class _StagedEvaluator:
    """An evaluator that reports two stages, keeping the live line as it stood at each."""

    watches = True

    def __init__(self, progress, result):
        self.progress, self.result, self.seen = progress, result, []

    def __call__(self, sha, watch=None):
        for stage in ("compile", "timing shape 1/2"):
            watch(stage)
            self.seen.append(self.progress.line_text())
        return dict(self.result)


# -- progress -----------------------------------------------------------------------------
def test_the_live_line_shows_stage_time_and_limit_and_steps_aside_for_lines():
    stream = io.StringIO()
    now = [100.0]
    progress = live.Progress(stream, live=True, clock=lambda: now[0])
    with live.evaluation(progress, "evaluating", 600) as watch:
        watch("compile")
        now[0] = 112.4
        watch("timing shape 2/3")
        assert progress.line_text() == "evaluating: timing shape 2/3, 12 s of the 600 s limit"
        progress("a lasting line")
    out = stream.getvalue()
    # The live line is erased before the lasting line, drawn again after it, and erased at the end.
    assert "\r\x1b[Ka lasting line\n\revaluating: timing shape 2/3" in out
    assert out.endswith("\r\x1b[K") and progress.line_text() == ""


def test_off_a_terminal_there_is_no_live_line():
    stream = io.StringIO()  # not a terminal: a pipe, a file, a test
    progress = live.Progress(stream)
    with live.evaluation(progress, "evaluating", 600) as watch:
        assert watch is None
        progress("only this")
    with live.evaluation(print, "a plain callable", 600) as watch:
        assert watch is None
    assert stream.getvalue() == "only this\n"


def test_judge_notices_become_stages_and_still_time_the_quiet_loop():
    stages, quiet = [], []

    class Quiet:
        def begin(self):
            quiet.append("begin")

        def end(self):
            quiet.append("end")

    notices = child._Notices(Quiet(), stages.append)
    notices.add(b"judge up\nrunner ready\ncandidate imp")
    notices.add(b"orted\nchecked\nshape 1/2\nshape 2/2\ntimed\n")
    assert stages == ["start", "compile", "checks", "timing", "timing shape 1/2", "timing shape 2/2", "finish"]
    assert quiet == ["begin", "end"]


@pytest.mark.slow
def test_record_shows_each_stage_of_a_real_evaluation(kernel_repo):
    repo, config = workflow.load(kernel_repo)
    workflow.start(repo, "smaller blocks")
    kernel = kernel_repo / "kernel.py"
    kernel.write_text(kernel.read_text().replace(BLOCK, BLOCK.replace("= 1024", "= 512")))
    stream = io.StringIO()
    workflow.record(repo, config, progress=live.Progress(stream, live=True))
    out = stream.getvalue()
    limit = f"of the {config.evaluator.timeout_s:g} s limit"
    drawn = [part.split("\x1b[K")[0] for part in out.split("\r") if part.startswith("evaluating: ")]
    stages = list(dict.fromkeys(line.split(": ", 1)[1].rsplit(",", 1)[0] for line in drawn))
    assert all(limit in line for line in drawn)
    for stage in ("start", "compile", "checks", "timing shape 1/2", "timing shape 2/2", "finish"):
        assert stage in stages, stages
    assert stages.index("compile") < stages.index("checks") < stages.index("timing shape 2/2")


def test_evolve_and_remeasure_show_each_attempts_stage(kernel_repo):
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "iterations": 1, "knowledge": []}))
    repo, config = workflow.load(kernel_repo)
    baseline = repo.read()[0]
    progress = live.Progress(io.StringIO(), live=True)
    evaluator = _StagedEvaluator(progress, _result_like(baseline))
    summary = evolve.evolve(repo, config, evaluate=evaluator, progress=progress)
    assert [r.status for r in summary.rows] == ["ok"]
    # The live line names the iteration and the plan's attempt: "[1/1] BLOCK_SIZE 1024 -> 2048, attempt 1: compile".
    assert evaluator.seen[0].startswith("[1/1] ") and ", attempt 1: compile, 0 s of the" in evaluator.seen[0]
    remeasured = _StagedEvaluator(progress, _result_like(baseline))
    remeasure.remeasure(repo, config, [baseline.sha], evaluator=remeasured, progress=progress)
    assert remeasured.seen[1].startswith(f"{baseline.sha[:10]}: timing shape 1/2, 0 s of the")


# -- where am I ------------------------------------------------------------------------------
def test_a_kgit_yaml_without_an_archive_says_so_and_how_to_make_one(tmp_path, run_kgit):
    folder = tmp_path / "looks-like-one"
    folder.mkdir()
    git(folder, "init", "-q")
    (folder / ".kgit.yaml").write_text(fast_config_text())
    result = run_kgit(folder, "log")
    assert result.exit_code == 1
    assert "has a .kgit.yaml but no kgit archive (no kgit/baseline tag)" in result.stderr
    assert "kgit init --force --config .kgit.yaml --problem NAME" in result.stderr
    assert "no attempts yet" not in result.output


def test_kgits_own_checkout_points_at_the_demos_repository(tmp_path, run_kgit, monkeypatch):
    import kgit

    checkout = tmp_path / "kgit-checkout"
    (checkout / "kgit").mkdir(parents=True)
    git(checkout, "init", "-q")
    (checkout / ".kgit.yaml").write_text(fast_config_text())
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / ".kgit.yaml").write_text("")
    monkeypatch.setattr(kgit, "__file__", str(checkout / "kgit" / "__init__.py"))
    monkeypatch.setenv("KGIT_DEMO_DIR", str(demo))
    result = run_kgit(checkout, "best")
    assert result.exit_code == 1
    assert f"{checkout} is kgit's own checkout" in result.stderr
    assert f"the demo's kernel repository is {demo}: `cd {demo}`" in result.stderr


# -- Ctrl-C ---------------------------------------------------------------------------------
def test_ctrl_c_exits_130_with_the_sentence_evolve_says(kernel_repo, run_kgit, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(workflow, "record", interrupted)
    result = run_kgit(kernel_repo, "record")
    assert result.exit_code == 130
    assert f"kgit: {INTERRUPTED_MESSAGE}." in result.stderr and "Aborted" not in result.output
    assert INTERRUPTED_MESSAGE.startswith("interrupted (Ctrl-C); every commit made so far is kept")


def test_ctrl_c_during_a_real_record_leaves_nothing_behind(kernel_repo):
    repo, _ = workflow.load(kernel_repo)
    branch, _ = workflow.start(repo, "a kernel that takes its time")
    kernel = kernel_repo / "kernel.py"
    kernel.write_text("import time\ntime.sleep(120)\n" + kernel.read_text())
    # Python's own SIGINT handler, as a terminal's Ctrl-C meets it (a suite started as a shell's
    # background job inherits SIGINT ignored).
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from kgit.cli import main; sys.argv = ['kgit', 'record']; main()")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=kernel_repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    first = proc.stderr.readline()
    assert first.startswith("evaluating the work tree"), first
    time.sleep(1.0)  # inside the evaluation: the judge is up, the kernel's import sleeps
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert f"kgit: {INTERRUPTED_MESSAGE}." in err and "Aborted" not in err + out
    assert git(kernel_repo, "rev-list", "--count", branch).strip() == git(kernel_repo, "rev-list", "--count",
                                                                          "kgit/baseline").strip()
    assert git(kernel_repo, "worktree", "list").count("\n") == 1
    with repo.lock("test"):  # released
        pass


# -- errors in the kernel's terms -------------------------------------------------------------
def test_a_syntax_error_names_kernel_py_first_and_leaves_kgits_frames_out(kernel_repo, run_kgit):
    repo, _ = workflow.load(kernel_repo)
    workflow.start(repo, "a typo")
    kernel = kernel_repo / "kernel.py"
    kernel.write_text(kernel.read_text().replace(BLOCK, "BLOCK_SIZE = = 1024"))
    line = next(i for i, text in enumerate(kernel.read_text().splitlines(), 1) if text.startswith("BLOCK_SIZE"))
    result = run_kgit(kernel_repo, "record")
    assert result.exit_code == 3
    error = result.output.split("error:\n", 1)[1]
    assert error.startswith(f"kernel.py, line {line}: SyntaxError: invalid syntax")
    assert 'File "kernel.py"' in error and "scratch" not in error
    assert "runner.py" not in error and "<frozen importlib" not in error and "--verbose shows them" in error
    shown = run_kgit(kernel_repo, "show").output
    assert "runner.py" not in shown and f"kernel.py, line {line}: SyntaxError" in shown
    verbose = run_kgit(kernel_repo, "show", "--verbose").output
    assert "runner.py" in verbose and "<frozen importlib" in verbose and "scratch" not in verbose


def test_a_traceback_without_a_kernel_frame_is_left_whole():
    from kgit.excerpts import in_user_terms

    harness_bug = 'Traceback (most recent call last):\n  File "/opt/kgit_harness/judge.py", line 9, in run\nKeyError: 3'
    assert in_user_terms(harness_bug) == harness_bug


# -- the demo ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_demo_ends_saying_what_it_showed_and_what_next(kernel_repo, tmp_path):
    # One plan of one iteration in an initialized repository: the demo's own steps, quickly.
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "knowledge": []}))
    env = {**os.environ, "KGIT_VENV": sys.prefix, "KGIT_DEMO_DIR": str(kernel_repo)}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"), "vector_add", "1"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    tail = done.stdout.split("exp    att", 1)[1]
    assert "No speedup is claimed: without a GPU" in tail
    assert "What this showed: kgit evolve tried vector_add's marked tunables" in tail
    assert f"cd {kernel_repo}" in tail and "kgit report --open" in tail
    assert "==> kgit evolve -n 1" in done.stdout and "successful experiments:" not in done.stdout


def test_every_stage_the_judge_marks_has_words_for_people():
    import re

    judge = (ROOT / "harness" / "judge.py").read_text()
    marks = set(re.findall(r'PHASES\.mark\("([^"]+)"\)', judge))
    assert marks and marks <= set(child.STAGES), marks - set(child.STAGES)
    assert child.stage_of("shape 3/4") == "timing shape 3/4" and child.stage_of("something else") is None
