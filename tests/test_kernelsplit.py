"""The per-kernel split of a GPU measurement (harness/kernelsplit.py): names shortened,
rows summed and bounded, the judge's validation of what the runner reports, the result
field's check, the note kgit keeps and the designer's line; and on a GPU, the fp8
baseline's evaluation reporting its Triton kernel and torch's input copies per shape."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from kgit_harness import kernelsplit
from kgit_harness.result import Result, new

# Kernel names as CUPTI reports them for torch's own kernels (shortened where long).
COPY = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
        "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#14}::"
        "operator()() const::{lambda(c10::Float8_e4m3fn)#1}>(at::TensorIteratorBase&, ...)::{lambda(int)#1}>"
        "(int, ...)")
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, ...)")
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int)"
SUM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
       "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
       "unsigned int, float, 4, 4> >(...)")
CAT = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 2, 128, 1>(...)"
CUTLASS = "void cutlass::Kernel2<cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_128x2_tn_align8>(cutlass_80_wmma::Params)"


@pytest.mark.parametrize("raw, short", [
    ("_blockscale_gemm", "_blockscale_gemm"),  # Triton kernels keep their names
    (COPY, "aten copy (elementwise)"), (FILL, "aten fill (elementwise)"), (MUL, "aten mul (elementwise)"),
    (ADD, "aten add (elementwise)"), (SUM, "aten sum (reduce)"), (CAT, "aten cat"),
    ("Memcpy DtoD (Device -> Device)", "memcpy DtoD"), ("Memset (Device)", "memset"),
    (CUTLASS, "cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_128x2_tn_align8"),
    ("void splitKreduce_kernel<32, 16, int, float>(cublasSplitKParams<float>, float const*)", "splitKreduce_kernel"),
])
def test_kernel_names_are_shortened_to_what_a_reader_can_use(raw, short):
    assert kernelsplit.short_name(raw) == short


def test_a_long_name_is_cut():
    assert len(kernelsplit.short_name("k" * 500)) == kernelsplit.NAME_CHARS


def test_rows_sum_launches_by_short_name_longest_first():
    rows = kernelsplit.summarize([("_gemm", 480.0), (COPY, 200.0), (COPY.replace("#14", "#15"), 240.0),
                                  (FILL, 3.0), ("Memset (Device)", 0.5)])
    assert rows == [{"name": "_gemm", "count": 1, "us": 480.0},
                    {"name": "aten copy (elementwise)", "count": 2, "us": 440.0},
                    {"name": "aten fill (elementwise)", "count": 1, "us": 3.0},
                    {"name": "memset", "count": 1, "us": 0.5}]


def test_beyond_max_rows_the_shortest_kernels_are_summed_into_one_row():
    events = [(f"k{i}", float(100 - i)) for i in range(kernelsplit.MAX_ROWS + 5)]
    rows = kernelsplit.summarize(events)
    assert len(rows) == kernelsplit.MAX_ROWS
    assert rows[0] == {"name": "k0", "count": 1, "us": 100.0}
    other = rows[-1]
    assert other["name"] == kernelsplit.OTHER and other["count"] == 6
    assert math.isclose(sum(r["us"] for r in rows), sum(us for _, us in events))


def test_the_judge_keeps_only_well_formed_rows():
    good = [{"name": "_gemm\x1b[31m", "count": 2, "us": 12}]
    assert kernelsplit.clean(good) == [{"name": "_gemm?[31m", "count": 2, "us": 12.0}]
    assert kernelsplit.clean([{"name": "x" * 300, "count": 1, "us": 1.0}])[0]["name"] == "x" * kernelsplit.NAME_CHARS
    bad = [None, [], "rows", [{"name": "a", "count": 1}], [{"name": "a", "count": 1, "us": 1.0, "extra": 1}],
           [{"name": "", "count": 1, "us": 1.0}], [{"name": "a", "count": 0, "us": 1.0}],
           [{"name": "a", "count": True, "us": 1.0}], [{"name": "a", "count": 1.5, "us": 1.0}],
           [{"name": "a", "count": 1, "us": float("nan")}], [{"name": "a", "count": 1, "us": -1.0}],
           [{"name": "a", "count": 1, "us": float("inf")}], [{"name": 3, "count": 1, "us": 1.0}],
           [{"name": "a", "count": 1, "us": 1.0}] * (kernelsplit.MAX_ROWS + 1)]
    for rows in bad:
        with pytest.raises(ValueError):
            kernelsplit.clean(rows)


def _doc(kernels):
    doc = new("ok", device="NVIDIA H200", timing="events", geomean_us=10.0,
              shapes=[{"key": "m=1", "mean_us": 10.0}])
    if kernels is not None:
        doc["shapes"][0]["kernels"] = kernels
    return doc


def test_the_result_accepts_a_labelled_split_and_refuses_a_malformed_one():
    rows = [{"name": "_gemm", "count": 1, "us": 9.0}]
    assert Result.from_dict(_doc(kernelsplit.entry(rows))).shapes[0].kernels["source"] == "candidate-reported"
    Result.from_dict(_doc(kernelsplit.entry(None, "torch.profiler recorded no device kernels")))
    Result.from_dict(_doc(None))  # older documents have no split
    for broken in ({"rows": rows}, {"source": "judge", "rows": rows}, {"source": kernelsplit.SOURCE, "rows": []},
                   {"source": kernelsplit.SOURCE, "rows": [{"name": "a", "count": -1, "us": 1.0}]}, [rows]):
        with pytest.raises(ValueError):
            Result.from_dict(_doc(broken))


def test_the_note_keeps_the_split_compactly_and_only_when_there_is_one():
    from kgit.archive import measure

    doc = _doc(kernelsplit.entry([{"name": "_gemm", "count": 1, "us": 479.64},
                                  {"name": "aten copy (elementwise)", "count": 2, "us": 440.04}]))
    record = measure.note_record(Result.from_dict(doc), tag="remeasure").to_note()
    assert record["kernels"] == {"m=1": [["_gemm", 1, 479.6], ["aten copy (elementwise)", 2, 440.0]]}
    assert "kernels" not in measure.note_record(Result.from_dict(_doc(None)), tag="remeasure").to_note()
    failed = copy.deepcopy(doc)
    failed["shapes"][0]["kernels"] = kernelsplit.entry(None, "the profiled call failed")
    assert "kernels" not in measure.note_record(Result.from_dict(failed)).to_note()


def test_the_designers_split_names_the_top_three_and_sums_the_rest():
    rows = [["aten copy (elementwise)", 2, 440.0], ["_gemm", 1, 479.6], ["aten fill (elementwise)", 1, 8.0],
            ["memset", 3, 3.0], [kernelsplit.OTHER, 4, 2.0]]
    assert kernelsplit.line(rows) == "_gemm 479.6 us + aten copy (elementwise) x2 440.0 us + aten fill (elementwise) 8.0 us + other 5.0 us"
    assert kernelsplit.line([["_gemm", 1, 50.0]]) == "_gemm 50.0 us"


def test_the_profiler_wrapper_on_a_machine_without_device_kernels():
    """Without a GPU the CUDA activity cannot start: a reason, and the call is not made. With
    the CPU activity the wrapper runs the call once and finds no device events in what torch
    recorded; a failing call propagates with the profiler stopped."""
    from torch.profiler import ProfilerActivity

    calls = []
    rows, why = kernelsplit.profile_call(torch, lambda: calls.append(1), lambda: None)
    assert rows is None and why.startswith("torch.profiler did not start") and not calls
    cpu = [ProfilerActivity.CPU]
    rows, why = kernelsplit.profile_call(torch, lambda: calls.append(torch.ones(64) * 2), lambda: None, cpu)
    assert len(calls) == 1 and rows is None and why == "torch.profiler recorded no device kernels"

    def boom():
        raise RuntimeError("the kernel failed")

    with pytest.raises(RuntimeError, match="the kernel failed"):
        kernelsplit.profile_call(torch, boom, lambda: None, cpu)
    # Stopped: another profiler starts and records (torch refuses to run two at once).
    assert kernelsplit.profile_call(torch, lambda: torch.ones(4) + 1, lambda: None, cpu)[1].endswith("no device kernels")


def test_a_profiler_start_leaves_inductor_unimported_and_torch_as_it_was():
    """torch.profiler's start asks hasattr(torch, "_inductor"), which imports inductor, dynamo
    and sympy (seconds of a warm pair's start-up) where nothing had: kgit's sessions answer no
    without the import, and give torch its own lookup back."""
    code = (
        "import sys, torch\n"
        "from kgit_harness import kernelsplit\n"
        "lookup = torch.__dict__['__getattr__']\n"
        "kernelsplit.warm_up(torch)\n"
        "s = kernelsplit.Session(torch, lambda: None, [torch.profiler.ProfilerActivity.CPU]).start()\n"
        "s.call(lambda: torch.ones(4).sum())\n"
        "s.stop()\n"
        "print(s.prof is not None, 'torch._inductor' in sys.modules, 'torch._dynamo' in sys.modules,\n"
        "      torch.__dict__['__getattr__'] is lookup)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-4:] == ["True", "False", "False", "True"], done.stdout


def test_one_session_tells_each_calls_kernels_apart_by_the_marker_kernels():
    marker = ("at::cuda::(anonymous namespace)::spin_kernel(long)", 0.0, 1.0)
    events = [marker, ("_add", 1.0, 5.0), ("Memset (Device)", 2.0, 1.0), marker, marker, ("_gemm", 9.0, 40.0), marker]
    splits = kernelsplit.segments(events, 3, marked=True)
    assert splits[0] == ([{"name": "_add", "count": 1, "us": 5.0}, {"name": "memset", "count": 1, "us": 1.0}], None)
    assert splits[1] == (None, kernelsplit.NO_KERNELS)  # a call that launched nothing
    assert splits[2] == ([{"name": "_gemm", "count": 1, "us": 40.0}], None)
    # The lead markers, some of them lost as the session started: the calls are read from the last markers.
    assert kernelsplit.segments([marker, ("_warm", 0.0, 1.0)] + events, 3, marked=True) == splits
    assert kernelsplit.segments([marker] * kernelsplit.LEAD_MARKERS + events, 3, marked=True) == splits
    # A marker lost, or more markers than were launched (the candidate ran the marker kernel
    # itself): the calls cannot be told apart, so none is split.
    assert kernelsplit.segments(events[1:], 3, marked=True) == [(None, kernelsplit.AMBIGUOUS)] * 3
    assert kernelsplit.segments([marker] * (kernelsplit.LEAD_MARKERS + 1) + events, 3, marked=True) \
        == [(None, kernelsplit.AMBIGUOUS)] * 3
    # Unmarked, a session holds one call: every device event is that call's.
    assert kernelsplit.segments(events[1:3], 1, marked=False)[0][0][0]["name"] == "_add"
    with pytest.raises(ValueError):
        kernelsplit.segments(events, 2, marked=False)


def test_a_session_reports_every_call_and_marks_the_one_that_failed():
    """On the CPU (no device events) the session still runs each call once between its
    markers, stops the profiler after a failing call, and says which call failed."""
    from torch.profiler import ProfilerActivity

    made, marks = [], []
    session = kernelsplit.Session(torch, lambda: None, [ProfilerActivity.CPU], marker=lambda: marks.append(1)).start()
    session.call(lambda: made.append(torch.ones(8) * 2))

    def boom():
        raise RuntimeError("the kernel failed")

    with pytest.raises(RuntimeError):
        session.call(boom)
    session.call(lambda: made.append(torch.ones(8) + 1))
    splits = session.stop()
    assert len(made) == 2 and len(marks) == kernelsplit.LEAD_MARKERS + 4 and len(splits) == 3
    assert splits[1] == (None, "the call failed")
    assert splits[0][0] is None and splits[2][0] is None  # no device kernels on the CPU
    # Stopped: another profiler starts and records (torch refuses to run two at once).
    assert kernelsplit.profile_call(torch, lambda: torch.ones(4) + 1, lambda: None, [ProfilerActivity.CPU])[1] \
        == kernelsplit.NO_KERNELS
    # A device that fails at the session's end (an illegal access left behind): every split says
    # so, and the profiler is still stopped.
    broken = kernelsplit.Session(torch, lambda: None, [ProfilerActivity.CPU], marker=lambda: None).start()
    broken.call(lambda: None)
    broken.marker = lambda: (_ for _ in ()).throw(RuntimeError("CUDA error: an illegal memory access"))
    assert broken.stop() == [(None, "the device failed after the profiled calls: RuntimeError: CUDA error: "
                                    "an illegal memory access")]
    assert kernelsplit.profile_call(torch, lambda: torch.ones(4) + 1, lambda: None, [ProfilerActivity.CPU])[1] \
        == kernelsplit.NO_KERNELS


# -- on the GPU ------------------------------------------------------------------------------
def _contiguous_variant(folder: Path) -> Path:
    """The shipped fp8 problem whose baseline kernel also makes torch's `.contiguous()` copies of
    its column-major inputs, the copies the fp8 campaign's best attempt paid for."""
    import shutil

    from kgit_harness.problem import shipped

    shutil.copytree(shipped()["fp8_blockscale_gemm"], folder)
    source = (folder / "kernel.py").read_text()
    marker = "    a, b, a_scale, b_scale, c = data\n"
    assert marker in source
    (folder / "kernel.py").write_text(source.replace(marker, marker + "    a, b = a.contiguous(), b.contiguous()\n"))
    return folder


@pytest.mark.gpu
def test_the_fp8_baselines_evaluation_splits_each_shape_into_its_triton_kernel_and_the_input_copies():
    import yaml
    from conftest import FAST_TIMING

    from kgit import config as config_mod
    from kgit.evaluation import child

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        variant = _contiguous_variant(scratch / "variant")
        data = yaml.safe_load(config_mod.default_text())
        data["timing"] = dict(FAST_TIMING)
        config = config_mod.parse(yaml.safe_dump(data), "test config")
        (scratch / "stage").mkdir()
        problem_dir, candidate_dir = child.stage_candidate(variant, ".", ["kernel.py"], scratch / "stage")
        doc = child.run_child(problem_dir, candidate_dir, config, scratch / "stage")
    assert doc["status"] == "ok", doc.get("error") or doc.get("stderr")
    assert doc["timing"] == "events" and len(doc["shapes"]) == 18
    for shape in doc["shapes"]:
        split = shape["kernels"]
        assert split["source"] == "candidate-reported", split
        by_name = {r["name"]: r for r in split["rows"]}
        assert by_name["_blockscale_gemm"]["count"] == 1 and by_name["_blockscale_gemm"]["us"] > 0, split
        # The two .contiguous() copies, by whatever ATen kernel this torch moves fp8 with (the
        # H200's torch 2.11 does not use the elementwise copy the CPU-side fixtures name).
        copies = [r for r in split["rows"] if r["name"].startswith("aten ")]
        assert sum(r["count"] for r in copies) == 2 and all(r["us"] > 0 for r in copies), split
        print(shape["key"], f"{shape['mean_us']:.1f} us =",
              " + ".join(f"{r['name']} x{r['count']} {r['us']:.1f} us" for r in split["rows"]))


@pytest.mark.gpu
def test_kernel_split_false_leaves_the_split_out_and_the_timing_as_it_is():
    import yaml
    from conftest import FAST_TIMING

    from kgit import config as config_mod
    from kgit.evaluation import child
    from kgit_harness import problem

    data = yaml.safe_load(config_mod.default_text())
    data["timing"] = dict(FAST_TIMING)
    docs = {}
    for split in (True, False):
        data["evaluator"]["kernel_split"] = split
        config = config_mod.parse(yaml.safe_dump(data), "test config")
        with tempfile.TemporaryDirectory() as scratch:
            scratch = Path(scratch)
            problem_dir, candidate_dir = child.stage_candidate(problem.shipped()["vector_add"], ".", ["kernel.py"],
                                                                  scratch)
            docs[split] = child.run_child(problem_dir, candidate_dir, config, scratch)
    assert docs[True]["status"] == docs[False]["status"] == "ok", (docs[True].get("error"), docs[False].get("error"))
    assert all(s["kernels"]["rows"] for s in docs[True]["shapes"])
    assert not any("kernels" in s for s in docs[False]["shapes"])
    print({k: v["phases"]["judge"].get("kernels split") for k, v in docs.items()})


class ScriptedRunner:
    """The judge's end of a runner whose `kernels` answers are scripted, per shape in order: a
    split ({"kernels", "why"}) it reports at `kernels_stop`, or the exception the call raised."""

    def __init__(self, answers):
        self.answers, self.asked, self.splits = list(answers), [], []

    def ask(self, message, fds=()):
        self.asked.append(message["op"])
        if message["op"] == "kernels_stop":
            return {"op": "done", "splits": self.splits}
        if message["op"] != "kernels":
            return {"op": "done"}
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            self.splits.append({"kernels": None, "why": "the call failed"})
            raise answer
        self.splits.append(answer)
        return {"op": "done"}


def _judge_splits(answers):
    from kgit_harness import judge, problem

    folder = problem.shipped()["vector_add"]
    task = problem.load_task(folder)
    reference = problem.load_module(folder / "reference.py", "_kgit_test_reference")
    shapes = [{"size": 1024 * (i + 1), "seed": i} for i in range(len(answers))]
    entries = [{"key": problem.shape_key(s), "mean_us": 1.0} for s in shapes]
    runner = ScriptedRunner(answers)
    judge._kernel_splits(task, reference, runner, torch, shapes, entries, False)
    return entries, runner


def test_the_judge_files_each_shapes_split_labelled_and_keeps_the_verdict_when_it_fails():
    from kgit_harness import judge

    rows = [{"name": "_add", "count": 1, "us": 5.0}]
    entries, runner = _judge_splits([
        {"kernels": rows, "why": None},
        {"kernels": [{"name": "_add", "count": -3, "us": 5.0}]},
        {"kernels": None, "why": "torch.profiler did not start: RuntimeError: CUPTI"},
        judge.Verdict("runtime-error", "Traceback ...\nRuntimeError: illegal memory access"),
    ])
    assert runner.asked.count("kernels") == 4 and runner.asked.count("forget") == 4  # every arena closed
    # One profiler session for every shape: started before the first call, stopped after the last.
    assert runner.asked[0] == "kernels_start" and runner.asked[-1] == "kernels_stop"
    assert runner.asked.count("kernels_start") == runner.asked.count("kernels_stop") == 1
    assert entries[0]["kernels"] == {"source": "candidate-reported", "calls": 1, "rows": rows}
    assert entries[1]["kernels"]["rows"] == [] and "malformed" in entries[1]["kernels"]["why"]
    assert entries[2]["kernels"]["why"].startswith("torch.profiler did not start")
    assert entries[3]["kernels"]["why"] == "the profiled call failed (runtime-error): RuntimeError: illegal memory access"
    for entry in entries:
        kernelsplit.check_entry(entry["kernels"])


def test_a_guard_the_profiled_call_trips_still_rejects():
    from kgit_harness import judge

    with pytest.raises(judge.Verdict) as caught:
        _judge_splits([judge.Verdict("rejected", "the kernel started a thread", reason="threads started by the kernel")])
    assert caught.value.status == "rejected"


def _gpu_result(geomean_us, rows=None):
    from kgit_harness import result as result_mod

    shape = {"key": "n=1", "mean_us": geomean_us}
    if rows:
        shape["kernels"] = kernelsplit.entry(rows)
    return result_mod.new("ok", device="Test GPU", timing="events", harness="test harness", geomean_us=geomean_us,
                          shapes=[shape], eval_s=0.5)


def test_a_gpu_attempts_split_is_kept_beside_its_commit_and_the_designer_reads_it(tmp_path, monkeypatch):
    from conftest import init_with_one_attempt

    from kgit.archive.repo import Repo
    from kgit.scientist import design
    from kgit.scientist.view import ArchiveView

    gemm = [{"name": "_gemm", "count": 1, "us": 6.0}, {"name": "aten copy (elementwise)", "count": 2, "us": 3.5}]
    root = tmp_path / "k"
    baseline, plain = init_with_one_attempt(root, monkeypatch, _gpu_result(10.0, gemm), _gpu_result(8.0))
    attempts = Repo(root).read()
    by_sha = {a.sha: a for a in attempts}
    kept = [n.to_note() for n in by_sha[baseline].notes.kernels]
    assert [n["kernels"] for n in kept] == [{"n=1": [["_gemm", 1, 6.0], ["aten copy (elementwise)", 2, 3.5]]}]
    assert not by_sha[plain].notes.kernels  # no split, no note
    view = ArchiveView(attempts)
    assert view.on_device[baseline] == 10.0  # the split note is not a measurement
    text = design.base_times(view, baseline)
    assert "- n=1: 10.0 us = _gemm 6.0 us + aten copy (elementwise) x2 3.5 us" in text
    assert " = " not in design.base_times(view, plain)
    # kgit show, and the summary of an evaluation, print it for people too.
    from kgit.evaluation.evaluated import Evaluation
    from kgit.review import text as text_mod

    shown = text_mod.attempt_text(by_sha[baseline], "", {}, "")
    assert "device kernels of one call per shape on Test GPU (torch.profiler, candidate-reported):" in shown
    assert "  n=1: _gemm 6.0 us + aten copy (elementwise) x2 3.5 us" in shown
    assert "device kernels" not in text_mod.attempt_text(by_sha[plain], "", {}, "")
    summary = text_mod.result_summary(Evaluation.of(_gpu_result(10.0, gemm)))
    assert "  n=1: _gemm 6.0 us + aten copy (elementwise) x2 3.5 us" in summary
