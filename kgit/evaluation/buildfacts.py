"""Build facts on kgit's side: the `Kgit-Target-<name>` trailers, the require_targets
policy, and the lines the designer, writer and selector read.

The facts themselves are made in the candidate's process (kgit_harness/targets.py)
and arrive in the result document's `targets` entry. They are candidate-reported:
a kernel could forge them, so `require_targets` is a policy for honest kernels, not
a security boundary (docs/targets.md).
"""

from __future__ import annotations

import re

from kgit.archive import trailers as tr
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


def apply_policy(result, config):
    """With `require_targets`, an ok result (a harness `Result`) whose kernels do not build for a target fails."""
    if not getattr(config, "require_targets", False) or result.status != "ok":
        return result
    results = (result.targets or {}).get("results") or {}
    failing = [n for n, r in results.items() if r.get("builds") is False]
    if failing:
        lines = [f"{n} ({HARDWARE.get(n, n)}): {results[n].get('error')}" for n in failing]
        result.status, result.reason = "compile-error", "does not build for a declared target"
        result.error = ("The kernel is correct on this machine but does not build for the declared target(s) "
                        "(require_targets is on):\n" + "\n".join(lines))
    return result


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
    from kgit.evaluation import profile

    attempt = next((a for a in attempts if a.sha == sha), None)
    if attempt is None:
        return prompt_lines({}, declared=declared)
    from kgit.archive.measure import targets_of

    record = profile.latest(attempt)
    return prompt_lines(attempt.targets, profile.lines(record) if record else None, declared, targets_of(attempt))


def prompt_lines(targets: dict[str, str], profile: list[str] | None = None, declared=None,
                 variants: dict[str, list] | None = None) -> str:
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
