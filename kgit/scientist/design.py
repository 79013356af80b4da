"""Design: avenues, plans, the pick and the updated lab notebook, from the base (and
reference) code, what earlier experiments found and the lessons so far.

kgit never drops a plan for looking like an earlier one: the designer sees the
history and decides.
"""

from __future__ import annotations

from kgit.archive import buildfacts, notebook
from kgit.scientist import prompts
from kgit.scientist.answers import ask_json, design
from kgit.scientist.view import ArchiveView
from kgit_harness import kernelsplit

HISTORY_CHARS = 12_000


def history(attempts, limit: int = HISTORY_CHARS, view: ArchiveView | None = None) -> str:
    """One line per experiment, newest first: hypothesis and how its attempts ended."""
    view = view or ArchiveView(attempts)
    by_experiment: dict[int, list] = {}
    for a in attempts:
        if not a.is_baseline:
            by_experiment.setdefault(a.experiment, []).append(a)
    lines = []
    for number in sorted(by_experiment, reverse=True):
        tries = sorted(by_experiment[number], key=lambda a: a.attempt)
        lines.append(f"- experiment {number} (base {(tries[0].base or '')[:10]}): {' '.join(tries[0].hypothesis.split())}"
                     f" -> {view.outcome(tries)}")
    text: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) > limit:
            text.append(f"- ... and {len(lines) - len(text)} older experiments")
            break
        text.append(line)
        used += len(line) + 1
    return "\n".join(text) or "No experiments yet: only the baseline was measured."


BASE_SHAPES = 20  # more shapes than this: the slowest ones only


def timed_ancestor(view: ArchiveView, attempt, limit: int = 50):
    """(the nearest attempt up `attempt`'s chain of bases timed on the ranking GPU, steps), or (None, 0)."""
    seen, steps = set(), 0
    while attempt is not None and attempt.base and attempt.sha not in seen and steps < limit:
        seen.add(attempt.sha)
        attempt, steps = view.by_sha.get(attempt.base), steps + 1
        if attempt is not None and view.comparable_times(attempt):
            return attempt, steps
    return None, 0


class Rates:
    """A shape's achieved FLOP/s and bytes/s from task.yml's `flops` and `bytes`, against the
    ranking device's datasheet peaks (harness/peaks.py): how far from which roof."""

    def __init__(self, task, device: str):
        from kgit_harness import peaks, problem

        self.task, self.peak = task, peaks.lookup(device)
        self.shapes = {problem.shape_key(s): s for s in task.shapes("benchmarks", True)} if task is not None else {}

    def header(self) -> str:
        p = self.peak
        against = (f", against {p.name}'s {p.source} peaks ({p.flops_per_s / 1e12:.0f} TFLOP/s, the fastest dense "
                   f"precision; {p.bytes_per_s / 1e12:.1f} TB/s): the larger fraction is the nearer roof"
                   if p and p.flops_per_s and p.bytes_per_s else " (no peaks are known for this device)")
        return f"In brackets: the rate the timed mean achieves by task.yml's flops and bytes{against}."

    def text(self, key: str, us: float) -> str:
        shape = self.shapes.get(key)
        if shape is None or us <= 0:
            return ""
        flops, nbytes = self.task.work(shape)
        parts = []
        for amount, unit, scale, peak in ((flops, "TFLOP/s", 1e12, self.peak and self.peak.flops_per_s),
                                          (nbytes, "TB/s", 1e12, self.peak and self.peak.bytes_per_s)):
            if amount:
                rate = amount / (us * 1e-6)
                parts.append(f"{rate / scale:.{1 if unit == 'TFLOP/s' else 2}f} {unit}"
                             + (f", {100 * rate / peak:.1f}% of peak" if peak else ""))
        return f" [{'; '.join(parts)}]" if parts else ""

    def __bool__(self) -> bool:
        return bool(self.shapes) and bool(self.task.flops or self.task.bytes)


def base_times(view: ArchiveView, sha: str | None, limit: int = BASE_SHAPES, task=None) -> str:
    """The base's per-shape times on the ranking GPU, slowest first, beside the baseline's, with
    the per-kernel split where the measurement kept one and the rates where task.yml gives the work."""
    if not view.gpu:
        return "No GPU timings exist yet: the base's speed on the benchmark shapes is unknown."
    base = view.by_sha.get(sha)
    times = view.comparable_times(base) if base is not None else {}
    intro = []
    if not times:
        ancestor, steps = timed_ancestor(view, base)
        if ancestor is None:
            return f"The base has not been timed on {view.device} yet (the ranking device)."
        # Within a round nothing new is timed: the nearest timed ancestor keeps the cost model in view.
        intro = [f"The base has not been timed on {view.device} yet (the ranking device). Its nearest timed "
                 f"ancestor, {ancestor.experiment}.{ancestor.attempt} ({ancestor.sha[:10]}), {steps} base step"
                 f"{'s' if steps > 1 else ''} up the chain of bases, was; its figures follow, not the base's."]
        base, sha, times = ancestor, ancestor.sha, view.comparable_times(ancestor)
    baseline = next((a for a in view.attempts if a.is_baseline), None)
    before = view.comparable_times(baseline) if baseline is not None and baseline.sha != sha else {}
    order = sorted(times, key=times.get, reverse=True)
    splits = view.comparable_kernels(base)
    bound = view.launch_bound(base)
    calls = view.per_call(base)
    lines = intro + [f"Mean time per benchmark shape on {view.device} (harness {view.harness}), slowest first"
                     + (", with the baseline's time and the speedup over it:" if before else ":")]
    rates = Rates(task, view.device)
    if splits:
        lines.append("After `=`: the device kernels of one extra, untimed call of the base per shape (torch.profiler, "
                     "as the candidate's process reported them), with launches and device time; kernel time only, "
                     "so it can sum below the timed mean.")

    if rates:
        lines.append(rates.header())
    for key in order[:limit]:
        line = f"- {key}: {times[key]:.1f} us"
        if splits.get(key):
            line += f" = {kernelsplit.line(splits[key])}"
        if before.get(key):
            line += f" (baseline {before[key]:.1f} us, {before[key] / times[key]:.2f}x)"
        if key in calls:
            device_us, host_us = calls[key]["device_us"], calls[key]["host_us"]
            line += (f"; device {device_us:.1f} us, host {host_us:.1f} us a call"
                     + (" (launch-bound)" if host_us > device_us else ""))
        elif key in bound:
            line += (f"; launch-bound: the GPU took {bound[key]['gpu_us']:.1f} us, the call's host side "
                     f"{bound[key]['host_us']:.1f} us")
        if rates:
            line += rates.text(key, times[key])
        lines.append(line)
    if len(order) > limit:
        lines.append(f"- ... and {len(order) - limit} faster shapes")
    if not splits:
        # Said, not left out: the model must not read its absence as "no kernels ran".
        lines.append(f"No per-kernel split was kept for this measurement of the base (evaluator.kernel_split was "
                     f"off, or the split failed); `kgit remeasure {sha[:10]}` on {view.device} takes one.")
    if bound:
        lines.append(f"{len(bound)} shape(s) are launch-bound: their time is the harness's clock over back-to-back "
                     "calls, host work included (allocations, copies, descriptor set-up and launches in the "
                     "Python wrapper), because the GPU finished sooner than the host could issue the next call. "
                     "Less host work per call helps there.")
    return "\n".join(lines)


def prompt(repo_root, selection, base_files, reference_files, attempts, pick, lessons: list[str],
           declared=None, task=None) -> str:
    view = ArchiveView(attempts)
    return prompts.render("design", repo_root, base=selection.base[:10], reason=selection.reason,
                          base_code=prompts.code_block(base_files),
                          reference=(selection.reference or "none")[:10],
                          reference_code=prompts.reference_block(base_files, reference_files),
                          figures=view.explanation(), history=history(attempts, view=view),
                          notebook=notebook.text(lessons), pick=pick,
                          base_times=base_times(view, selection.base, task=task),
                          targets=buildfacts.base_facts(attempts, selection.base, declared))


def ask(client, messages: list[dict], pick: int):
    """(Design or None, replies, error)."""
    return ask_json(client, "design", messages, lambda doc: design(doc, pick))
