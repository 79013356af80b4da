"""The knowledge documents the designer reads: shipped as package data, substantial, chosen by the
problem section by section, and internally consistent where they state numbers."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from kgit import config as config_mod
from kgit import problems as problem_mod
from kgit import shipped
from kgit.scientist import knowledge, prompts

ROOT = Path(__file__).resolve().parents[1]
KNOWLEDGE = shipped.prompts_dir() / "knowledge"
DOCUMENTS = ("cdna3", "hopper", "triton", "fp8_gemm")

# Facts each document exists to carry; losing one in an edit should fail loudly.
REQUIRED_TERMS = {
    "cdna3": ["wavefront", "64 KB", "MFMA", "e4m3fnuz", "240", "Infinity Cache", "XCD",
              "waves_per_eu", "matrix_instr_nonkdim", "kpack", "num_stages", "5.3 TB/s"],
    "hopper": ["warpgroup", "wgmma", "TMA", "228 KB", "cluster", "E4M3", "E5M2", "promote",
               "3.35 TB/s", "4.8 TB/s", "50 MB", "1979"],
    "triton": ["num_warps", "num_stages", "GROUP_M", "mask", "tl.dot", "autotune", "Persistent",
               "Split-K", "Fusion", "tl.multiple_of", "recompil", "TRITON_INTERPRET=1"],
    "fp8_gemm": ["per-tensor", "Per-row", "1x128", "128x128", "inside the K loop", "K-major",
                 "MN-major", "Split-K", "Stream-K", "Persistent", "Epilogue", "bf16", "Speed-of-light"],
}


def _words(text: str) -> int:
    return len([w for w in text.split() if re.search(r"\w", w)])


@pytest.mark.parametrize("name", DOCUMENTS)
def test_document_is_package_data_and_substantial(name):
    doc = KNOWLEDGE.joinpath(f"{name}.md")
    assert doc.is_file(), f"{name}.md is missing from prompts/knowledge"
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# "), "a document opens with its title"
    assert len(re.findall(r"^## ", text, flags=re.M)) >= 5, "organised in sections a model can navigate"
    assert 600 <= _words(text) <= 1300, "concise but not a stub"
    missing = [t for t in REQUIRED_TERMS[name] if t.lower() not in text.lower()]
    assert not missing, f"{name}.md no longer mentions {missing}"
    assert "TODO" not in text and "TBD" not in text


def test_default_config_chooses_by_the_problem_and_every_document_loads():
    names = yaml.safe_load(config_mod.default_text())["evolve"]["knowledge"]
    assert names == "auto" == config_mod.Config().evolve.knowledge
    assert set(knowledge.BUILTIN) == set(DOCUMENTS)
    joined = prompts.knowledge(names, repo_root=None, traits=set(knowledge.TRAITS))
    for name in DOCUMENTS:
        title = KNOWLEDGE.joinpath(f"{name}.md").read_text(encoding="utf-8").splitlines()[0]
        assert title.split(" <!--")[0] in joined
    assert "<!--" not in joined  # the trait comments never reach the model


def _traits_of(problem: str, on_gpu: bool = False, device: str = "cpu") -> set:
    folder = problem_mod.shipped()[problem]
    environment = SimpleNamespace(on_gpu=on_gpu, device=device, ranked_on=None)
    return knowledge.traits(problem_mod.load_task(folder), folder, environment)


def test_traits_come_from_the_problem_and_where_it_runs():
    assert _traits_of("softmax") == {"hopper", "cdna3", "interpreter"}  # its build targets, no GPU here
    assert _traits_of("fp8_blockscale_gemm") == {"matmul", "fp8", "hopper", "cdna3", "interpreter"}
    assert "interpreter" not in _traits_of("vector_add", on_gpu=True, device="NVIDIA H200")
    task = SimpleNamespace(summary="", description="y = x @ w.T + b", forbidden=[], targets=[])
    gpu = SimpleNamespace(on_gpu=True, device="AMD Instinct MI300X", ranked_on=None)
    assert knowledge.traits(task, None, gpu) == {"matmul", "cdna3"}  # a product and the GPU that times it


def test_a_softmax_designer_reads_no_gemm_fp8_or_tensor_core_material():
    shown = prompts.knowledge("auto", None, _traits_of("softmax"))
    for absent in ("FP8 GEMM practice", "wgmma", "MFMA (matrix cores)", "e4m3fnuz", "Split-K", "GROUP_M rows",
                   "tl.dot\n", "Dense FP8 tensor"):
        assert absent not in shown, absent
    for present in ("# Triton optimization techniques", "## Block sizes", "4.8 TB/s", "5.3 TB/s", "waves_per_eu",
                    "TRITON_INTERPRET=1"):
        assert present in shown, present
    everything = prompts.knowledge("auto", None, _traits_of("fp8_blockscale_gemm"))
    whole = [prompts.knowledge([name], None) for name in DOCUMENTS]
    assert all(doc in everything for doc in whole)  # the fp8 campaign's problem keeps every section
    assert len(shown) < len(everything) / 3


def test_a_list_of_names_shows_those_documents_whole_and_auto_can_join_them(tmp_path):
    own = tmp_path / "prompts" / "knowledge"
    own.mkdir(parents=True)
    (own / "ours.md").write_text("# Our GPU\n\n## Numbers\nIt has 7 SMs.\n")
    hopper = prompts.knowledge(["hopper"], tmp_path, {"interpreter"})
    assert "wgmma" in hopper and "<!--" not in hopper  # named: whole, whatever the problem
    joined = prompts.knowledge(["auto", "ours"], tmp_path, {"interpreter"})
    assert "7 SMs" in joined and "# Triton optimization techniques" in joined and "NVIDIA Hopper" not in joined
    with pytest.raises(config_mod.ConfigError, match="evolve.knowledge must be auto"):
        config_mod.parse("evolve:\n  knowledge: all\n")


def _peak_and_bandwidth():
    """Peak dense FP8 (FLOP/s) and HBM bandwidth (B/s) as the hardware documents state them."""
    hopper = KNOWLEDGE.joinpath("hopper.md").read_text(encoding="utf-8")
    cdna3 = KNOWLEDGE.joinpath("cdna3.md").read_text(encoding="utf-8")
    h_fp8 = float(re.search(r"Dense FP8 tensor \| (\d+) TFLOPS", hopper).group(1)) * 1e12
    h100_bw, h200_bw = (float(x) * 1e12 for x in re.findall(r"\*\*([\d.]+) TB/s\*\*", hopper)[:2])
    m_fp8 = float(re.search(r"FP8 (\d+) TFLOPS", cdna3).group(1)) * 1e12
    m_bw = float(re.search(r"\*\*([\d.]+) TB/s\*\*", cdna3).group(1)) * 1e12
    return {"H100": (h_fp8, h100_bw), "H200": (h_fp8, h200_bw), "MI300X": (m_fp8, m_bw)}


def test_fp8_gemm_worked_floors_follow_from_the_stated_hardware_figures():
    text = KNOWLEDGE.joinpath("fp8_gemm.md").read_text(encoding="utf-8")
    header = re.search(r"^\| M, N, K \|(.*)\|$", text, flags=re.M).group(1)
    machines = [h.strip() for h in header.split("|")]
    rows = re.findall(r"^\| (\d+), (\d+), (\d+) \|(.*)\|$", text, flags=re.M)
    assert len(rows) >= 3 and machines == ["H100", "H200", "MI300X"]
    hw = _peak_and_bandwidth()
    for m, n, k, cells in rows:
        m, n, k = int(m), int(n), int(k)
        flops = 2 * m * n * k
        # The byte count the document defines: FP8 operands, bf16 output, 1x128 and 128x128 scales.
        nbytes = m * k + n * k + 2 * m * n + 4 * m * k / 128 + 4 * (n / 128) * (k / 128)
        for machine, cell in zip(machines, cells.split("|")):
            mem_us, math_us = (float(x) for x in cell.split("/"))
            peak, bw = hw[machine]
            assert mem_us == pytest.approx(nbytes / bw * 1e6, abs=0.051), (m, n, k, machine)
            assert math_us == pytest.approx(flops / peak * 1e6, abs=0.051), (m, n, k, machine)
