"""The archive as the scientist sees it: every figure with its device, timing method and
noise, interpreter timings never shown as performance, failures with their one-line cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kgit.archive import cause as cause_mod
from kgit.archive import figures, measure
from kgit.archive import trailers as tr
from kgit.archive.notes import Measurement

CAUSE_CHARS = 160


def cause(a) -> str:
    """A failure's cause in one line (its rule or its error's line), or "" for older commits."""
    return tr.one_line(cause_mod.of_attempt(a), CAUSE_CHARS)


class ArchiveView:
    """Figures of one archive read: the GPU setup to rank on (if any), fixes, verdicts."""

    def __init__(self, attempts):
        self.attempts = attempts
        self.by_sha = {a.sha: a for a in attempts}
        self.order, self.rule = figures.ranked(attempts)
        group = figures.gpu_group(attempts)
        self.device = self.harness = self.evaluator = None
        self.on_device: dict[str, float] = {}
        if group is not None:
            self.device, self.harness, self.evaluator = group.device, group.harness, group.evaluator
            self.on_device = {a.sha: g for a, g in group.entries}
        self.repeat = (figures.repeatability(attempts, self.device, self.harness, self.evaluator)
                       if self.device else None)
        self.fixed_by = self._fixes()

    @property
    def gpu(self) -> bool:
        return self.device is not None

    def _fixes(self) -> dict[str, str]:
        """Failed sha -> "E.A" of the later correct attempt on the same branch."""
        out: dict[str, str] = {}
        by_branch: dict[str, list] = {}
        for a in self.attempts:
            if not a.is_baseline and a.branch:
                by_branch.setdefault(a.branch, []).append(a)
        for tries in by_branch.values():
            tries.sort(key=lambda a: a.attempt)
            for i, a in enumerate(tries):
                if not a.ok:
                    fix = next((b for b in tries[i + 1:] if b.ok), None)
                    if fix is not None:
                        out[a.sha] = f"{fix.experiment}.{fix.attempt}"
        return out

    def status(self, a) -> str:
        if a.ok:
            return "ok"
        why = cause(a)
        text = a.status + (f": {why}" if why else "")
        return text + (f" (fixed by {self.fixed_by[a.sha]})" if a.sha in self.fixed_by else "")

    def timing(self, a) -> str:
        """The attempt's figure, in words that carry its meaning."""
        if not a.ok:
            return "-"
        if self.gpu:
            us = self.on_device.get(a.sha)
            if us is None:
                other = measure.latest_on(a, self.device)
                if other is not None and other.status not in (None, "ok"):
                    why = other.error
                    return (f"correct in the interpreter, but {other.status} on {self.device} (re-measured)"
                            + (f": {why}" if why else ""))
                if other is not None and other.geomean_us:
                    other_setup = (f"by another harness version ({other.harness or 'unknown'})"
                                   if other.harness != self.harness else
                                   f"through another evaluator ({other.evaluator or 'unknown'})")
                    return (f"{other.geomean_us:.1f} us on {self.device}, {other_setup}: not comparable with "
                            "the figures ranked here")
                return f"correct; not measured on {self.device}" + (
                    " (interpreter only)" if figures.is_interpreter(a.timing, a.device) else f" (timed on {a.device})")
            parts = [f"{us:.1f} us"]
            base_us = self.on_device.get(self._baseline_sha())
            if base_us and not a.is_baseline:
                parts.append(f"{base_us / us:.2f}x vs baseline")
            judged = self.verdict(a)
            if judged is not None:
                parts.append(f"{judged.word} vs base" + (f" {judged.ratio:.2f}x" if judged.ratio else ""))
            return ", ".join(parts)
        return "correct (interpreter: not timed for speed)"

    def verdict(self, a):
        """Speedup / slower / no clear change of `a` against its base on the ranking device."""
        if a.is_baseline or not a.base or a.sha not in self.on_device or a.base not in self.on_device:
            return None
        if a.device == self.device and a.speedup is not None:
            return figures.attempt_verdict(a, self.attempts)
        ratio = self.on_device[a.base] / self.on_device[a.sha]
        return figures.verdict(ratio, "events", self.device, None, None, self.repeat)

    def _baseline_sha(self) -> str | None:
        return next((a.sha for a in self.attempts if a.is_baseline), None)

    def explanation(self) -> str:
        if not self.gpu:
            return ("No GPU timings exist: every attempt ran in Triton's interpreter on the CPU, which checks "
                    "correctness only, so no timing is shown. Choose on correctness and on the hypotheses.")
        repeat = f"{100 * self.repeat:.1f}%" if self.repeat is not None else "not measured yet (no attempt timed twice)"
        through = f", through {self.evaluator}" if self.evaluator else ""
        return (f"Timings: geomean in us of the benchmark shapes, on {self.device} (harness {self.harness}{through}). "
                f"A verdict against the base (speedup, slower, no clear change) holds only beyond the measured "
                f"noise: twice the combined standard error of both timings, at least {100 * figures.MIN_NOISE:.0f}%; "
                f"the device's repeatability (spread of repeated measurements) is {repeat}. Attempts measured "
                "only in the interpreter are marked so and carry no timing.")

    def outcome(self, tries) -> str:
        """How an experiment's attempts ended, failures with their cause, a later fix as such."""
        notes: list = []
        for a in tries:
            if a.ok:
                head = f"correct at attempt {a.attempt} [{self.timing(a)}]"
                return head + (", after " + "; ".join(notes) + " (fixed)" if notes else "")
            notes.append(f"attempt {a.attempt} {self.status(a).split(' (fixed by')[0]}")
        return "failed: " + "; ".join(notes)

    def _ranking_measurement(self, a) -> Measurement | None:
        """`a`'s latest measurement by the ranking device and harness, or None."""
        return measure.comparable(a, self.device, self.harness, self.evaluator) if self.gpu else None

    def comparable_times(self, a) -> Mapping[str, float]:
        found = self._ranking_measurement(a)
        return found.times if found else {}

    def comparable_kernels(self, a) -> Mapping[str, list[list[Any]]]:
        """{shape: [[kernel, launches, us], ...]} of the measurement comparable_times reads, if it
        kept the runner's per-kernel split (kgit/archive/measure.py)."""
        return measure.kernels_of(a, self.device, self.harness, self.evaluator) if self.gpu else {}

    def launch_bound(self, a) -> Mapping[str, Mapping[str, float]]:
        """{shape: {"gpu_us", "host_us"}} of the ranking measurement's launch-bound shapes."""
        found = self._ranking_measurement(a)
        return (found.launch_bound or {}) if found else {}

    def per_call(self, a) -> Mapping[str, Mapping[str, float]]:
        """{shape: {"device_us", "host_us"}} beside the ranking measurement's figures, where kept."""
        return measure.per_call_of(a, self.device, self.harness, self.evaluator) if self.gpu else {}
