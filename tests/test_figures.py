"""What figures mean and what the scientist is told: noise and verdicts, the ranking rule,
the check as applied, errors without kgit's frames, and the lab notebook's storage."""

from __future__ import annotations

import subprocess

import pytest
from conftest import logged

from kgit import problems as problem_mod
from kgit import remeasure
from kgit.archive import cause, figures, notebook
from kgit.archive.repo import Repo
from kgit.scientist import context
from kgit_harness.result import Result


def attempt(sha, experiment, when, device="NVIDIA H200", timing="events", geomean=10.0, status="ok", notes="",
            evaluator=None):
    message = (f"x\n\nKgit-Experiment: {experiment}\nKgit-Attempt: 1\nKgit-Status: {status}\n"
               f"Kgit-Device: {device}\nKgit-Timing: {timing}\nKgit-Harness: h\nKgit-Geomean-us: {geomean}\n"
               + (f"Kgit-Evaluator: {evaluator}\n" if evaluator else ""))
    return logged([sha * 40, "", "t" * 40, "n", "e", str(when), message, notes])[0]


def test_result_noise_is_the_geomeans_standard_error():
    doc = Result(ranking="mean", shapes=[{"key": "a", "mean_us": 100.0, "std_us": 10.0, "n": 100},
                                         {"key": "b", "mean_us": 50.0, "std_us": 5.0, "n": 100}])
    # Each shape: 1% standard error; the geomean of two: sqrt(2) * 1% / 2.
    assert figures.result_noise(doc) == pytest.approx(0.01 * 2 ** 0.5 / 2)
    assert figures.result_noise(Result(shapes=[{"key": "a", "mean_us": 1.0}])) is None


@pytest.mark.parametrize("ratio, noise, word", [
    (1.25, 0.001, "speedup"), (1.005, 0.001, "no clear change"),  # below the 1% floor
    (1.05, 0.02, "no clear change"),  # 2 x sqrt(2) x 2% = 5.7%
    (1.07, 0.02, "speedup"), (0.80, 0.001, "slower"), (0.995, 0.001, "no clear change"),
])
def test_a_verdict_needs_more_than_the_noise(ratio, noise, word):
    assert figures.verdict(ratio, "events", "NVIDIA H200", noise, noise).word == word


def test_repeatability_and_the_interpreter_rule():
    # Measured twice on the device, 8% apart: a 5% gain is no longer a clear one.
    assert figures.verdict(1.05, "events", "MI300X", 0.001, 0.001, repeat=0.08).word == "no clear change"
    assert figures.verdict(3.0, "interpreter", "cpu", 0.001, 0.001).word == "interpreter"
    assert not figures.verdict(3.0, "interpreter", "cpu", 0.001, 0.001).claimed
    notes = '{"device":"NVIDIA H200","harness":"h","geomean_us":10.8,"when":99,"times":{}}\n'
    assert figures.repeatability([attempt("a", 1, 5, notes=notes)], "NVIDIA H200", "h") == pytest.approx(0.08)


def test_ranking_prefers_gpu_timings_and_otherwise_the_most_recent():
    old_fast = attempt("a", 1, 10, device="cpu", timing="interpreter", geomean=1.0)
    new_slow = attempt("b", 2, 20, device="cpu", timing="interpreter", geomean=9.0)
    assert figures.best([old_fast, new_slow]) is new_slow
    assert "most recent correct attempt" in figures.ranking_rule([old_fast, new_slow])
    # A GPU re-measurement (a note) makes the archive rankable on that GPU.
    gpu_note = '{"device":"NVIDIA H200","harness":"h","timing":"events","geomean_us":3.0,"when":30,"times":{}}\n'
    remeasured = attempt("c", 3, 5, device="cpu", timing="interpreter", geomean=50.0, notes=gpu_note)
    assert figures.best([old_fast, new_slow, remeasured]) is remeasured
    assert figures.ranking_rule([old_fast, new_slow, remeasured]).startswith("the fastest geomean on NVIDIA H200")


def test_figures_of_one_gpu_model_on_two_hosts_are_never_ranked_together():
    """Same device name, same harness, two evaluators: two setups. The faster figure from
    the box that measured one attempt does not outrank the host that measured the rest."""
    from kgit.archive import measure

    here = [attempt("a", 0, 1, geomean=10.0, evaluator="local@gpu7"),
            attempt("b", 1, 2, geomean=9.0, evaluator="local@gpu7")]
    elsewhere = attempt("c", 2, 3, geomean=1.0, evaluator="command@mi300-box")
    group = figures.gpu_group(here + [elsewhere])
    assert (group.device, group.evaluator) == ("NVIDIA H200", "local@gpu7")
    assert figures.best(here + [elsewhere]) is here[1]
    assert "through local@gpu7" in figures.ranking_rule(here + [elsewhere])
    # The base's figure through another evaluator is no comparison; through the same one it is.
    note = '{"device":"NVIDIA H200","harness":"h","evaluator":"command@mi300-box","geomean_us":12.0,"when":9}\n'
    base = attempt("a", 0, 1, geomean=10.0, evaluator="local@gpu7", notes=note)
    assert measure.comparable(base, "NVIDIA H200", "h", "command@mi300-box").geomean_us == 12.0
    assert measure.comparable(base, "NVIDIA H200", "h", "command@other-box") is None
    assert measure.comparable(base, "NVIDIA H200", "h", "local@gpu7").source == "commit"
    assert measure.evaluator_of({"backend": "command", "host": "mi300-box", "device": "3"}) == "command@mi300-box"
    assert measure.worker_of("command@mi300-box") == {"backend": "command", "host": "mi300-box"}


def test_the_check_is_described_from_its_definition_without_unreadable_pointers():
    fp8 = problem_mod.shipped()["fp8_blockscale_gemm"]
    text = context.check_text(problem_mod.load_task(fp8), fp8)
    assert "def check_implementation(data, output):" in text and "rtol/atol are not used" in text
    assert "docs/" not in text and "rtol=0.02" not in text
    vector_add = problem_mod.shipped()["vector_add"]
    assert "torch.allclose(output, ref_kernel(data), rtol=1e-06" in context.check_text(
        problem_mod.load_task(vector_add), vector_add)


def test_errors_lose_kgits_own_frames_and_keep_the_candidates():
    from pathlib import Path

    import kgit
    import kgit_harness

    harness = Path(kgit_harness.__file__).resolve().parent
    own = Path(kgit.__file__).resolve().parent
    text = (f'Traceback (most recent call last):\n  File "{harness}/runner.py", line 1, in run\n    x = f()\n'
            f'  File "/r/.git/kgit/scratch/eval-1/kernel.py", line 9, in custom_kernel\n    return go(a)\n'
            f'  File "{own}/evaluation/child.py", line 3, in go\n    raise ValueError\nValueError: bad block\n')
    out = context.candidate_error(text)
    assert "runner.py" not in out and "child.py" not in out
    assert "kernel.py\", line 9" in out and "return go(a)" in out and out.endswith("ValueError: bad block\n")
    assert cause.of_error(text) == "ValueError: bad block"
    assert cause.of_error("size=1 (seed 1): 3 of 4 elements differ\nsize=9 ...") == "size=1 (seed 1): 3 of 4 elements differ"


def test_environment_follows_the_host_and_the_latest_measurement():
    from kgit.config import Config
    from kgit.evaluation.gpus import Host

    cpu_only = [attempt("a", 0, 1, device="cpu", timing="interpreter")]
    env = context.environment(Config(), cpu_only, host=Host(None, ()))
    assert not env.on_gpu and "Triton's interpreter" in env.text() and "torch" in env.versions
    env = context.environment(Config(), cpu_only + [attempt("b", 1, 2)], host=Host("nvidia", ("0",)))
    assert env.on_gpu and env.device == "NVIDIA H200" and "compiled for the GPU" in env.text()


def test_notebook_versions_travel_with_kgit_sync(kernel_repo, tmp_path):
    repo = Repo(kernel_repo)
    assert notebook.lessons(repo) == []
    notebook.write(repo, ["  tiles of 128 win  ", "tiles of 128 win", "fp8 dot needs k % 32"], "design 1")
    notebook.write(repo, ["tiles of 128 win", "fp8 dot needs k % 32", "stages > 3 spill"], "design 2")
    assert notebook.lessons(repo) == ["tiles of 128 win", "fp8 dot needs k % 32", "stages > 3 spill"]
    assert [v["source"] for v in notebook.history(repo)] == ["design 1", "design 2"]
    # Not on any commit: the archive's log never carries it.
    assert all(not a.notes.documents for a in repo.read())
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    remeasure.sync(repo, str(remote))
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True)
    subprocess.run(["git", "fetch", "-q", str(kernel_repo), "kgit/baseline:refs/tags/kgit/baseline"], cwd=clone,
                   check=True)
    other = Repo(clone)
    remeasure.sync(other, str(remote))
    assert notebook.lessons(other) == notebook.lessons(repo)
