"""Importing GPU MODE problem folders and KernelBench files, end to end on the CPU."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import fast_config_text, git

from kgit import config as config_mod
from kgit import importers
from kgit.errors import KgitError
from kgit.evaluation import child

DATA = Path(__file__).parent / "data"
GPUMODE = DATA / "gpumode" / "row_scale"
KERNELBENCH = DATA / "kernelbench_linear_relu.py"


@pytest.fixture
def fast_config(tmp_path):
    path = tmp_path / "fast.kgit.yaml"
    path.write_text(fast_config_text())
    return path


def _trailers(repo):
    return git(repo, "log", "-1", "--format=%(trailers:only,unfold)", "kgit/baseline")


# -- GPU MODE ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_init_from_gpumode_end_to_end(tmp_path, run_kgit, fast_config):
    result = run_kgit(tmp_path, "init", "repo", "--from-gpumode", str(GPUMODE), "--config", str(fast_config))
    assert result.exit_code == 0, result.stderr
    repo = tmp_path / "repo"
    assert (repo / "kernel.py").read_text() == (GPUMODE / "submission.py").read_text()
    helpers = repo / "problem" / "gpumode"
    assert (helpers / "reference.py").read_text() == (GPUMODE / "reference.py").read_text()
    assert (helpers / "utils.py").read_text() == (GPUMODE.parent / "utils.py").read_text()  # from ../utils.py
    assert (helpers / "task.py").exists() and not (helpers / "eval.py").exists()
    task = yaml.safe_load((repo / "problem" / "task.yml").read_text())
    assert task["name"] == "row-scale" and task["files"] == ["kernel.py"]
    assert task["output"] == 2  # ref_kernel unpacks (x, scale, out) and returns out
    assert task["tests"][1] == {"rows": 17, "cols": 130, "seed": 12}
    assert "Scale each row" in task["summary"]
    trailers = _trailers(repo)
    assert "Kgit-Status: ok" in trailers
    # On the CPU the timed shape is the smallest test (task.yml's cpu section), not the benchmarks.
    assert task["cpu"] == {"tests": [{"rows": 3, "cols": 5, "seed": 11}, {"rows": 17, "cols": 130, "seed": 12}],
                           "benchmarks": [{"rows": 3, "cols": 5, "seed": 11}]}
    assert task["benchmarks"][0] == {"rows": 64, "cols": 256, "seed": 21}
    assert "Kgit-Time-us: rows=3,cols=5 " in trailers and "rows=64" not in trailers
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.slow
def test_the_gpumode_check_is_the_one_that_decides(tmp_path):
    # A submission that is wrong by 1e-3: the problem's own check (rtol 1e-5) must reject it.
    source = tmp_path / "row_scale"
    shutil.copytree(GPUMODE, source)
    shutil.copy2(GPUMODE.parent / "utils.py", tmp_path / "utils.py")
    problem_dir, kernel = importers.gpumode_problem(source, tmp_path / "problem")
    assert "return _reference.check_implementation(data, output)" in (problem_dir / "reference.py").read_text()
    wrong = kernel.replace("out.mul_(scale.unsqueeze(1))", "out.mul_(scale.unsqueeze(1) * 1.001)")
    assert _evaluate(problem_dir, wrong, tmp_path)["status"] == "incorrect"
    assert _evaluate(problem_dir, kernel, tmp_path)["status"] == "ok"


def _evaluate(problem_dir: Path, kernel: str, tmp_path: Path) -> dict:
    config = config_mod.parse(fast_config_text(), "test config")
    scratch = Path(tmp_path / f"scratch-{abs(hash(kernel))}")
    scratch.mkdir()
    staged = scratch / "problem"
    shutil.copytree(problem_dir, staged)
    candidate = scratch / "candidate"
    candidate.mkdir()
    (candidate / "kernel.py").write_text(kernel)
    return child.run_child(staged, candidate, config, scratch)


@pytest.mark.parametrize("remove, named", [
    ("reference.py", "no reference.py"),
    ("task.yml", "no task.yml"),
    ("submission.py", "no submission.py"),
])
def test_gpumode_folders_that_do_not_fit_name_what_is_missing(tmp_path, remove, named):
    source = tmp_path / "row_scale"
    shutil.copytree(GPUMODE, source)
    shutil.copy2(GPUMODE.parent / "utils.py", tmp_path / "utils.py")
    (source / remove).unlink()
    with pytest.raises(KgitError, match=named) as info:
        importers.gpumode_problem(source, tmp_path / "problem")
    assert "GPU MODE problem folder holds" in str(info.value)


def test_gpumode_errors_for_wrong_contents(tmp_path):
    source = tmp_path / "row_scale"
    shutil.copytree(GPUMODE, source)
    with pytest.raises(KgitError, match=r"lists utils.py from \.\./utils.py"):
        importers.gpumode_problem(source, tmp_path / "p1")  # the shared utils.py was left behind
    shutil.copy2(GPUMODE.parent / "utils.py", tmp_path / "utils.py")
    reference = source / "reference.py"
    reference.write_text(reference.read_text().replace("def ref_kernel", "def reference_kernel"))
    with pytest.raises(KgitError, match="defines no ref_kernel"):
        importers.gpumode_problem(source, tmp_path / "p2")
    shutil.copy2(GPUMODE / "reference.py", reference)
    spec = source / "task.yml"
    spec.write_text(spec.read_text().split("benchmarks:")[0])
    with pytest.raises(KgitError, match="no 'benchmarks' list"):
        importers.gpumode_problem(source, tmp_path / "p3")
    submission = source / "submission.py"
    submission.write_text(submission.read_text().replace("def custom_kernel", "def kernel"))
    with pytest.raises(KgitError, match="submission.py defines no custom_kernel"):
        importers.gpumode_problem(source, tmp_path / "p5")
    with pytest.raises(KgitError, match="is not a folder"):
        importers.gpumode_problem(source / "task.yml", tmp_path / "p4")


def test_the_preallocated_output_is_read_from_ref_kernel():
    def index(source):
        return importers._returned_input(ast.parse(source))

    assert index("def ref_kernel(data):\n    a, b, a_scale, b_scale, c = data\n    c[...] = a\n    return c\n") == 4
    assert index("def ref_kernel(data):\n    x, w = data\n    return x @ w\n") is None
    assert index("def ref_kernel(data):\n    return data[0]\n") is None


def test_gpumode_without_a_files_list_takes_the_sibling_modules(tmp_path):
    source = tmp_path / "row_scale"
    shutil.copytree(GPUMODE, source)
    shutil.copy2(GPUMODE.parent / "utils.py", source / "utils.py")
    spec = yaml.safe_load((source / "task.yml").read_text())
    del spec["files"]
    (source / "task.yml").write_text(yaml.safe_dump(spec))
    problem_dir, _ = importers.gpumode_problem(source, tmp_path / "problem")
    assert sorted(p.name for p in (problem_dir / "gpumode").iterdir()) == ["reference.py", "task.py", "utils.py"]
    assert yaml.safe_load((problem_dir / "task.yml").read_text())["name"] == "row_scale"  # no "# name:" line


# -- KernelBench --------------------------------------------------------------------------------
@pytest.mark.slow
def test_init_from_kernelbench_end_to_end(tmp_path, run_kgit, fast_config):
    result = run_kgit(tmp_path, "init", "repo", "--from-kernelbench", str(KERNELBENCH), "--config", str(fast_config))
    assert result.exit_code == 0, result.stderr
    repo = tmp_path / "repo"
    kernel = (repo / "kernel.py").read_text()
    assert "class ModelNew(nn.Module)" in kernel and "super(ModelNew, self)" in kernel
    assert "class Model(" not in kernel and "def custom_kernel(data)" in kernel
    task = yaml.safe_load((repo / "problem" / "task.yml").read_text())
    sizes = {"batch_size": 4, "in_features": 8, "out_features": 16}
    assert task["benchmarks"] == [{**sizes, "seed": 3}] and task["tolerance"]["rtol"] == 0.01
    assert "linear layer followed by ReLU" in task["summary"]
    trailers = _trailers(repo)
    assert "Kgit-Status: ok" in trailers
    # On the CPU: the batch shrinks; the sizes get_init_inputs reads (the weights) stay.
    assert task["cpu"]["benchmarks"] == [{"batch_size": 2, "in_features": 8, "out_features": 16, "seed": 3}]
    assert task["tolerance"]["relative"] == 0.01
    assert "Kgit-Time-us: batch_size=2,in_features=8,out_features=16 " in trailers

    # The reference really compares: a ModelNew that computes something else is incorrect.
    result = run_kgit(repo, "try", "sigmoid instead of relu")
    assert result.exit_code == 0, result.stderr
    (repo / "kernel.py").write_text(kernel.replace("torch.relu(", "torch.sigmoid("))
    result = run_kgit(repo, "record")
    assert result.exit_code == 3
    assert "Kgit-Status: incorrect" in git(repo, "log", "-1", "--format=%(trailers:only,unfold)")


def test_kernelbench_weights_are_seeded_alike(tmp_path):
    # ModelNew and Model must start from equal weights, or no copy of Model could pass.
    problem_dir, kernel = importers.kernelbench_problem(KERNELBENCH, tmp_path / "problem")
    scope_ref, scope_kernel = {}, {}
    exec(compile((problem_dir / "reference.py").read_text(), "reference.py", "exec"), scope_ref)
    exec(compile(kernel, "kernel.py", "exec"), scope_kernel)
    data = scope_ref["generate_input"](seed=5, batch_size=3, in_features=8, out_features=16)
    assert data[0].shape == (3, 8)  # the sizes come from the shape, not only from the file
    expected = scope_ref["ref_kernel"](data)
    got = scope_kernel["custom_kernel"](data)
    assert expected.shape == (3, 16) and bool((got == expected).all())
    again = scope_ref["generate_input"](seed=5, batch_size=3, in_features=8, out_features=16)
    other = scope_ref["generate_input"](seed=6, batch_size=3, in_features=8, out_features=16)
    assert bool((again[0] == data[0]).all()) and not bool((other[0] == data[0]).all())


def test_kernelbench_without_sizes_and_with_model_in_strings(tmp_path):
    source = tmp_path / "literal.py"
    source.write_text(
        '"""Doubles its input."""\nimport torch\nimport torch.nn as nn\n\n\n'
        'class Model(nn.Module):\n    """Model: x * 2 (the word Model in a string stays)."""\n\n'
        '    def forward(self, x):\n        return x * 2\n\n\n'
        'def get_inputs():\n    return [torch.randn(2, 3)]\n\n\ndef get_init_inputs():\n    return []\n')
    problem_dir, kernel = importers.kernelbench_problem(source, tmp_path / "problem")
    task = yaml.safe_load((problem_dir / "task.yml").read_text())
    assert task["benchmarks"] == [{"inputs": "get_inputs", "seed": 3}]
    assert task["summary"] == "Doubles its input."
    assert '"""Model: x * 2 (the word Model in a string stays)."""' in kernel and "class ModelNew(" in kernel


@pytest.mark.parametrize("text, named", [
    ("import torch\n\ndef get_inputs():\n    return []\n", "defines no Model, no get_init_inputs"),
    ("class Model:\n    pass\n\ndef get_inputs(): return []\n\ndef get_init_inputs(): return []\n"
     "class ModelNew(Model):\n    pass\n", "already defines ModelNew"),
    ("class Model(:\n", "literal.py:1"),
])
def test_kernelbench_files_that_do_not_fit(tmp_path, text, named):
    source = tmp_path / "literal.py"
    source.write_text(text)
    with pytest.raises(KgitError, match=named):
        importers.kernelbench_problem(source, tmp_path / "problem")


def test_cli_errors(tmp_path, run_kgit):
    result = run_kgit(tmp_path, "init", "repo", "--from-kernelbench", str(tmp_path / "nope.py"))
    assert result.exit_code == 1 and "is not a file" in result.stderr and "get_init_inputs" in result.stderr
    result = run_kgit(tmp_path, "init", "repo", "--problem", "vector_add", "--from-kernelbench", str(KERNELBENCH))
    assert result.exit_code == 2 and "once" in result.stderr
    result = run_kgit(tmp_path, "init", "repo")
    assert result.exit_code == 2 and "--problem" in result.stderr and "--from-gpumode" in result.stderr
    assert not (tmp_path / "repo").exists()  # nothing was created on a usage error


# -- the timing protocol of an imported problem -----------------------------------------------
# Minimal evaluators with the shape of GPU MODE's leaderboard loops, written for these tests.
_WALL_EVAL = '''
def _run_single_benchmark(test, recheck, max_repeats, max_time_ns):
    for i in range(max_repeats):
        data = generate_input(**test.args)
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        output = custom_kernel(data)
        torch.cuda.synchronize()
        end = time.perf_counter_ns()

def main():
    mode = "leaderboard"
'''
_EVENTS_EVAL = '''
def _run_single_benchmark(test, recheck, max_repeats, max_time_ns):
    for i in range(max_repeats):
        data = generate_input(**test.args)
        start_event = torch.cuda.Event(enable_timing=True)
        end_event = torch.cuda.Event(enable_timing=True)
        clear_l2_cache()
        start_event.record()
        output = custom_kernel(data)
        end_event.record()
        duration = start_event.elapsed_time(end_event)
'''


def _gpumode_with_eval(tmp_path, text: str | None, where: str = "beside") -> Path:
    root = tmp_path / "problems"
    shutil.copytree(GPUMODE.parent, root)  # the problem and the utils.py its task.yml takes from beside it
    source = root / GPUMODE.name
    if text is not None:
        (root if where == "beside" else source).joinpath("eval.py").write_text(text)
    return source


@pytest.mark.parametrize("text, where, protocol", [
    (_WALL_EVAL, "beside", "gpumode-leaderboard-wall"),  # problems/amd/eval.py beside problems/amd/fp8-mm
    (_EVENTS_EVAL, "inside", "gpumode-leaderboard-events"),
    (None, None, "kgit-adaptive"),
])
def test_an_imported_problem_is_timed_as_its_eval_py_times(tmp_path, text, where, protocol):
    problem_dir, _ = importers.gpumode_problem(_gpumode_with_eval(tmp_path, text, where), tmp_path / "out")
    task = yaml.safe_load((problem_dir / "task.yml").read_text())
    assert task["protocol"] == protocol
    assert f"Timed by {protocol}" in task["description"]


def test_an_eval_py_kgit_does_not_recognise_is_named_with_the_way_out(tmp_path):
    source = _gpumode_with_eval(tmp_path, "def main():\n    return 0\n")
    with pytest.raises(importers.ImportProblemError, match=r"eval\.py: kgit does not recognise .* --protocol NAME"):
        importers.gpumode_problem(source, tmp_path / "out")
    problem_dir, _ = importers.gpumode_problem(source, tmp_path / "out2", "gpumode-batch")
    assert yaml.safe_load((problem_dir / "task.yml").read_text())["protocol"] == "gpumode-batch"
    with pytest.raises(importers.ImportProblemError, match="unknown timing protocol 'fastest'"):
        importers.gpumode_problem(source, tmp_path / "out3", "fastest")


def test_a_kernelbench_problem_is_timed_as_kernelbench_times_it(tmp_path):
    problem_dir, _ = importers.kernelbench_problem(KERNELBENCH, tmp_path / "out")
    assert yaml.safe_load((problem_dir / "task.yml").read_text())["protocol"] == "kernelbench-events"


# -- the examples the docs import offline -------------------------------------------------------
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_the_documented_examples_import_offline_and_say_what_to_tune(tmp_path, run_kgit, fast_config):
    """docs/problems.md's two commands, on the problems shipped under examples/: no network, and the
    offline strategist says plainly that an imported kernel marks nothing it could tune."""
    folder, file = EXAMPLES / "gpumode-grayscale", EXAMPLES / "kernelbench" / "1_square_matmul.py"
    gm = run_kgit(tmp_path, "init", "grayscale", "--from-gpumode", str(folder), "--config", str(fast_config))
    assert gm.exit_code == 0, gm.stderr
    assert "note: kernel.py marks no tunable parameter" in gm.output and "kgit try" in gm.output
    repo = tmp_path / "grayscale"
    assert (repo / "kernel.py").read_text() == (folder / "submission.py").read_text()
    assert sorted(p.name for p in (repo / "problem" / "gpumode").iterdir()) == ["reference.py", "task.py"]
    evolved = run_kgit(repo, "evolve", "-n", "1")
    assert evolved.exit_code == 0
    assert "0 attempt(s)" in evolved.output and "nothing it can tune: kernel.py marks no tunable" in evolved.output
    assert "measured every configuration" not in evolved.output
    assert git(repo, "for-each-ref", "refs/heads/kgit/") == ""

    kb = run_kgit(tmp_path, "init", "matmul", "--from-kernelbench", str(file), "--config", str(fast_config))
    assert kb.exit_code == 0, kb.stderr
    task = yaml.safe_load((tmp_path / "matmul" / "problem" / "task.yml").read_text())
    assert task["benchmarks"][0]["N"] == 2048 and task["cpu"]["benchmarks"][0]["N"] == 64
    assert "class ModelNew" in (tmp_path / "matmul" / "kernel.py").read_text()
