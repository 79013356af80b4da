"""`kgit profile`: Nsight Compute and rocprofv3 output parsed into per-shape figures, kept in notes."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from kgit import config as config_mod
from kgit.archive import buildfacts
from kgit.archive.repo import Repo
from kgit.evaluation import profile
from kgit_harness import problem

NCU_RAW = Path(__file__).parent / "data" / "ncu" / "fp8_baseline_h200_raw.csv"
ROCPROF = Path(__file__).parent / "data" / "rocprof" / "fp8_like_counter_collection.csv"


def _fp8_plan() -> dict:
    task = problem.load_task(problem.shipped()["fp8_blockscale_gemm"])
    return {"device": "NVIDIA H200", "shapes": [{"key": problem.shape_key(s), "launches": 1,
                                                  "kernels": ["_blockscale_gemm"]} for s in task.benchmarks]}


def test_the_recorded_h200_profile_of_the_fp8_baseline_parses_per_shape():
    rows = profile.parse_ncu(NCU_RAW.read_text())
    assert len(rows) == 18 and {r["kernel"] for r in rows} == {"_blockscale_gemm"}
    first = rows[0]
    assert first["device"] == "NVIDIA H200" and first["duration_ns"] == 388928.0
    assert first["dram_pct"] == 1.0 and first["dram_bytes_per_s"] == pytest.approx(47.903e9, rel=1e-4)
    assert first["sm_pct"] == 10.61 and first["tensor_pct"] == 4.04 and first["memory_pct"] == 69.82
    assert first["registers"] == 213 and first["grid"] == 192 and first["block"] == 128
    shapes = profile.per_shape(rows, _fp8_plan())
    assert [s["key"] for s in shapes][:2] == ["m=1024,n=1536,k=7168", "m=1024,n=3072,k=1536"]
    big = next(s for s in shapes if s["key"] == "m=6144,n=4608,k=7168")
    assert big["duration_us"] == 5121.76 and big["dram_pct"] == 1.91 and big["sm_pct"] == 14.34
    # DRAM at 1-5% while the memory pipes run at 40-97%: the baseline is bound on chip, not by HBM.
    assert shapes[0]["bound"].startswith("memory-bound at 70% of peak in the on-chip memory pipes")
    assert big["bound"].startswith("memory-bound at 94% of peak in the on-chip memory pipes (L1/shared/L2; DRAM 1.9%")
    small_grid = next(s for s in shapes if s["key"] == "m=1024,n=512,k=7168")
    assert small_grid["bound"].startswith("latency-bound: no unit is near its peak (memory 39%")


def test_the_rocprofv3_sample_keeps_the_profiled_pass_of_the_candidates_kernels():
    rows = profile.parse_rocprof(ROCPROF.read_text(), peak_bytes_per_s=5.3e12)
    assert len(rows) == 5 and "FillFunctor" in rows[2]["kernel"]
    plan = {"shapes": [{"key": "m=1024,n=1536,k=7168", "launches": 1, "kernels": ["_blockscale_gemm"]},
                       {"key": "m=1024,n=3072,k=1536", "launches": 1, "kernels": ["_blockscale_gemm"]}]}
    first, second = profile.per_shape(rows, plan)
    # Dispatches 4 and 5: the warm-up pass and PyTorch's fill kernel are dropped.
    assert first["duration_us"] == 380.0 and second["duration_us"] == 125.0
    rate = (1_000_000 + 3000) * 1024 / 380e-6
    assert first["dram_bytes_per_s"] == pytest.approx(rate, rel=1e-3)
    assert first["dram_pct"] == pytest.approx(100 * rate / 5.3e12, abs=0.01)
    assert first["sm_pct"] == 36.0 and first["memory_pct"] == 63.5 and first["tensor_pct"] is None
    assert first["bound"].startswith("memory-bound at 51% of peak DRAM bandwidth")
    assert profile.VERIFIED["rocprofv3"] is False


def test_too_few_launches_of_the_candidates_kernels_is_an_error():
    rows = profile.parse_ncu(NCU_RAW.read_text())[:5]
    with pytest.raises(profile.ProfilerError, match="saw 5 launches of the candidate's kernels"):
        profile.per_shape(rows, _fp8_plan())


def test_no_profiler_and_no_permission_say_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(profile.ProfilerError, match="no hardware profiler is installed here: neither ncu nor rocprofv3"):
        profile.find("auto")
    with pytest.raises(profile.ProfilerError, match="ncu is not on PATH"):
        profile.find("ncu")
    denied = "==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n"
    with pytest.raises(profile.ProfilerError, match="may not read the GPU's performance counters"):
        profile.parse_ncu(denied)
    with pytest.raises(profile.ProfilerError, match="printed no kernel table"):
        profile.parse_ncu("==PROF== Disconnected from process 1\n")


def _fake_ncu(folder: Path, body: str) -> Path:
    """A stand-in `ncu` on PATH (there is no GPU here): a small Python script."""
    folder.mkdir(exist_ok=True)
    path = folder / "ncu"
    path.write_text(f"#!{sys.executable}\nimport json, subprocess, sys\nargs = sys.argv[1:]\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_kgit_profile_stores_the_figures_in_the_note_and_the_designer_reads_them(softmax_repo, run_kgit,
                                                                                 monkeypatch, tmp_path):
    # The stand-in replays the H200 recording: it writes the plan the profiled program would
    # write for the 18 fp8 shapes, and prints ncu's output.
    plan = json.dumps(_fp8_plan())
    bin_dir = tmp_path / "bin"
    _fake_ncu(bin_dir, f"assert '--profile-from-start' in args and 'gpu__time_duration.sum' in args[args.index('--metrics') + 1]\n"
                       f"open(args[args.index('--plan') + 1], 'w').write({plan!r})\n"
                       f"print(open({str(NCU_RAW)!r}).read())")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    shown = run_kgit(softmax_repo, "profile", "kgit/baseline")
    assert shown.exit_code == 0, shown.output
    assert "ncu on NVIDIA H200" in shown.output and "m=6144,n=4608,k=7168" in shown.output
    repo = Repo(softmax_repo)
    (baseline,) = repo.read()
    record = buildfacts.latest_profile(baseline)
    assert record["kind"] == "profile" and len(record["shapes"]) == 18 and record["verified"] is True
    assert baseline.measurements()[0].source == "commit" and len(baseline.measurements()) == 1
    text = buildfacts.base_facts(repo.read(), baseline.sha)
    assert "- m=1024,n=1536,k=7168: 388.9 us, memory-bound at 70% of peak in the on-chip memory pipes" in text
    assert "- gfx942 (MI300X): builds; vgpr " in text and "measured by ncu on NVIDIA H200" in text


def test_kgit_profile_without_a_gpu_says_so(softmax_repo, run_kgit, monkeypatch, tmp_path):
    # A stand-in that runs the program as ncu would: the harness refuses without a GPU.
    bin_dir = tmp_path / "bin"
    _fake_ncu(bin_dir, "i = args.index('--metrics') + 2\nsys.exit(subprocess.run(args[i:]).returncode)")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = run_kgit(softmax_repo, "profile", "kgit/baseline")
    assert result.exit_code != 0
    assert "stopped before the profiled pass" in result.output and "needs a GPU" in result.output


def test_evolve_profile_is_a_checked_choice():
    assert config_mod.parse("evolve: {profile: ncu}\n").evolve.profile == "ncu"
    with pytest.raises(Exception, match="evolve.profile must be one of ncu, rocprofv3, auto"):
        config_mod.parse("evolve: {profile: nsys}\n")


@pytest.mark.gpu
def test_kgit_profile_of_the_fp8_baseline_on_the_gpu(tmp_path, capsys):
    """On the H200 (ncu installed): per benchmark shape, DRAM and SM/tensor throughput as
    percentages of peak, stored in the baseline's note and shown to the designer."""
    from conftest import fast_config_text, make_git_repo

    from kgit import workflow
    from kgit_harness import peaks

    root = make_git_repo(tmp_path / "fp8")
    workflow.init(root, "fp8_blockscale_gemm", config_text=fast_config_text(targets=None))  # the problem's targets
    repo = Repo(root)
    config = config_mod.load(root)
    record = profile.profile(repo, config, "kgit/baseline", "auto")
    task = problem.load_task(root / config.problem)
    assert [s["key"] for s in record["shapes"]] == [problem.shape_key(s) for s in task.benchmarks]
    assert record["profiler"] in ("ncu", "rocprofv3") and record["device"]
    peak = peaks.lookup(record["device"])
    for s in record["shapes"]:
        assert s["kernels"] >= 1 and s["duration_us"] > 0, s
        for figure in ("dram_pct", "memory_pct", "sm_pct"):
            assert s[figure] is not None and 0 < s[figure] <= 100, (figure, s)
        assert s["dram_bytes_per_s"] > 0
        if peak is not None:  # achieved DRAM bandwidth cannot beat the datasheet's by much
            assert s["dram_bytes_per_s"] <= 1.1 * peak.bytes_per_s, (s, peak)
        if record["profiler"] == "ncu":
            assert s["tensor_pct"] is not None and 0 <= s["tensor_pct"] <= 100, s
            assert s["registers"] and 0 < s["registers"] <= 255, s
        assert s["bound"].startswith(("memory-bound", "compute-bound", "latency-bound")), s["bound"]
    (baseline,) = repo.read()
    # The GPU evaluation of kgit init recorded the static facts too (Triton of this host).
    assert set(baseline.targets) == {"gfx942", "sm_90a"}
    assert all(v.startswith("builds; ") for v in baseline.targets.values()), baseline.targets
    assert buildfacts.latest_profile(baseline)["shapes"] == record["shapes"]
    assert record["shapes"][0]["key"] in buildfacts.base_facts(repo.read(), baseline.sha)
    with capsys.disabled():  # the figures the closing note quotes
        print("\n" + "\n".join(f"{k}: {v}" for k, v in baseline.targets.items()))
        print(profile.profile_text(record))
