"""What kgit's timing figures mean: their noise, the verdict of a comparison, and which
attempts may be ranked at all.

A timing is a claim about one device, one timing method, one harness and one evaluator
(the backend and host that ran it: two hosts with the same GPU are two setups). Interpreter
timings (Triton's interpreter on the CPU) say nothing about GPU speed, so they are never
ranked; a GPU ratio counts as a speedup (or a slowdown) only beyond the measured noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from kgit.archive import measure
from kgit.archive.notes import Measurement

INTERPRETER = "interpreter"
# One measurement does not resolve run-to-run changes below this (clocks, thermals,
# other tenants); the within-run spread alone would let a 0.3% wobble read as a win.
MIN_NOISE = 0.01
# For a timing stored without its spread (an older trailer, a remote evaluator's bare result).
ASSUMED_NOISE = 0.03
NOISE_TRAILER = "Kgit-Noise"
GPU_RULE = "the fastest geomean on {device} ({count} attempt(s) measured there by harness {harness}{through})"
CPU_RULE = ("the most recent correct attempt: the archive has no GPU timings, and interpreter timings "
            "are never ranked")
# What an interpreter timing is, wherever one is shown: a timing with its meaning, never a ratio.
INTERPRETER_MEANING = "Triton's interpreter on the CPU, which shows that a kernel runs correctly, not how fast"
# What measuring on a GPU would add to an archive that has only interpreter timings.
GPU_WOULD_ADD = ("On a GPU, kgit ranks the attempts by speed, shows speedups over the baseline and each base "
                 "(per shape too), draws the best-so-far curve, and marks real speedups for "
                 "`git log --all --grep speedup`. Measure these attempts there with `kgit remeasure --all`, "
                 "or run `kgit evolve` on a GPU host.")


def is_interpreter(timing: str | None, device: str | None = None) -> bool:
    return timing == INTERPRETER or (device or "").lower() == "cpu"


def timed(attempt) -> bool:
    """Whether an attempt's own timing is a speed figure (a GPU's), so that ratios of it may be shown."""
    return not is_interpreter(attempt.timing, attempt.device)


def result_noise(result) -> float | None:
    """Relative standard error of a result's geomean (a harness `Result`), from each shape's spread and repetitions."""
    errors = []
    for shape in result.shapes:
        mean, std, n = shape.statistic(result.ranking or "mean") or shape.mean_us, shape.std_us, shape.n
        if mean and std is not None and n and n > 1 and mean > 0:
            errors.append(std / math.sqrt(n) / mean)
    if not errors:
        return None
    # log(geomean) is the mean of the shapes' logs, so their relative errors add in quadrature / k.
    return math.sqrt(sum(e * e for e in errors)) / len(errors)


def noise_trailer(result) -> list:
    noise = result_noise(result)
    return [] if noise is None else [(NOISE_TRAILER, f"{100 * noise:.3f}%")]


def attempt_noise(attempt) -> float | None:
    """The noise stored with an attempt's own measurement (None for commits made before it was kept)."""
    values = attempt.trailers.get(NOISE_TRAILER) or []
    try:
        return float(values[-1].rstrip("%")) / 100 if values else None
    except ValueError:
        return None


def measurement_noise(attempt, record: Measurement | None) -> float | None:
    if not record:
        return None
    if record.source == "commit":
        return attempt_noise(attempt)
    return record.noise


def repeatability(attempts, device: str, harness: str | None = None, evaluator: str | None = None) -> float | None:
    """The median spread (max/min - 1) of attempts measured more than once on `device`
    (by `harness` and through `evaluator` when given)."""
    spreads = []
    for a in attempts:
        values = [m.geomean_us for m in a.measurements() if m.device == device
                  and (harness is None or m.harness == harness)
                  and (evaluator is None or m.evaluator == evaluator) and m.geomean_us]
        if len(values) > 1:
            spreads.append(max(values) / min(values) - 1)
    if not spreads:
        return None
    spreads.sort()
    return spreads[len(spreads) // 2]


@dataclass
class Verdict:
    word: str  # "speedup", "slower", "no clear change", or "interpreter"
    ratio: float | None
    threshold: float | None
    how: str  # where the threshold came from, in words

    @property
    def claimed(self) -> bool:
        return self.word == "speedup"

    def subject_part(self) -> str:
        if self.word == "interpreter":
            return "correct (not timed on a GPU)"
        if self.ratio is None:
            return "correct (no comparable base timing)"
        return f"{self.word} {self.ratio:.2f}x"


def verdict(ratio: float | None, timing: str | None, device: str | None, noise: float | None,
            base_noise: float | None, repeat: float | None = None) -> Verdict:
    """Faster or slower than the base only beyond the noise of both timings and the device's repeatability."""
    if is_interpreter(timing, device):
        return Verdict("interpreter", ratio, None, "interpreter timings are not performance")
    known = [n for n in (noise, base_noise) if n is not None]
    if known:
        a, b = (noise if noise is not None else known[0]), (base_noise if base_noise is not None else known[0])
        within, how = 2 * math.sqrt(a * a + b * b), "2 x the combined standard error"
    else:
        within, how = ASSUMED_NOISE, "no spread stored; assumed"
    threshold = max(within, repeat or 0.0, MIN_NOISE)
    if repeat and repeat >= within and repeat >= MIN_NOISE:
        how = "the device's measured repeatability"
    elif threshold == MIN_NOISE and within < MIN_NOISE:
        how = "the run-to-run floor"
    if ratio is None:
        return Verdict("no clear change", None, threshold, how)
    word = "speedup" if ratio > 1 + threshold else "slower" if ratio < 1 / (1 + threshold) else "no clear change"
    return Verdict(word, ratio, threshold, how)


def attempt_verdict(attempt, attempts) -> Verdict:
    """The verdict of a stored attempt against its base, from what the archive holds."""
    base = next((a for a in attempts if a.sha == attempt.base), None)
    through = attempt.evaluator or None
    base_m = measure.comparable(base, attempt.device, attempt.harness, through) if base else None
    return verdict(attempt.speedup, attempt.timing, attempt.device, attempt_noise(attempt),
                   measurement_noise(base, base_m), repeatability(attempts, attempt.device, attempt.harness, through))


def describe(timing: str | None, device: str | None, noise: float | None) -> str:
    """One timing's meaning in words: device, method and noise."""
    if is_interpreter(timing, device):
        return f"{device or 'cpu'}, Triton interpreter (not performance)"
    spread = f"+-{100 * noise:.1f}%" if noise is not None else "spread unknown"
    return f"{device or 'unknown device'}, {timing or 'unknown timing'}, {spread}"


# -- ranking ---------------------------------------------------------------------------
class Group(NamedTuple):
    """The setup that ranks (device, harness, evaluator) and its attempts' figures there."""

    device: str
    harness: str | None
    evaluator: str | None  # backend@host (measure.evaluator_of); None for figures that did not say
    entries: list  # [(attempt, geomean_us)]


def gpu_group(attempts) -> Group | None:
    """The setup that ranks and its figures: see `_ranking_key`. Figures of one device and
    harness taken through different evaluators (hosts) are different setups."""
    groups: dict[tuple, dict] = {}
    for a in attempts:
        for m in a.measurements():
            if is_interpreter(m.timing, m.device) or not m.device or not m.ok:
                continue
            slot = groups.setdefault((m.device, m.harness, m.evaluator), {})
            if a.sha not in slot or m.when >= slot[a.sha][1]:
                slot[a.sha] = (a, m.when, m.geomean_us)
    if not groups:
        return None
    (device, harness, evaluator), slot = max(groups.items(), key=_ranking_key(groups, attempts))
    return Group(device, harness, evaluator, [(a, g) for a, _, g in slot.values()])


def _ranking_key(groups: dict, attempts):
    """The GPU that measured the most attempts (any harness version, any evaluator); on it,
    the newest setup (harness version and evaluator) that measured the baseline, else the
    one that measured the most.

    A baseline re-measured by a newer harness (kgit upgraded mid-campaign) makes that
    harness the scale at once: the best attempts re-measured beside it are ranked on it,
    instead of waiting until it has measured more attempts than the old version had.
    """
    baselines = {a.sha for a in attempts if a.experiment == 0}
    per_device: dict[str, set] = {}
    for (device, _, _), slot in groups.items():
        per_device.setdefault(device, set()).update(slot)

    def key(kv):
        (device, _, _), slot = kv
        latest = max(w for _, w, _ in slot.values())
        has_baseline = bool(baselines & set(slot))
        return (len(per_device[device]), has_baseline, latest if has_baseline else len(slot), latest)

    return key


def recency(a) -> tuple:
    return (a.time, a.experiment, a.attempt)


def ranked(attempts) -> tuple[list, str]:
    """Correct attempts, best first, and the rule that ordered them (in words)."""
    group = gpu_group(attempts)
    if group is not None:
        order = [a for a, _ in sorted(group.entries, key=lambda e: (e[1], -e[0].time))]
        through = f" through {group.evaluator}" if group.evaluator else ""
        return order, GPU_RULE.format(device=group.device, count=len(order), harness=group.harness or "unknown",
                                      through=through)
    ok = sorted((a for a in attempts if a.ok), key=recency, reverse=True)
    return ok, CPU_RULE


def best(attempts):
    order, _ = ranked(attempts)
    return order[0] if order else None


def ranking_rule(attempts) -> str:
    return ranked(attempts)[1]


def has_gpu_timings(attempts) -> bool:
    return gpu_group(attempts) is not None
