"""Build facts as the archive keeps them: the `Kgit-Target-<name>` trailers, the notes of
every kernel variant and of hardware counters beside a commit, and the lines the designer,
writer, selector and the review read of them.

The facts themselves are made in the candidate's process (kgit_harness/targets.py) and
arrive in the result document's `targets` entry. They are candidate-reported (docs/targets.md).
Reading them out of an attempt is the archive's job, so the scientist and the review read
them here, never through kgit/evaluation/.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kgit.archive import trailers as tr
from kgit.archive.measure import targets_of
from kgit_harness.result import Result

TRAILER_PREFIX = tr.BY_ATTR["targets"].key  # + the target's name, "_" written "-"

# Names a build target in prose: the hardware it stands for.
HARDWARE = {"gfx942": "MI300X", "gfx950": "MI350X", "gfx90a": "MI250X", "sm_90a": "H100/H200", "sm_90": "H100/H200",
            "sm_80": "A100"}


def trailers(result) -> list[tuple[str, str]]:
    """One trailer per build target, then which Triton made the facts: the trailer table's
    family rows (kgit/archive/trailers.py), which every attempt commit writes. `result` is
    a harness `Result`, or its document as an evaluator answers it."""
    if isinstance(result, dict):
        result = Result.from_dict(result)
    return tr.lines(tr.target_values(result))


def short(targets: dict[str, str]) -> str:
    """`gfx942 vgpr 218 lds 48 KiB occ 1; sm_90a fails` for a table cell. The LDS/shared figure
    tells a larger pipeline or warp specialization from register pressure when occupancy drops."""
    cells = []
    for name, value in targets.items():
        if value.startswith("builds"):
            regs = re.search(r"(vgpr|regs) (\d+)", value)
            local = re.search(r"(lds|smem) ([^,]+)", value)
            occ = re.search(r"occupancy (\d+)", value)
            spill = re.search(r"spill ([^,]+)", value)
            cell = f"{name} {regs.group(1)} {regs.group(2)}" if regs else name
            cell += f" {local.group(1)} {local.group(2).strip()}" if local else ""
            cell += f" occ {occ.group(1)}" if occ else ""
            cell += f" spill {spill.group(1)}" if spill and spill.group(1).strip() != "0" else ""
        else:
            cell = f"{name} {value.split(':', 1)[0]}"
        cells.append(cell)
    return "; ".join(cells)


def base_facts(attempts, sha: str | None, declared=None) -> str:
    """The $targets text of a prompt: the build facts and latest profile of attempt `sha`,
    and which of the `declared` targets (the problem's, or .kgit.yaml's) it does not build for."""
    attempt = next((a for a in attempts if a.sha == sha), None)
    if attempt is None:
        return prompt_lines({}, declared=declared)
    record = latest_profile(attempt)
    return prompt_lines(attempt.targets, profile_lines(record) if record else None, declared, targets_of(attempt))


def latest_profile(attempt) -> dict[str, Any] | None:
    """An attempt's newest hardware-counter profile (`kgit profile`, kgit/evaluation/profile.py), from its note."""
    found = attempt.notes.of_kind("profile")
    return max(found, key=lambda n: n.get("when", 0)) if found else None


def profile_lines(record: dict[str, Any]) -> list[str]:
    """The designer's view of one profile record: one line per shape, then where it ran."""
    out = [f"{s['key']}: {s['duration_us']:.1f} us, {s['bound']}" for s in record.get("shapes") or []]
    if out:
        verified = "" if record.get("verified", True) else " (unverified profiler path)"
        out.append(f"measured by {record.get('profiler')} on {record.get('device') or 'an unnamed device'}{verified}")
    return out


def prompt_lines(targets: dict[str, str], profile: list[str] | None = None, declared=None,
                 variants: Mapping[str, list[list[Any]]] | None = None) -> str:
    """What the designer and writers read about the base: build facts per target (builds or
    the compiler's first error line; registers, LDS/shared, spills, occupancy) and, from the
    note beside its commit, each compiled kernel variant's when there were several, the declared
    targets it does not build for or has no facts for, and the hardware-counter lines of its
    profile when one was taken."""
    declared = list(declared or [])
    missing = [n for n in declared if n not in targets]
    if not targets and not profile:
        if missing:
            return (f"No build facts were recorded for this kernel (declared targets: {', '.join(declared)}; "
                    "the evaluation that made it captured no Triton launch, or build targets were off).")
        return "No build facts were recorded for this kernel."
    lines = []
    if targets:
        lines.append("Compiled for each declared target GPU by Triton on the evaluating machine (reported by the "
                     "candidate's process; occupancy is waves per SIMD on AMD, blocks per SM on NVIDIA; over "
                     "several kernels the worst one):")
        for name, value in targets.items():
            lines.append(f"- {name} ({HARDWARE.get(name, name)}): {value}")
            kept = (variants or {}).get(name) or []
            if len(kept) > 1:  # each compiled variant, of which the line above is the worst
                lines += [f"  - {kernel}: {facts}" for kernel, facts in kept]
        failing = [n for n, v in targets.items() if v.startswith("fails") and (not declared or n in declared)]
        if failing:
            named = ", ".join(f"{n} ({HARDWARE.get(n, n)})" for n in failing)
            lines.append(f"It does not build for {named} (what that means for an attempt: "
                         "\"build targets\" in the evaluation environment).")
        elif declared and not missing:
            lines.append(f"It builds for every declared target ({', '.join(declared)}).")
        if missing:
            lines.append(f"No build facts for the declared target(s) {', '.join(missing)}.")
    if profile:
        lines.append("Hardware counters:")
        lines += [f"- {line}" for line in profile]
    return "\n".join(lines)
