"""The judge's record of a problem (needs.Record): its input sizes measured once per problem and torch
version, and the reference's own run once per device."""

import json
import shutil
import subprocess
import sys

import pytest
import torch

from kgit_harness import needs, portable, problem, torchflags


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
    store = tmp_path / "problem-records"

    def check():
        needs.check(task, reference, False, torch, needs.Record(str(store), needs.problem_digest(folder, torch, False)))

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
    sizes = needs.Record(str(tmp_path), needs.problem_digest(folder, torch, False))
    needs.check(task, reference, False, torch, sizes)
    recorded = needs.Record(str(tmp_path), needs.problem_digest(folder, torch, False))
    assert recorded.known and all(v > 0 for v in recorded.known.values())
    monkeypatch.setattr(needs, "_available_bytes", lambda on_gpu, torch: 1)
    try:
        needs.check(task, reference, False, torch, recorded)
    except needs.Unsupported as e:
        assert "needs" in str(e) and "memory" in str(e)
    else:
        raise AssertionError("a recorded size larger than the memory was not refused")


def test_the_reference_runs_on_its_own_input_once_per_problem_and_device(tmp_path, monkeypatch):
    folder = tmp_path / "problem"
    shutil.copytree(problem.shipped()["vector_add"], folder)
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "record_vector_add_reference")
    ran = []
    real = reference.ref_kernel
    monkeypatch.setattr(reference, "ref_kernel", lambda data: ran.append(1) or real(data))

    def check():
        return needs.check(task, reference, False, torch, needs.Record(str(tmp_path / "records"),
                                                                       needs.problem_digest(folder, torch, False)))

    settings, now = check()
    assert now and len(ran) == 1 and set(settings) <= set(torchflags.NAMES)
    again, now = check()
    assert not now and len(ran) == 1 and again == settings  # the record's, not a second run
    # Another device is another record entry; a changed problem another record.
    path = next((tmp_path / "records").iterdir())
    doc = json.loads(path.read_text())
    assert list(doc["ran"]) == ["cpu"]
    doc["ran"] = {"NVIDIA H200": doc["ran"]["cpu"]}
    path.write_text(json.dumps(doc))
    assert check()[1] and len(ran) == 2
    (folder / "reference.py").write_text((folder / "reference.py").read_text() + "\n# changed\n")
    assert check()[1] and len(ran) == 3
    # A record the judge cannot trust (a setting torch does not have) is not used: the reference runs.
    for path in (tmp_path / "records").iterdir():
        doc = json.loads(path.read_text())
        doc["ran"]["cpu"]["not_a_setting"] = True
        path.write_text(json.dumps(doc))
    assert check()[1] and len(ran) == 4
    # A reference that cannot run is the machine's lack every time: nothing of it is recorded.
    monkeypatch.setattr(reference, "ref_kernel", lambda data: 1 / 0)
    store = tmp_path / "fresh"
    for _ in range(2):
        with pytest.raises(needs.Unsupported, match="ZeroDivisionError"):
            needs.check(task, reference, False, torch, needs.Record(str(store), needs.problem_digest(folder, torch, False)))
    assert all(not json.loads(p.read_text())["ran"] for p in store.iterdir())


def _bytes(tensor):
    # reshape, not contiguous(): a last dimension of size 1 counts as contiguous at any stride
    return tensor.reshape(-1).view(torch.uint8)


def test_the_reference_is_warmed_on_clones_and_its_failure_left_to_the_checks():
    folder = problem.shipped()["fp8_blockscale_gemm"]
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "warm_fp8_reference")
    sample = reference.generate_input(**task.shapes("tests", False)[0])
    before = [t.clone() for t in sample]
    seen = []
    real_check = reference.check_implementation

    def check(data, output):
        seen.append(real_check(data, output))
        return seen[-1]

    reference.check_implementation = check
    needs.warm_reference(task, reference, sample)
    assert seen and seen[0][0], seen  # the reference's own output passes its check
    # ref_kernel fills the preallocated output of its input: here a clone's, not the sample's. Bit
    # for bit, since that output buffer is uninitialised.
    assert all(torch.equal(_bytes(a), _bytes(b)) for a, b in zip(before, sample))
    reference.check_implementation = lambda data, output: 1 / 0
    needs.warm_reference(task, reference, sample)  # no raise: the checks meet it and say so


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
