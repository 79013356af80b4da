"""The `require_targets` policy: an evaluation whose kernels do not build for a declared
target fails, though correct here.

Build facts are candidate-reported (a kernel could forge them), so this is a policy for
honest kernels, not a security boundary (docs/targets.md).
"""

from __future__ import annotations

from kgit.archive.buildfacts import HARDWARE


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
