"""Build facts for the target GPUs: capture of real launches, cross-compiles, trailers, policy."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

from kgit import config as config_mod
from kgit.archive import buildfacts
from kgit.archive.repo import Repo
from kgit.evaluation import targets_policy
from kgit_harness import problem, targets
from kgit_harness.result import Result

DATA = Path(__file__).parent / "data" / "targets"
BOTH = ["gfx942", "sm_90a"]


def _load(path: Path, monkeypatch, interpret: bool = True):
    """Import a kernel file with @triton.jit made in interpreter (or compiled) mode."""
    monkeypatch.setenv("TRITON_INTERPRET", "1" if interpret else "0")
    name = f"_kgit_test_{path.stem}_{interpret}_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # inspect.getsource needs to find it
    spec.loader.exec_module(module)
    return module


def _probe(kernel: Path, data: str, **kwargs) -> dict:
    """Capture and build facts in a fresh interpreter process (tests/targets_probe.py)."""
    import subprocess

    done = subprocess.run([sys.executable, str(Path(__file__).parent / "targets_probe.py"), str(kernel), data,
                           json.dumps(kwargs)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fp8_facts():
    folder = problem.shipped()["fp8_blockscale_gemm"]
    probe = _probe(folder / "kernel.py", "reference.generate_input(m=64, n=576, k=256, seed=1)")
    assert probe["host_error"] is None
    return probe["targets"]


def test_fp8_baseline_builds_for_mi300_and_hopper_with_the_targets_own_fp8(fp8_facts):
    assert fp8_facts["reported_by"] == "candidate"
    assert fp8_facts["triton"] and fp8_facts["variants"] == 1
    amd, nv = fp8_facts["results"]["gfx942"], fp8_facts["results"]["sm_90a"]
    assert amd["builds"] is True and nv["builds"] is True, (amd["error"], nv["error"])
    (k_amd,), (k_nv,) = amd["kernels"], nv["kernels"]
    # MI300 runs the FNUZ fp8 the problem gives it there; Hopper the OCP one.
    assert k_amd["signature"]["a_ptr"] == "*fp8e4b8" and k_nv["signature"]["a_ptr"] == "*fp8e4nv"
    assert 0 < k_amd["vgpr"] <= 512 and k_amd["sgpr"] > 0 and 1 <= k_amd["occupancy"] <= 8
    assert k_amd["lds_bytes"] > 0 and k_amd["occupancy_unit"] == "waves/SIMD"
    assert 0 < k_nv["registers"] <= 255 and k_nv["shared_bytes"] > 0 and 1 <= k_nv["occupancy"] <= 32
    assert k_nv["occupancy_unit"] == "blocks/SM"
    # The launch's real specialization went in: strides equal to 1 are constants.
    assert "stride_am" not in k_nv["signature"] and "stride_ak" in k_nv["signature"]
    assert targets.trailer_value(amd).startswith(f"builds; vgpr {k_amd['vgpr']}, lds ")


@pytest.mark.slow
def test_softmax_baseline_builds_for_both_targets():
    probe = _probe(problem.shipped()["softmax"] / "kernel.py", "reference.generate_input(rows=8, cols=1000, seed=3)")
    assert probe["host_error"] is None
    doc = probe["targets"]
    for name in BOTH:
        result = doc["results"][name]
        assert result["builds"] is True, result["error"]
        summary = targets.summary(result)
        assert summary["regs"] > 0 and summary["occupancy"] >= 1 and summary["spill_bytes"] == 0
        # BLOCK is next_power_of_2(cols): the constexpr of this launch.
        assert result["kernels"][0]["options"] == {"num_warps": 4, "num_stages": 1}


@pytest.mark.slow
def test_two_kernels_that_name_each_other_build_for_both_targets():
    """A split reduction in two launches (each kernel a global of the other's module).

    The campaign on fp8 found every two-launch kernel failing both targets with
    "RecursionError": the compile copy of one kernel chased the other's globals and back.
    """
    probe = _probe(DATA / "two_kernels.py", "(torch.randn(4, 300),)")
    assert probe["host_error"] is None
    for name in BOTH:
        result = probe["targets"]["results"][name]
        assert result["builds"] is True, result["error"]
        assert sorted(k["kernel"] for k in result["kernels"]) == ["add_parts", "partial_sums"]


@pytest.mark.slow
def test_inline_ptx_builds_for_hopper_only_and_says_why():
    probe = _probe(DATA / "ptx_only.py", "torch.randn(300)")
    assert "inline_asm" in probe["host_error"]  # the interpreter cannot run asm
    doc = probe["targets"]
    amd, nv = doc["results"]["gfx942"], doc["results"]["sm_90a"]
    assert nv["builds"] is True
    assert amd["builds"] is False and "invalid instruction" in amd["error"]
    assert targets.trailer_value(amd) == f"fails: {amd['error']}"
    assert targets.failing(doc, BOTH) == ["gfx942"]


@pytest.mark.slow
def test_absurd_tile_reports_lds_and_shared_memory_overflow():
    probe = _probe(DATA / "huge_tile.py", "(torch.randn(16, 16).half(), torch.randn(16, 16).half())")
    assert probe["host_error"] is None
    doc = probe["targets"]
    amd, nv = doc["results"]["gfx942"], doc["results"]["sm_90a"]
    assert amd["builds"] is False and "of LDS per workgroup; gfx942 has 64 KiB" in amd["error"]
    assert amd["kernels"][0]["lds_bytes"] > 65536 and amd["kernels"][0]["occupancy"] == 0
    assert targets.trailer_value(amd).startswith("fails: does not fit: needs ")
    # Hopper has room for it (227 KiB a block), at one or two blocks per SM.
    (k_nv,) = nv["kernels"]
    assert nv["builds"] is True and k_nv["shared_bytes"] > 65536 and 1 <= k_nv["occupancy"] <= 2
    assert k_nv["spill_bytes"] == k_nv["spill_stores"] + k_nv["spill_loads"] >= 0


def test_capture_of_compiled_jit_functions_reads_the_real_specialization(monkeypatch):
    kernel = _load(DATA / "ptx_only.py", monkeypatch, interpret=False)
    from triton.runtime.jit import JITFunction

    assert isinstance(kernel._copy_bits, JITFunction)
    x = torch.randn(256)
    y = torch.empty(256, dtype=torch.int32)
    with targets.capture() as launches:
        for n in (256, 1):  # no GPU: each launch fails after the capture saw it
            with pytest.raises(Exception):  # noqa: B017 - whichever error the launcher raises without a GPU
                kernel._copy_bits[(2,)](x, y, n, BLOCK=128, num_warps=2)
    assert launches.total == 2 and len(launches.variants) == 2
    first, second = launches.variants
    assert first.options == {"num_warps": 2}
    # n=256 is divisible by 16; n=1 becomes a constant, as Triton specializes it.
    assert first.specialization["cuda"][2] == ("i32", "D") and second.specialization["cuda"][2][0] == "constexpr"
    assert first.specialization["hip"][0][0] == "*fp32" and first.specialization["hip"][1][0] == "*i32"
    # Outside the block nothing is recorded any more, and run is Triton's own again.
    assert not getattr(JITFunction.run, "_kgit_capture", False)


@pytest.mark.gpu
def test_an_autotuner_counts_only_the_configuration_it_runs(monkeypatch):
    # The autotuner needs a GPU to time its configurations (the interpreter has no benchmarker).
    kernel = _load(DATA / "autotuned.py", monkeypatch, interpret=False)
    with targets.capture() as launches:
        kernel.custom_kernel(torch.randn(1000, device="cuda"))
    tuner = kernel._copy
    assert len(tuner.configs) == 2 and launches.total == 1
    (variant,) = launches.variants
    chosen = tuner.best_config
    assert variant.options["num_warps"] == chosen.num_warps
    assert variant.specialization["cuda"][-1] == ("constexpr", chosen.kwargs["BLOCK"])
    # The chosen configuration, captured on the GPU, cross-compiles for both targets from
    # forked children of a process that holds a CUDA context (as the runner does).
    facts = targets.build_facts(launches, BOTH)
    for name in BOTH:
        result = facts["results"][name]
        assert result["builds"] is True, (name, result["error"])
        (compiled,) = result["kernels"]
        assert compiled["num_warps"] == chosen.num_warps and compiled["occupancy"] >= 1


def test_no_launch_gives_unknown_not_a_failure():
    with targets.capture() as launches:
        pass
    doc = targets.build_facts(launches, BOTH)
    assert doc["variants"] == 0
    for name in BOTH:
        assert doc["results"][name]["builds"] is None
        assert targets.trailer_value(doc["results"][name]) == "unknown: no Triton kernel was launched"
    assert targets.failing(doc, BOTH) == []


def test_a_compiler_that_dies_costs_its_target_only():
    children = {"dies": targets._fork(lambda: os.kill(os.getpid(), signal.SIGKILL)),
                "answers": targets._fork(lambda: {"builds": True})}
    answers = targets._collect(children, timeout_s=60)
    assert answers["dies"] == {"crash": "the compiler died (signal 9)"}
    assert answers["answers"] == {"builds": True}


def test_a_refused_fork_costs_the_facts_not_the_evaluation(monkeypatch):
    kernel = _load(DATA / "ptx_only.py", monkeypatch, interpret=False)
    with targets.capture() as launches:
        with pytest.raises(Exception):  # noqa: B017 - no GPU: the launch fails after the capture saw it
            kernel.custom_kernel(torch.randn(8))

    def refuse(work):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(targets, "_fork", refuse)
    doc = targets.build_facts(launches, BOTH)
    for name in BOTH:
        assert doc["results"][name]["builds"] is None
        assert "no compile process could be started" in doc["results"][name]["error"]


def test_a_compile_that_overruns_is_killed():
    import time

    answers = targets._collect({"slow": targets._fork(lambda: time.sleep(60))}, timeout_s=0.5)
    assert answers["slow"] == {"crash": "the compile did not finish within 0 s"}


def test_facts_collected_without_waiting_keep_the_compiles_done_and_label_the_others():
    """A stopped attempt's judge does not wait for its cross-compiles (judge._targets_finish)."""
    import time

    done = {"kernels": [{"kernel": "_k"}], "failures": []}
    build = targets.Build(targets.Launches(variants=[object()], total=1), ["gfx942", "sm_90a"], 120.0,
                          time.perf_counter(), children={"gfx942 0": targets._fork(lambda: done),
                                                         "sm_90a 0": targets._fork(lambda: time.sleep(60))})
    time.sleep(1.0)  # the first child's answer is in its pipe
    doc = build.finish(wait=False)
    assert doc["results"]["gfx942"] == {"builds": True, "error": None, "kernels": [{"kernel": "_k"}], "failures": [],
                                        "not_compiled": 0}
    assert doc["results"]["sm_90a"]["builds"] is None
    assert doc["results"]["sm_90a"]["error"] == "not built: " + targets.CUT_SHORT


def test_a_targets_variants_compile_in_parts_side_by_side_and_come_back_in_launch_order(monkeypatch):
    """Each target's variants (at most MAX_VARIANTS a kernel) are split over BUILD_PARTS children
    at the lowest priority; the entry joins their facts in launch order, and a part that did not
    answer leaves the target unknown, keeping what the others built."""
    forked = []
    monkeypatch.setattr(targets, "_fork", lambda work, beside_timing=True: forked.append(beside_timing) or (0, 0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    fn, other = object(), object()
    variants = [targets.Variant(kernel="_k", fn=fn, options={}, bound={}, specialization={})
                for _ in range(targets.MAX_VARIANTS + 2)]
    variants.append(targets.Variant(kernel="_j", fn=other, options={}, bound={}, specialization={}))
    build = targets.start_build(targets.Launches(variants=variants, total=len(variants)), ["gfx942", "sm_90a"])
    assert build.parts == targets.BUILD_PARTS and build.not_compiled == 2
    assert sorted(build.children) == sorted(f"{n} {i}" for n in ("gfx942", "sm_90a") for i in range(targets.BUILD_PARTS))
    assert forked == [True] * 2 * targets.BUILD_PARTS

    part = lambda *names: {"kernels": [{"kernel": n} for n in names], "failures": []}  # noqa: E731
    joined = targets._target_result([part("a", "b"), part("c"), {"crash": "overran"}, part("d")], 2)
    assert joined["builds"] is None and joined["error"] == "not built: overran" and joined["not_compiled"] == 2
    assert [k["kernel"] for k in joined["kernels"]] == ["a", "b", "c", "d"]
    failing = {"kernels": [], "failures": [{"kernel": "e", "error": "boom"}]}
    joined = targets._target_result([part("a"), failing], 0)
    assert joined["builds"] is False and joined["error"] == "boom" and [k["kernel"] for k in joined["kernels"]] == ["a"]


def test_the_builds_beside_the_timing_take_at_most_a_quarter_of_the_cores():
    assert [targets.build_parts(2, cores) for cores in (1, 2, 8, 16, 24, 32, 128)] == [1, 1, 1, 2, 3, 4, 4]
    assert targets.build_parts(1, 16) == 4 and targets.build_parts(3, 16) == 1


def test_target_names_are_checked_in_task_and_config(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "task.yml").write_text("name: x\ntests: [{n: 1}]\nbenchmarks: [{n: 1}]\ntargets: [gfx942, sm_100]\n")
    with pytest.raises(problem.TaskError, match="unknown build target 'sm_100'"):
        problem.load_task(folder)
    (folder / "task.yml").write_text("name: x\ntests: [{n: 1}]\nbenchmarks: [{n: 1}]\n")
    assert problem.load_task(folder).targets == ["gfx942", "sm_90a"]  # imported problems get the default
    for name, path in problem.shipped().items():
        assert problem.load_task(path).targets == ["gfx942", "sm_90a"], name
    with pytest.raises(Exception, match="targets: unknown build target 'mi300'"):
        config_mod.parse("targets: [mi300]\n")
    assert config_mod.parse("targets: []\nrequire_targets: true\n").require_targets is True


def _doc(status="ok", amd_builds=True):
    amd = ({"builds": True, "error": None, "kernels": [{"kernel": "_k", "vgpr": 128, "agpr": 0, "lds_bytes": 65536,
                                                       "scratch_bytes": 0, "vgpr_spill": 0, "occupancy": 2}]}
           if amd_builds else {"builds": False, "error": "RuntimeError: boom", "kernels": []})
    nv = {"builds": True, "error": None, "kernels": [{"kernel": "_k", "registers": 96, "shared_bytes": 1536,
                                                      "spill_bytes": 8, "occupancy": 4}]}
    return Result(status=status, error=None, reason=None, geomean_us=1.0,
                  targets={"triton": "3.9.0", "results": {"gfx942": amd, "sm_90a": nv}})


def test_trailers_one_per_target_and_their_round_trip():
    lines = buildfacts.trailers(_doc())
    assert lines == [("Kgit-Target-gfx942", "builds; vgpr 128, lds 64 KiB, spill 0, occupancy 2"),
                     ("Kgit-Target-sm-90a", "builds; regs 96, smem 1.5 KiB, spill 8 B, occupancy 4"),
                     ("Kgit-Targets-Compiler", "triton 3.9.0, candidate-reported")]
    assert buildfacts.trailers(_doc(amd_builds=False))[0] == ("Kgit-Target-gfx942", "fails: RuntimeError: boom")
    assert buildfacts.trailers(Result(status="ok", geomean_us=1.0, targets=None)) == []


def test_each_kernel_variant_is_kept_beside_the_commit_when_the_trailer_sums_up_several():
    from kgit.archive import measure

    assert measure.targets_record(_doc()) is None  # one kernel a target: the trailers say it all
    doc = _doc()
    amd = doc.targets["results"]["gfx942"]
    amd["kernels"] = [{**amd["kernels"][0], "kernel": "_fwd", "num_warps": 8, "num_stages": 2},
                      {"kernel": "_reduce", "num_warps": 4, "num_stages": 1, "vgpr": 40, "lds_bytes": 0,
                       "scratch_bytes": 256, "vgpr_spill": 0, "occupancy": 8}]
    record = measure.targets_record(doc).to_note()
    assert record["kind"] == "targets" and record["compiler"] == "3.9.0"
    assert record["targets"]["gfx942"] == [
        ["_fwd", "vgpr 128, lds 64 KiB, spill 0, occupancy 2 (num_warps 8, num_stages 2)"],
        ["_reduce", "vgpr 40, lds 0 B, spill 256 B, occupancy 8 (num_warps 4, num_stages 1)"]]
    # The trailer stays the worst of them.
    assert buildfacts.trailers(doc)[0] == ("Kgit-Target-gfx942", "builds; vgpr 128, lds 64 KiB, spill 256 B, occupancy 2")


@pytest.mark.parametrize("required", [False, True])
def test_require_targets_fails_an_attempt_that_does_not_build(required):
    config = config_mod.parse(f"require_targets: {str(required).lower()}\n")
    doc = targets_policy.apply_policy(_doc(amd_builds=False), config)
    if required:
        assert doc.status == "compile-error" and doc.reason == "does not build for a declared target"
        assert "gfx942 (MI300X): RuntimeError: boom" in doc.error
    else:
        assert doc.status == "ok" and doc.error is None
    assert targets_policy.apply_policy(_doc(), config).status == "ok"


@pytest.mark.slow
def test_the_attempt_shows_its_targets_in_show_and_log(softmax_repo, run_kgit):
    repo = Repo(softmax_repo)
    (baseline,) = repo.read()
    assert set(baseline.targets) == {"gfx942", "sm_90a"}
    assert all(v.startswith("builds; ") for v in baseline.targets.values()), baseline.targets
    shown = run_kgit(softmax_repo, "show", "kgit/baseline")
    assert "target:     gfx942 builds; vgpr " in shown.output and "target:     sm_90a builds; regs " in shown.output
    # The softmax baseline compiles one variant per block size of its shapes: each is listed
    # under its target's line, from the note beside the commit.
    (kept,) = [n.to_note() for n in baseline.notes.targets]
    for variants in kept["targets"].values():
        assert len(variants) > 1 and all(f"              {k}: {facts}" in shown.output for k, facts in variants)
    logged = json.loads(run_kgit(softmax_repo, "log", "--json").output)
    assert logged[0]["targets"] == baseline.targets
    devices = run_kgit(softmax_repo, "log", "--devices").output
    assert "build targets" in devices and "gfx942 vgpr " in devices
    from kgit.review import campaign, html

    page = html.render(campaign.load(repo, None), "softmax")
    assert '<section id="targets"><h2>Build targets</h2>' in page and baseline.targets["sm_90a"] in page


@pytest.mark.slow
def test_an_attempt_that_fails_here_still_says_where_it_builds(softmax_repo, run_kgit):
    """Inline PTX cannot run in the CPU interpreter (runtime-error), and does not build for MI300."""
    assert run_kgit(softmax_repo, "try", "copy the bits through inline PTX").exit_code == 0
    (softmax_repo / "kernel.py").write_text((DATA / "ptx_only.py").read_text())
    run_kgit(softmax_repo, "record")
    attempt = next(a for a in Repo(softmax_repo).read() if not a.is_baseline)
    assert attempt.status == "runtime-error"
    assert attempt.targets["gfx942"].startswith("fails: ") and "invalid instruction" in attempt.targets["gfx942"]
    assert attempt.targets["sm_90a"].startswith("builds; regs ")
    assert "target:     gfx942 fails: " in run_kgit(softmax_repo, "show").output


def test_prompt_lines_name_the_hardware_and_the_failures():
    text = buildfacts.prompt_lines({"gfx942": "fails: x", "sm_90a": "builds; regs 96"},
                                   ["memory-bound at 78% of peak bandwidth"])
    assert "- gfx942 (MI300X): fails: x" in text and "- sm_90a (H100/H200): builds; regs 96" in text
    assert "It does not build for gfx942" in text and "- memory-bound at 78% of peak bandwidth" in text
    assert buildfacts.prompt_lines({}) == "No build facts were recorded for this kernel."


def test_prompt_lines_list_each_kernel_variant_under_its_target():
    variants = {"gfx942": [["_fwd", "vgpr 128, lds 64 KiB, spill 0, occupancy 2 (num_warps 8, num_stages 2)"],
                           ["_reduce", "vgpr 40, lds 0 B, spill 0, occupancy 8 (num_warps 4, num_stages 1)"]],
                "sm_90a": [["_fwd", "regs 96, smem 0 B, spill 0, occupancy 4 (num_warps 8, num_stages 2)"]]}
    text = buildfacts.prompt_lines({"gfx942": "builds; vgpr 128", "sm_90a": "builds; regs 96"}, variants=variants)
    lines = text.splitlines()
    at = lines.index("- gfx942 (MI300X): builds; vgpr 128")
    assert lines[at + 1:at + 3] == [f"  - {k}: {f}" for k, f in variants["gfx942"]]
    assert "  - _fwd: regs 96" not in text  # one variant: the target's line says it all


def test_prompt_lines_name_the_declared_targets_the_base_fails_or_lacks():
    text = buildfacts.prompt_lines({"gfx942": "fails: error: invalid instruction", "sm_90a": "builds; regs 96"},
                                   declared=["gfx942", "sm_90a", "gfx950"])
    assert "It does not build for gfx942 (MI300X)" in text
    assert "No build facts for the declared target(s) gfx950." in text
    whole = buildfacts.prompt_lines({"gfx942": "builds; vgpr 22", "sm_90a": "builds; regs 26"},
                                    declared=["gfx942", "sm_90a"])
    assert "It builds for every declared target (gfx942, sm_90a)." in whole and "does not build" not in whole
    assert "declared targets: gfx942" in buildfacts.prompt_lines({}, declared=["gfx942"])


class _Client:
    def model(self, stage):
        return "scripted"


def test_the_writer_and_the_fixer_see_the_base_build_facts(softmax_repo):
    """The write and fix requests carry the figures of the base's Kgit-Target-* trailers."""
    from kgit.archive import trees
    from kgit.evaluation import gpus
    from kgit.scientist import protocol
    from kgit.scientist.answers import Plan, Selection

    repo = Repo(softmax_repo)
    config = config_mod.load(softmax_repo)
    task = problem.load_task(softmax_repo / config.problem)
    attempts = repo.read()
    (baseline,) = attempts
    ctx = protocol.build(repo, config, task, softmax_repo / config.problem, attempts, gpus.discover())
    assert ctx.targets == ["gfx942", "sm_90a"]
    plan = Plan("wider rows", "one program per two rows", "change the grid")
    files = trees.commit_files(repo, baseline.sha, ctx.editable)
    iteration = protocol.make_iteration(ctx, attempts, Selection(baseline.sha, None, "the baseline"), [plan], files, {})
    scientist = protocol.LLMScientist(_Client())
    for attempt, error in ((1, ""), (2, "incorrect: m=4,n=8: max abs error 3.0")):
        messages = scientist.write_messages(ctx, iteration, plan, files, error, attempt)
        text = "\n".join(part["text"] for m in messages for part in m["content"])
        assert "# The base on the target GPUs" in text
        for name, value in baseline.targets.items():
            # e.g. "- gfx942 (MI300X): builds; vgpr 22, lds 0 KiB, spill 0, occupancy 8"
            assert f"- {name} ({buildfacts.HARDWARE[name]}): {value}" in text
            assert value.startswith("builds; ") and "occupancy " in value and "spill " in value
        assert "It builds for every declared target (gfx942, sm_90a)." in text
        assert ("Fix it." in text) == (attempt == 2)


WIDE_FOR_GPU_SHAPES = '''
import triton
import triton.language as tl


@triton.jit
def _add(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(a_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask), mask=mask)


def custom_kernel(data):
    a, b, out = data
    n = a.numel()
    # A configuration only the GPU shapes reach: no CPU test shape is this large.
    block, warps = (2048, 8) if n > 100_000 else (256, 4)
    _add[(triton.cdiv(n, block),)](a, b, out, n, BLOCK=block, num_warps=warps)
    return out
'''


@pytest.mark.slow
def test_the_gpu_shapes_configurations_are_captured_without_running_and_compiled(tmp_path):
    """In the interpreter the checks launch only the CPU shapes' configuration; after timing the
    judge lays out each GPU shape's inputs (no values), the runner calls the candidate with every
    launch skipped, and the configuration only those shapes choose is compiled too."""
    import yaml
    from conftest import FAST_TIMING

    from kgit.evaluation import child

    source = tmp_path / "source"
    source.mkdir()
    (source / "kernel.py").write_text(WIDE_FOR_GPU_SHAPES)
    import shutil

    shutil.copytree(problem.shipped()["vector_add"], source / "problem")
    data = yaml.safe_load(config_mod.default_text())
    data["timing"] = dict(FAST_TIMING)
    data["targets_gpu_shapes"] = True  # off by default: seconds a CPU evaluation
    config = config_mod.parse(yaml.safe_dump(data), "test config")
    (tmp_path / "stage").mkdir()
    problem_dir, candidate_dir = child.stage_candidate(source, "problem", ["kernel.py"], tmp_path / "stage")
    doc = child.run_child(problem_dir, candidate_dir, config, tmp_path / "stage")
    assert doc["status"] == "ok", doc.get("error") or doc.get("stderr")
    facts = doc["targets"]
    dry = facts["dry"]
    # The GPU shapes the CPU checks did not run: benchmarks, and the GPU test set.
    assert set(dry["captured"]) == {"size=1048576", "size=16777216", "size=4096", "size=98432", "size=1048577"}
    assert not dry["failed"], dry
    assert "size=67108864" in dry["skipped"] and "MiB" in dry["skipped"]["size=67108864"]  # 768 MiB of inputs
    for name in BOTH:
        result = facts["results"][name]
        assert result["builds"] is True, result["error"]
        assert {k["num_warps"] for k in result["kernels"]} == {4, 8}, result["kernels"]
    Result.from_dict(doc)


def test_a_dry_launch_is_recorded_and_not_run(monkeypatch, tmp_path):
    (tmp_path / "wide.py").write_text(WIDE_FOR_GPU_SHAPES)
    kernel = _load(tmp_path / "wide.py", monkeypatch)
    a, b = torch.ones(200_000), torch.ones(200_000)
    out = torch.full((200_000,), float("nan"))
    with targets.capture() as launches, targets.dry():
        kernel.custom_kernel((a, b, out))
    assert torch.isnan(out).all()  # nothing ran
    (variant,) = launches.variants
    assert variant.options["num_warps"] == 8 and variant.bound["BLOCK"] == 2048
    # A capture that knows the checks' variants counts a repeat there instead of recording it.
    with targets.capture(known=launches) as again, targets.dry():
        kernel.custom_kernel((a, b, out))
    assert again.variants == [] and again.total == 1 and variant.launches == 2
    with targets.capture() as normal:
        kernel.custom_kernel((a, b, out))
    assert (out == 2).all() and len(normal.variants) == 1  # outside dry() launches run again


def test_merged_facts_keep_the_checks_kernels_and_fail_on_a_dry_variants_failure():
    def result(builds, kernels, failures=()):
        return {"builds": builds, "error": failures[0]["error"] if failures else None, "kernels": kernels,
                "failures": list(failures), "not_compiled": 0}

    checked = {"reported_by": "candidate", "launches": 3, "variants": 1, "unreadable": [], "compile_s": 2.0,
               "results": {"gfx942": result(True, [{"vgpr": 100}]), "sm_90a": result(True, [{"registers": 90}])}}
    lds = {"kernel": "_k", "error": f"does not fit: {LDS_TEXT}", "options": {}}
    extra = {"launches": 18, "variants": 1, "unreadable": [], "compile_s": 3.0,
             "results": {"gfx942": result(False, [{"vgpr": 256}], [lds]), "sm_90a": result(True, [{"registers": 168}])}}
    report = {"captured": ["m=6144"], "failed": {}, "skipped": {}}
    merged = targets.merge(checked, extra, report)
    assert merged["launches"] == 21 and merged["variants"] == 2 and merged["compile_s"] == 5.0
    assert merged["dry"] == report and merged["reported_by"] == "candidate"
    amd, nv = merged["results"]["gfx942"], merged["results"]["sm_90a"]
    assert amd["builds"] is False and amd["error"] == lds["error"] and len(amd["kernels"]) == 2
    assert nv["builds"] is True and targets.summary(nv)["regs"] == 168  # the worst over both
    # A dry run that compiled nothing leaves the checks' results as they were.
    assert targets.merge(checked, {}, report)["results"] == checked["results"]


LDS_TEXT = "needs 96 KiB of LDS per workgroup; gfx942 has 64 KiB"


def test_the_dry_runs_budget_stops_slow_host_code_and_reports_it(monkeypatch):
    import time

    from kgit_harness import runner, shared
    from kgit_harness.guards import Guards
    from kgit_harness.timing import Clock

    monkeypatch.setattr(runner, "DRY_BUDGET_S", 0.5)

    def slow(data):
        time.sleep(30)

    session = runner.Session.__new__(runner.Session)
    session.torch, session.on_gpu, session.launches = torch, False, None
    session.candidate = runner.Candidate(slow, Guards(torch, [], None), Clock(torch, False))
    session.candidate.guards.snapshot_threads()
    session.facts = {"results": {}, "launches": 0, "variants": 0}
    planner = shared.Planner()
    layout = planner.tree((torch.empty(4), torch.empty(4)))
    shape = {"key": "size=4", "layout": layout, "size": planner.size}
    started = time.monotonic()
    reply = session.op_targets_dry({"shapes": [shape, dict(shape, key="size=8")], "skipped": {"size=9": "big"}}, [])
    assert time.monotonic() - started < 10
    dry = reply["targets"]["dry"]
    assert dry["captured"] == [] and dry["skipped"] == {"size=9": "big"}
    assert dry["failed"]["size=4"] == "ran past the dry run's 0.5 s"
    assert dry["failed"]["size=8"] == "not run: the dry run's 0.5 s were spent"
