"""The fp8_blockscale_gemm problem: inputs, reference, the tolerance in both directions, the baseline.

The tolerance tests build outputs on the CPU: correct ones (exact rounding, truncation,
an emulation of Hopper's reduced-precision fp8 accumulation, noise at the level measured
on the H200) must pass; outputs with exactly one fault (a skipped K block, one misapplied
scale block, one wrong tile) must fail.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import torch
import yaml
from conftest import FAST_TIMING

from kgit import config as config_mod
from kgit.evaluation import child
from kgit_harness.problem import load_task, shipped

PROBLEM = shipped()["fp8_blockscale_gemm"]


def _load(path: Path, **constants):
    """Import a problem file under a fresh name, optionally overriding module constants first."""
    spec = importlib.util.spec_from_file_location(f"fp8_{path.stem}_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, value in constants.items():
        assert hasattr(module, name), name
        setattr(module, name, value)
    return module


ref = _load(PROBLEM / "reference.py")


def _exact(data):
    da, db = ref.dequantize(*data[:4], torch.float64)
    return da @ db.T


def _bf16(x, truncate=False):
    if not truncate:
        return x.to(torch.bfloat16)
    bits = x.float().view(torch.int32) & ~0xFFFF  # drop the low mantissa bits: round toward zero
    return bits.view(torch.float32).to(torch.bfloat16)


def _check(data, out):
    ok, message = ref.check_implementation(data, out)
    return ok, message


@pytest.fixture(scope="module")
def narrow():
    """The same depth, fewer columns: for the slow emulation of Hopper's accumulation."""
    data = ref.generate_input(m=16, n=192, k=7168, seed=12)
    return data, _exact(data)


@pytest.fixture(scope="module")
def deep():
    """K = 7168 (56 blocks, where one block is the smallest share), N not a multiple of 128."""
    data = ref.generate_input(m=32, n=320, k=7168, seed=11)
    return data, _exact(data)


# -- inputs and reference ---------------------------------------------------------------
def test_generate_input_layouts_and_determinism():
    a, b, a_scale, b_scale, c = ref.generate_input(m=64, n=576, k=384, seed=5)
    assert a.shape == (64, 384) and a.stride() == (1, 64) and a.dtype == torch.float8_e4m3fn
    assert b.shape == (576, 384) and b.stride() == (1, 576) and b.dtype == torch.float8_e4m3fn
    assert a_scale.shape == (64, 3) and a_scale.stride() == (1, 64) and a_scale.dtype == torch.float32
    assert b_scale.shape == (5, 3) and b_scale.stride() == (1, 5)  # ceil(576 / 128) = 5
    assert c.shape == (64, 576) and c.is_contiguous() and c.dtype == torch.bfloat16
    again = ref.generate_input(m=64, n=576, k=384, seed=5)
    other = ref.generate_input(m=64, n=576, k=384, seed=6)
    assert torch.equal(a.float(), again[0].float()) and torch.equal(b_scale, again[3])
    assert not torch.equal(a.float(), other[0].float())
    assert float(a.float().std()) == pytest.approx(1.0, rel=0.1)  # randn, cast to fp8


def test_fp8_type_follows_the_device(monkeypatch):
    assert ref.fp8_dtype() is torch.float8_e4m3fn  # CPU

    class Props:
        gcnArchName = "gfx942:sramecc+:xnack-"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Props)
    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    assert ref.fp8_dtype() is torch.float8_e4m3fnuz
    Props.gcnArchName = "gfx950"  # MI355X uses the OCP type
    assert ref.fp8_dtype() is torch.float8_e4m3fn
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert ref.fp8_dtype() is torch.float8_e4m3fn


def test_reference_matches_the_definition_written_as_loops():
    data = ref.generate_input(m=8, n=200, k=256, seed=3)
    a, b, a_scale, b_scale, c = data
    out = ref.ref_kernel(data)
    assert out.data_ptr() == c.data_ptr()  # fills the preallocated output
    got = out.double()
    for i, j in [(0, 0), (7, 199), (3, 130), (5, 127), (6, 128)]:
        total = sum(float(a[i, kk].double()) * float(a_scale[i, kk // 128]) *
                    float(b[j, kk].double()) * float(b_scale[j // 128, kk // 128]) for kk in range(256))
        assert got[i, j] == pytest.approx(total, rel=2 ** -8, abs=1e-6)


# -- the tolerance: correct outputs pass ---------------------------------------------------
def _hopper_like(data, bits: int, chunk: int = 32):
    """The kernel's math with the accumulation Hopper's fp8 tensor cores do.

    Within each K block, every chunk of 32 products is added to the running sum after all
    are aligned to the largest exponent among them and truncated to `bits` bits below it
    (the fixed-point adder of the fp8 MMA); blocks are then scaled and summed in fp32.
    All K blocks advance together, chunk by chunk. fp32 is exact here: products of fp8
    values have 8 significant bits, and sums of 32 truncated terms fit in 19.
    """
    a, b, a_scale, b_scale, _ = data
    (m, k), n = a.shape, b.shape[0]
    assert k % 128 == 0
    da = a.float().reshape(m, 1, k // 128, 128)
    db = b.float().reshape(1, n, k // 128, 128)
    part = torch.zeros(m, n, k // 128, dtype=torch.float32)
    for k0 in range(0, 128, chunk):
        p = da[..., k0:k0 + chunk] * db[..., k0:k0 + chunk]
        top = torch.frexp(torch.maximum(p.abs().amax(dim=3), part.abs()))[1]
        q = torch.ldexp(torch.ones_like(part), top - bits)
        part = torch.trunc(part / q) * q + (torch.trunc(p / q[..., None]) * q[..., None]).sum(dim=3)
    scales = a_scale[:, None, :] * b_scale[torch.arange(n) // 128][None, :, :]
    acc = torch.zeros(m, n, dtype=torch.float32)
    for kb in range(k // 128):  # in order, in fp32, as the kernel's accumulator does
        acc += part[..., kb] * scales[..., kb]
    return acc.to(torch.bfloat16)


def test_correct_outputs_pass(deep):
    data, exact = deep
    for name, out in [("round to nearest", _bf16(exact)), ("truncated", _bf16(exact, truncate=True)),
                      ("fp32 reference", ref.ref_kernel(data))]:
        ok, message = _check(data, out)
        assert ok, f"{name}: {message}"


@pytest.mark.parametrize("bits", [13, 10])
def test_hopper_reduced_precision_accumulation_passes(narrow, bits):
    # 13 bits is the H200 (its error matches the measured one); 10 bits, 8x the error, still passes.
    data, exact = narrow
    out = _hopper_like(data, bits)
    ok, message = _check(data, out)
    assert ok, message
    rel = float((out.double() - _bf16(exact).double()).norm() / exact.norm())
    assert rel > 3e-4  # the emulation does add error over plain rounding


def test_noise_at_the_level_measured_on_the_h200_passes(deep):
    # Measured: relative Frobenius error 6.8e-4 and max abs error 2.0 (one bf16 ulp at
    # |c| in [256, 512)) against the bf16 reference. Build that: one-ulp flips on a share
    # of the elements, the largest ones included, then 3x as much Gaussian noise on top.
    data, exact = deep
    base = _bf16(exact)
    gen = torch.Generator().manual_seed(0)
    flip = torch.rand(base.shape, generator=gen) < 0.01
    flip[exact.abs().argmax() // base.shape[1], exact.abs().argmax() % base.shape[1]] = True
    up = torch.nextafter(base.float(), torch.full_like(base.float(), float("inf"))).to(torch.bfloat16)
    up = torch.where(up == base, (base.float() * (1 + 2 ** -7)).to(torch.bfloat16), up)
    flipped = torch.where(flip, up, base)
    rel = float((flipped.double() - base.double()).norm() / base.double().norm())
    assert 3e-4 < rel < 1.5e-3
    ok, message = _check(data, flipped)
    assert ok, message
    rms = float(exact.pow(2).mean().sqrt())
    noisy = (flipped.double() + 3 * 6.8e-4 * rms * torch.randn(base.shape, generator=gen, dtype=torch.float64))
    ok, message = _check(data, noisy.to(torch.bfloat16))
    assert ok, message


def test_the_plain_allclose_of_the_challenge_fails_a_correct_kernel(narrow):
    # Why the problem has its own check: near-zero outputs fail a relative tolerance.
    data, _ = narrow
    out = _hopper_like(data, 13).double()
    expected = ref.ref_kernel(data).double()
    assert not torch.allclose(out, expected, rtol=2e-2, atol=1e-3)
    assert _check(data, out.to(torch.bfloat16))[0]


# -- the tolerance: one fault fails ---------------------------------------------------------
def _with(data, index, edit):
    data = tuple(t.clone() for t in data)
    edit(data[index])
    return data


@pytest.mark.parametrize("block", [0, 27, 55])
def test_skipping_one_k_block_fails(deep, block):
    data, _ = deep
    skipped = _with(data, 2, lambda s: s[:, block].zero_())  # that block contributes nothing
    ok, message = _check(data, ref.ref_kernel(skipped))
    assert not ok, message


def test_misapplying_one_scale_block_fails(deep):
    data, _ = deep
    # B's scale block (column block 2, K block 40) replaced by its neighbour's in K.
    wrong_b = _with(data, 3, lambda s: s.__setitem__((2, 40), s[2, 41].item()))
    assert not _check(data, ref.ref_kernel(wrong_b))[0]
    # A's scale for one row and one K block taken from the next row.
    wrong_a = _with(data, 2, lambda s: s.__setitem__((5, 13), s[6, 13].item()))
    assert not _check(data, ref.ref_kernel(wrong_a))[0]
    # One scale block read transposed (b_scale[kb, jb] instead of b_scale[jb, kb]).
    swapped = _with(data, 3, lambda s: s.__setitem__((1, 0), s[0, 1].item()))
    assert not _check(data, ref.ref_kernel(swapped))[0]


@pytest.mark.parametrize("fault", ["zeros", "other tile", "left unwritten", "one k block twice"])
def test_one_wrong_tile_fails(deep, fault):
    data, exact = deep
    out = _bf16(exact).clone()
    rows, cols = slice(16, 32), slice(128, 144)  # one 16 x 16 tile, the smallest MMA tile
    if fault == "zeros":
        out[rows, cols] = 0
    elif fault == "other tile":
        out[rows, cols] = out[0:16, 0:16]
    elif fault == "left unwritten":
        out[rows, cols] = float("nan")  # what the harness's poisoned output holds
    else:
        twice = ref.ref_kernel(_with(data, 2, lambda s: s[:, 9].mul_(2)))
        out[rows, cols] = twice[rows, cols]
    assert not _check(data, out)[0]


def test_the_row_piece_test_alone_catches_each_fault(deep, monkeypatch):
    # The elementwise allowance widened until it allows anything: the second test still
    # names the faulty place, so the check does not rest on one criterion.
    data, exact = deep
    monkeypatch.setattr(ref, "ACCUMULATION", 1.0)
    monkeypatch.setattr(ref, "ULP_BF16", 1.0)
    cases = [
        (_with(data, 2, lambda s: s[:, 55].zero_()), "row pieces"),
        (_with(data, 3, lambda s: s.__setitem__((2, 40), s[2, 41].item())), "columns 256..319"),
        (_with(data, 2, lambda s: s.__setitem__((5, 13), s[6, 13].item())), "row 5,"),
    ]
    for faulty, where in cases:
        ok, message = _check(data, ref.ref_kernel(faulty))
        assert not ok and where in message, message
    tile = _bf16(exact).clone()
    tile[16:32, 128:144] = tile[0:16, 0:16]
    ok, message = _check(data, tile)
    assert not ok and "columns 128..255" in message, message


def test_wrong_shape_dtype_and_coarse_accumulation_fail(narrow):
    data, exact = narrow
    assert "bfloat16" in _check(data, exact.float())[1]
    assert not _check(data, _bf16(exact)[:, :128])[0]
    assert not _check(data, [1, 2])[0]
    ok, message = _check(data, _hopper_like(data, 6))  # an adder far narrower than any GPU's
    assert not ok


# -- the baseline kernel ------------------------------------------------------------------
# Triton's interpreter mode is fixed when triton.language is first imported (its own
# helpers such as tl.zeros are jit functions too), so in-process kernel runs happen in a
# child that sets TRITON_INTERPRET before importing anything, whatever ran before here.
_INTERPRETED_RUNS = r"""
import importlib.util, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

problem = sys.argv[1]
ref = load(problem + "/reference.py", "reference_under_test")
kernel = load(problem + "/kernel.py", "kernel_under_test")
results = []
for tiles in json.loads(sys.argv[2]):
    for name, value in tiles.items():
        setattr(kernel, name, value)
    data = ref.generate_input(m=96, n=320, k=256, seed=8)
    pristine = tuple(t.clone() for t in data)
    data[4].fill_(float("nan"))
    out = kernel.custom_kernel(data)
    ok, message = ref.check_implementation(pristine, out)
    unchanged = all(torch.equal(x.float(), y.float()) for x, y in zip(data[:4], pristine[:4]))
    results.append([tiles, ok, message, out.data_ptr() == data[4].data_ptr(), unchanged])
print(json.dumps(results))
"""


@pytest.mark.slow
def test_baseline_kernel_in_the_interpreter():
    # Shipped tiles; BLOCK_N 256 spans two B scale blocks; BLOCK_K 32 takes four steps per scale block.
    variants = [{}, {"BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 1}, {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32}]
    run = subprocess.run([sys.executable, "-c", _INTERPRETED_RUNS, str(PROBLEM), json.dumps(variants)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert [r[0] for r in results] == variants
    for tiles, ok, message, in_place, unchanged in results:
        assert ok, f"{tiles}: {message}"
        assert in_place and unchanged, tiles


def test_baseline_marks_its_tunables():
    text = (PROBLEM / "kernel.py").read_text()
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "NUM_WARPS", "NUM_STAGES"):
        line = next(line for line in text.splitlines() if line.startswith(name + " = "))
        value, _, values = line.partition("# kgit: tune")
        assert value.split("=")[1].strip() in values.split(), line


def test_the_anchor_benchmark_starts_its_sweep_at_the_shipped_configuration():
    anchors = _load(Path(__file__).parent.parent / "benchmarks" / "fp8_anchors.py")
    kernel = _load(PROBLEM / "kernel.py")
    assert anchors.GRID[0] == tuple(getattr(kernel, name) for name in anchors.TUNABLES)
    assert len(set(anchors.GRID)) == len(anchors.GRID)


def test_task_uses_the_cpu_section_and_the_challenge_shapes():
    task = load_task(PROBLEM)
    assert len(task.tests) == 11 and len(task.benchmarks) == 18 and task.output == 4
    assert {(s["n"], s["k"]) for s in task.benchmarks} == {
        (1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048), (4608, 7168),
        (7168, 2304), (512, 7168), (4096, 512)}
    assert {s["m"] for s in task.benchmarks} == {1024, 6144}
    assert all(s["m"] * s["n"] * s["k"] <= 128 * 256 * 512 for s in task.shapes("tests", on_gpu=False))
    assert task.work({"m": 1024, "n": 576, "k": 7168})[0] == 2 * 1024 * 576 * 7168


@pytest.mark.slow
def test_the_harness_runs_the_problem_without_a_gpu(tmp_path):
    data = yaml.safe_load(config_mod.default_text())
    data["timing"] = dict(FAST_TIMING)
    config = config_mod.parse(yaml.safe_dump(data), "test config")
    problem_dir, candidate_dir = child.stage_candidate(PROBLEM, ".", ["kernel.py"], tmp_path)
    doc = child.run_child(problem_dir, candidate_dir, config, tmp_path)
    assert doc["status"] == "ok", doc.get("error") or doc.get("stderr")
    assert doc["timing"] == "interpreter"
    assert {t["key"] for t in doc["tests"]} == {"m=64,n=64,k=128", "m=64,n=576,k=256", "m=96,n=192,k=384"}
    assert all("relative Frobenius error" in t["message"] for t in doc["tests"])
    assert len(doc["shapes"]) == 2


# -- on the GPU ------------------------------------------------------------------------------
@pytest.mark.gpu
def test_baseline_passes_every_test_shape_on_the_gpu_and_faults_fail():
    assert torch.cuda.is_available()
    kernel = _load(PROBLEM / "kernel.py")
    task = load_task(PROBLEM)
    for shape in task.tests:
        data = ref.generate_input(**shape)
        pristine = tuple(t.clone() for t in data)
        data[4].fill_(float("nan"))
        out = kernel.custom_kernel(data)
        torch.cuda.synchronize()
        ok, message = _check(pristine, out)
        assert ok, f"{shape}: {message}"
        print(shape, message)  # the measured error, for the report (pytest -s)
        k_blocks = data[2].shape[1]
        if k_blocks > 1:
            skipped = _with(pristine, 2, lambda s: s[:, k_blocks // 2].zero_())
            data[4].fill_(float("nan"))
            assert not _check(pristine, kernel.custom_kernel(skipped))[0], shape
            # B's scale block with the largest scale in row 0 gets the smallest one's value:
            # two random scales that happen to be close would hide the fault.
            big, small = int(data[3][0].abs().argmax()), int(data[3][0].abs().argmin())
            wrong = _with(pristine, 3, lambda s: s.__setitem__((0, big), s[0, small].item()))
            assert not _check(pristine, kernel.custom_kernel(wrong))[0], shape
        broken = out.clone()
        broken[:16, :16] = 0
        assert not _check(pristine, broken)[0], shape


@pytest.mark.gpu
def test_the_harness_measures_the_baseline_on_the_gpu():
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        config = config_mod.parse(config_mod.default_text(), "default")
        problem_dir, candidate_dir = child.stage_candidate(PROBLEM, ".", ["kernel.py"], scratch)
        doc = child.run_child(problem_dir, candidate_dir, config, scratch)
    assert doc["status"] == "ok", doc.get("error") or doc.get("stderr")
    assert doc["timing"] == "events" and len(doc["shapes"]) == 18
    print("harness geomean us", doc["geomean_us"])
