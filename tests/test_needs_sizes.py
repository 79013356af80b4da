"""The judge's record of a problem's input sizes: measured once per problem and torch version."""

import shutil
import subprocess
import sys

import torch

from kgit_harness import needs, portable, problem


def _counting(monkeypatch):
    calls = []
    real = portable.input_bytes

    def counted(generate, shape):
        calls.append(shape)
        return real(generate, shape)

    monkeypatch.setattr(portable, "input_bytes", counted)
    return calls


def test_a_problems_input_sizes_are_measured_once_and_again_when_it_changes(tmp_path, monkeypatch):
    folder = tmp_path / "problem"
    shutil.copytree(problem.shipped()["softmax"], folder)
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "sizes_softmax_reference")
    calls = _counting(monkeypatch)
    store = tmp_path / "input-sizes"

    def check():
        needs.check(task, reference, False, torch, needs.Sizes(str(store), needs.problem_digest(folder, torch, False)))

    check()
    shapes = len(task.shapes("tests", False)) + len(task.shapes("benchmarks", False))
    assert len(calls) == shapes and len(list(store.iterdir())) == 1
    check()
    assert len(calls) == shapes  # the second evaluation reads them
    (folder / "task.yml").write_text((folder / "task.yml").read_text() + "\n# changed\n")
    check()
    assert len(calls) == 2 * shapes and len(list(store.iterdir())) == 2  # a changed problem measures again


def test_a_shape_too_large_is_refused_from_the_record_too(tmp_path, monkeypatch):
    folder = problem.shipped()["vector_add"]
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "sizes_vector_add_reference")
    sizes = needs.Sizes(str(tmp_path), needs.problem_digest(folder, torch, False))
    needs.check(task, reference, False, torch, sizes)
    recorded = needs.Sizes(str(tmp_path), needs.problem_digest(folder, torch, False))
    assert recorded.known and all(v > 0 for v in recorded.known.values())
    monkeypatch.setattr(needs, "_available_bytes", lambda on_gpu, torch: 1)
    try:
        needs.check(task, reference, False, torch, recorded)
    except needs.Unsupported as e:
        assert "needs" in str(e) and "memory" in str(e)
    else:
        raise AssertionError("a recorded size larger than the memory was not refused")


def test_sizing_a_generator_driven_input_stays_off_torchs_python_refs():
    # vector_add's inputs are randn with a generator: sized without the refs path (the
    # first use of which imports torch._dynamo, seconds of the judge's start). A fresh
    # interpreter, since this one may have imported it already.
    code = ("import sys, torch\n"
            "from kgit_harness import portable, problem\n"
            "folder = problem.shipped()['vector_add']\n"
            "ref = problem.load_module(folder / 'reference.py', 'r')\n"
            "print(portable.input_bytes(ref.generate_input, {'size': 1000, 'seed': 1}), 'torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(3 * 1000 * 4), "False"]
