"""What an fp8 campaign found missing from the prompts: failing
targets' reasons in the selector's table, the GPU benchmark shapes and the base's figures
there, the ranking device's software, and the build-target policy as configured."""

from __future__ import annotations

import json

from conftest import logged

from kgit.scientist import select

GPU = "NVIDIA H200"
LDS = "does not fit: needs 96 KiB of LDS per workgroup; gfx942 has 64 KiB"


def attempt(sha, experiment, when, targets=None, notes=(), base=None):
    """An attempt checked in the interpreter, with build-target trailers and note records."""
    message = (f"x\n\nKgit-Experiment: {experiment}\nKgit-Attempt: 1\nKgit-Status: ok\nKgit-Device: cpu\n"
               f"Kgit-Timing: interpreter\nKgit-Harness: h\nKgit-Geomean-us: 1000.0\n"
               f"Kgit-Branch: kgit/{experiment}-x\nKgit-Hypothesis: h{experiment}\n")
    message += f"Kgit-Base: {base * 40}\n" if base else ""
    message += "".join(f"Kgit-Target-{name.replace('_', '-')}: {value}\n" for name, value in (targets or {}).items())
    return logged([sha * 40, "", "t" * 40, "n", "e", str(when), message,
                   "".join(json.dumps(n) + "\n" for n in notes)])[0]


def test_the_selectors_table_says_why_a_target_fails():
    a = attempt("b", 1, 2, targets={"gfx942": f"fails: {LDS}", "sm_90a": "builds; regs 181, smem 72 KiB, spill 0, "
                                                                          "occupancy 2"})
    row = select.row(a)
    assert f"gfx942 fails: {LDS}" in row and "sm_90a regs 181 smem 72 KiB occ 2" in row
    long = attempt("c", 2, 3, targets={"sm_90a": "fails: RecursionError: " + "x" * 400})
    cell = select.row(long).split("targets: ")[1]
    assert cell.startswith("sm_90a fails: RecursionError: x") and len(cell) < 130


def remeasured(sha, experiment, when, times, versions=None, kernels=None):
    """An interpreter attempt with a `kgit remeasure` note of per-shape times on the GPU (and,
    when given, the runner's per-kernel split per shape)."""
    from kgit_harness.result import geomean

    note = {"device": GPU, "harness": "g", "timing": "events", "status": "ok", "tag": "remeasure",
            "geomean_us": geomean(list(times.values())), "times": times, "when": 100 + when,
            "versions": versions or {"torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0", "arch": "90",
                                     "python": "3.12.3"}}
    if kernels:
        note["kernels"] = kernels
    return attempt(sha, experiment, when, notes=[note])


def test_task_text_on_the_cpu_lists_the_gpu_benchmark_shapes_too():
    from kgit import problems as problem_mod
    from kgit.scientist import prompts

    task = problem_mod.load_task(problem_mod.shipped()["fp8_blockscale_gemm"])
    text = prompts.task_text(task, on_gpu=False)
    assert "Benchmark shapes (the CPU set" in text and "Benchmark shapes on a GPU" in text
    gpu = text.split("Benchmark shapes on a GPU")[1]
    assert len(task.benchmarks) == 18 and all(problem_mod.shape_key(s) in gpu for s in task.benchmarks)
    assert "Benchmark shapes on a GPU" not in prompts.task_text(task, on_gpu=True)


def test_the_environment_names_the_software_of_the_device_whose_timings_rank():
    from types import SimpleNamespace

    from kgit.scientist import context

    config = SimpleNamespace(evaluator=SimpleNamespace(backend="local"), targets=None, require_targets=False,
                             targets_gpu_shapes=False)
    cpu_host = SimpleNamespace(ids=[], vendor=None)
    attempts = [remeasured("a", 0, 1, {"m=1": 400.0})]
    env = context.environment(config, attempts, host=cpu_host)
    text = env.text()
    assert "device: cpu" in text and env.ranked_on == GPU
    assert "- software here: " in text and "triton" in text.split("- software here: ")[1].split("\n")[0]
    ranking = next(line for line in text.splitlines() if line.startswith("- ranking timings"))
    assert GPU in ranking and "triton 3.6.0" in ranking and "torch 2.11.0+cu130" in ranking and "cuda 13.0" in ranking
    assert "python" not in ranking
    # The run's own attempts get no timing from that GPU until a remeasure there, and the text says so.
    arrive = next(line for line in text.splitlines() if line.startswith("- when timings arrive"))
    assert "correctness only" in arrive and f"no {GPU} timing until someone runs `kgit remeasure`" in arrive
    elsewhere = context.Environment("AMD Instinct MI300X", True, "events", ranked_on=GPU)
    assert f"timed on AMD Instinct MI300X, which does not rank, and get no {GPU} timing" in elsewhere.text()
    # No GPU timings: one software line, as before.
    alone = context.environment(config, [attempt("a", 0, 1)], host=cpu_host).text()
    assert "ranking timings" not in alone and "- software: " in alone


def test_the_designer_sees_the_bases_per_shape_times_on_the_ranking_gpu_slowest_first():
    from kgit.scientist import design
    from kgit.scientist.view import ArchiveView

    baseline = remeasured("a", 0, 1, {"m=1024,n=512": 200.0, "m=6144,n=4608": 5000.0, "m=6144,n=512": 600.0})
    base = remeasured("b", 1, 2, {"m=1024,n=512": 100.0, "m=6144,n=4608": 1000.0, "m=6144,n=512": 300.0})
    text = design.base_times(ArchiveView([baseline, base]), base.sha)
    lines = text.splitlines()
    assert GPU in lines[0] and "slowest first" in lines[0]
    assert lines[1] == "- m=6144,n=4608: 1000.0 us (baseline 5000.0 us, 5.00x)"
    assert lines[2].startswith("- m=6144,n=512: 300.0 us") and lines[3].startswith("- m=1024,n=512: 100.0 us")
    cut = design.base_times(ArchiveView([baseline, base]), base.sha, limit=1)
    assert cut.splitlines()[-2] == "- ... and 2 faster shapes"
    # A measurement without a per-kernel split says so, rather than leaving the model to guess.
    assert cut.splitlines()[-1].startswith("No per-kernel split was kept") and "kgit remeasure bbbbbbbbbb" in cut
    assert "not been timed" in design.base_times(ArchiveView([baseline, base, attempt("c", 2, 3)]), "c" * 40)
    assert "No GPU timings" in design.base_times(ArchiveView([attempt("c", 2, 3)]), "c" * 40)


def test_an_untimed_base_shows_its_nearest_timed_ancestors_table():
    """Round 3: within a round the base was never timed, and the designer lost the cost model."""
    from kgit.scientist import design
    from kgit.scientist.view import ArchiveView

    baseline = remeasured("a", 0, 1, {"m=1024,n=512": 200.0, "m=6144,n=4608": 5000.0})
    timed = remeasured("b", 10, 2, {"m=1024,n=512": 100.0, "m=6144,n=4608": 933.0})
    middle, base = attempt("c", 19, 3, base="b"), attempt("d", 22, 4, base="c")
    text = design.base_times(ArchiveView([baseline, timed, middle, base]), base.sha)
    lines = text.splitlines()
    assert lines[0].startswith(f"The base has not been timed on {GPU} yet") and "10.1 (bbbbbbbbbb), 2 base steps" in lines[0]
    assert lines[2] == "- m=6144,n=4608: 933.0 us (baseline 5000.0 us, 5.36x)"
    # No timed ancestor at all: said so, as before.
    alone = design.base_times(ArchiveView([baseline, attempt("e", 3, 5, base="f")]), "e" * 40)
    assert alone == f"The base has not been timed on {GPU} yet (the ranking device)."


def test_the_designer_sees_where_each_shapes_gpu_time_went_kernel_by_kernel():
    from kgit.scientist import design
    from kgit.scientist.view import ArchiveView

    split = {"m=6144,n=4608": [["_gemm", 1, 479.6], ["aten copy (elementwise)", 2, 440.0],
                               ["aten fill (elementwise)", 1, 9.0], ["memset", 2, 4.0]]}
    baseline = remeasured("a", 0, 1, {"m=1024,n=512": 200.0, "m=6144,n=4608": 5000.0})
    base = remeasured("b", 1, 2, {"m=1024,n=512": 100.0, "m=6144,n=4608": 933.0}, kernels=split)
    lines = design.base_times(ArchiveView([baseline, base]), base.sha).splitlines()
    assert "torch.profiler" in lines[1] and "candidate" in lines[1]
    assert lines[2] == ("- m=6144,n=4608: 933.0 us = _gemm 479.6 us + aten copy (elementwise) x2 440.0 us "
                        "+ aten fill (elementwise) 9.0 us + other 4.0 us (baseline 5000.0 us, 5.36x)")
    assert lines[3] == "- m=1024,n=512: 100.0 us (baseline 200.0 us, 2.00x)"  # no split kept for this shape
    # Without a split (an older note), the table is as before, with no explanation line.
    plain = design.base_times(ArchiveView([baseline, remeasured("b", 1, 2, {"m=6144,n=4608": 933.0})]), base.sha)
    assert "torch.profiler" not in plain and " = " not in plain


def test_the_designer_sees_each_shapes_rate_against_the_devices_peaks():
    from kgit import problems as problem_mod
    from kgit.scientist import design
    from kgit.scientist.view import ArchiveView

    task = problem_mod.load_task(problem_mod.shipped()["fp8_blockscale_gemm"])
    big, small = "m=6144,n=4608,k=7168", "m=1024,n=7168,k=256"
    base = remeasured("b", 1, 2, {big: 933.0, small: 15.2})
    lines = design.base_times(ArchiveView([base]), base.sha, task=task).splitlines()
    assert "In brackets" in lines[1] and "1979 TFLOP/s" in lines[1] and "4.8 TB/s" in lines[1]
    # 2 m n k / t: 435.0 TFLOP/s, 22.0% of the H200's 1979; bytes by task.yml's formula over the same time.
    flops, nbytes = task.work({"m": 6144, "n": 4608, "k": 7168})
    assert flops == 2 * 6144 * 4608 * 7168
    assert lines[2] == (f"- {big}: 933.0 us [{flops / 933e-6 / 1e12:.1f} TFLOP/s, {100 * flops / 933e-6 / 1979e12:.1f}% "
                        f"of peak; {nbytes / 933e-6 / 1e12:.2f} TB/s, {100 * nbytes / 933e-6 / 4.8e12:.1f}% of peak]")
    assert "435.0 TFLOP/s, 22.0% of peak" in lines[2]
    assert lines[3].startswith(f"- {small}: 15.2 us [") and "% of peak" in lines[3]
    # An unknown device: rates, no fractions; no task: no brackets at all.
    other = attempt("c", 2, 3, notes=[{"device": "Some GPU", "harness": "g", "timing": "events", "status": "ok",
                                        "geomean_us": 100.0, "times": {big: 100.0}, "when": 200}])
    text = design.base_times(ArchiveView([other]), other.sha, task=task)
    assert "no peaks are known" in text and "TFLOP/s; " in text and "% of peak" not in text.splitlines()[-1]
    assert "[" not in design.base_times(ArchiveView([base]), base.sha)


def test_the_build_target_policy_follows_the_config_and_says_which_launches_were_compiled():
    from kgit import problems as problem_mod
    from kgit.archive import buildfacts
    from kgit.config import Config
    from kgit.scientist import context

    task = problem_mod.load_task(problem_mod.shipped()["fp8_blockscale_gemm"])
    assert task.targets
    config = Config(targets_gpu_shapes=True)
    text = context.environment(config, [attempt("a", 0, 1)], host=_cpu(), task=task).text()
    line = next(item for item in text.splitlines() if item.startswith("- build targets: "))
    assert "gfx942 (MI300X)" in line and "require_targets: false" in line and "not a failing status" in line
    assert "correctness checks (the CPU test shapes above" in line
    assert "dry run of the GPU benchmark and test shapes" in line and "not run" in line and "512 MiB" in line
    plain = context.environment(Config(), [attempt("a", 0, 1)], host=_cpu(), task=task).text()
    assert "dry run" not in plain and "(the GPU benchmark set) is not compiled" in plain  # the default
    on_gpu = context.targets_text(["sm_90a"], False, on_gpu=True)
    assert "the GPU test shapes" in on_gpu and "(the GPU benchmark set) is not compiled" in on_gpu
    strict = Config(require_targets=True, targets=["sm_90a"])
    line = next(item for item in context.environment(strict, [attempt("a", 0, 1)], host=_cpu(), task=task)
                .text().splitlines() if item.startswith("- build targets: "))
    assert line.startswith("- build targets: sm_90a (H100/H200).") and "fails (require_targets: true)" in line
    # The base's facts no longer state a rule of their own that the config may contradict.
    facts = buildfacts.prompt_lines({"gfx942": f"fails: {LDS}"})
    assert "must build" not in facts and '"build targets" in the evaluation environment' in facts


def _cpu():
    from types import SimpleNamespace

    return SimpleNamespace(ids=[], vendor=None)


def test_the_task_text_names_the_harness_static_policy():
    # Round 5 of the fp8 campaign lost an attempt to `torch.cuda.synchronize`, a rule no
    # request had named; the text comes from the policy's own tables.
    from kgit.scientist.prompts import task_text
    from kgit_harness import policy, problem

    text = task_text(problem.load_task(problem.shipped()["fp8_blockscale_gemm"]), on_gpu=True)
    assert "torch.cuda.synchronize()" in text
    for name in list(policy.FORBIDDEN_MODULES) + list(policy.FORBIDDEN_CALLS) + list(policy.FORBIDDEN_NAMES):
        assert name in text, name
    source = "import torch\n\ndef custom_kernel(data):\n    torch.cuda.synchronize()\n    return data\n"
    assert policy.check({"kernel.py": source}, [])[0].startswith("forbidden attribute: synchronize")


def test_a_reference_close_to_the_base_is_shown_as_a_diff_that_rebuilds_it(tmp_path):
    # Round 6's design requests carried two nearly identical 600-line sources.
    import subprocess

    from kgit.scientist import prompts

    base = "".join(f"line {i} = compute({i})\n" for i in range(300))
    reference = base.replace("line 10 = compute(10)\n", "line 10 = compute_faster(10)\n").replace(
        "line 200 = compute(200)\n", "line 200 = compute(200)\nextra = 1\n")
    shown = prompts.reference_block({"kernel.py": base}, {"kernel.py": reference})
    assert shown.startswith("kernel.py, as a unified diff from the base's kernel.py above")
    assert len(shown) < len(reference) / 5
    diff = shown.split("```diff\n", 1)[1].rsplit("\n```", 1)[0] + "\n"
    (tmp_path / "kernel.py").write_text(base)
    (tmp_path / "change.diff").write_text(diff.replace("base/", "a/").replace("reference/", "b/"))
    subprocess.run(["git", "apply", "change.diff"], cwd=tmp_path, check=True)
    assert (tmp_path / "kernel.py").read_text() == reference  # nothing of the reference is lost
    # Mostly different, or a file the base lacks: whole; identical: said so.
    other = "".join(f"other {i}\n" for i in range(300))
    assert prompts.reference_block({"kernel.py": base}, {"kernel.py": other}) == prompts.code_block({"kernel.py": other})
    assert prompts.reference_block({}, {"helper.py": "x = 1\n"}) == prompts.code_block({"helper.py": "x = 1\n"})
    assert prompts.reference_block({"kernel.py": base}, {"kernel.py": base}) == "kernel.py: the same as the base's"
    assert prompts.reference_block({"kernel.py": base}, {}) == "(none chosen)"
