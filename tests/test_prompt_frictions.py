"""What round 1 of the fp8 campaign found missing from the prompts (issue 18): failing
targets' reasons in the selector's table, the GPU benchmark shapes and the base's figures
there, the ranking device's software, and the build-target policy as configured."""

from __future__ import annotations

import json

from kgit.archive.repo import parse_log
from kgit.scientist import select

GPU = "NVIDIA H200"
LDS = "does not fit: needs 96 KiB of LDS per workgroup; gfx942 has 64 KiB"


def attempt(sha, experiment, when, targets=None, notes=()):
    """An attempt checked in the interpreter, with build-target trailers and note records."""
    message = (f"x\n\nKgit-Experiment: {experiment}\nKgit-Attempt: 1\nKgit-Status: ok\nKgit-Device: cpu\n"
               f"Kgit-Timing: interpreter\nKgit-Harness: h\nKgit-Geomean-us: 1000.0\n"
               f"Kgit-Branch: kgit/{experiment}-x\nKgit-Hypothesis: h{experiment}\n")
    message += "".join(f"Kgit-Target-{name.replace('_', '-')}: {value}\n" for name, value in (targets or {}).items())
    record = "\x1f".join([sha * 40, "", "t" * 40, "n", "e", str(when), message,
                          "".join(json.dumps(n) + "\n" for n in notes)])
    return parse_log(record + "\0")[0]


def test_the_selectors_table_says_why_a_target_fails():
    a = attempt("b", 1, 2, targets={"gfx942": f"fails: {LDS}", "sm_90a": "builds; regs 181, smem 72 KiB, spill 0, "
                                                                          "occupancy 2"})
    row = select.row(a)
    assert f"gfx942 fails: {LDS}" in row and "sm_90a regs 181 occ 2" in row
    long = attempt("c", 2, 3, targets={"sm_90a": "fails: RecursionError: " + "x" * 400})
    cell = select.row(long).split("targets: ")[1]
    assert cell.startswith("sm_90a fails: RecursionError: x") and len(cell) < 130
