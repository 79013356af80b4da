"""Design: avenues, plans, the pick and the updated lab notebook, from the base (and
reference) code, what earlier experiments found and the lessons so far.

kgit never drops a plan for looking like an earlier one: the designer sees the
history and decides.
"""

from __future__ import annotations

from kgit.archive import notebook
from kgit.evaluation import buildfacts
from kgit.scientist import prompts
from kgit.scientist.answers import ask_json, design
from kgit.scientist.view import ArchiveView

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
    text, used = [], 0
    for line in lines:
        if used + len(line) > limit:
            text.append(f"- ... and {len(lines) - len(text)} older experiments")
            break
        text.append(line)
        used += len(line) + 1
    return "\n".join(text) or "No experiments yet: only the baseline was measured."


BASE_SHAPES = 20  # more shapes than this: the slowest ones only


def base_times(view: ArchiveView, sha: str | None, limit: int = BASE_SHAPES) -> str:
    """The base's per-shape times on the ranking GPU, slowest first, beside the baseline's."""
    if not view.gpu:
        return "No GPU timings exist yet: the base's speed on the benchmark shapes is unknown."
    base = view.by_sha.get(sha)
    times = view.comparable_times(base) if base is not None else {}
    if not times:
        return f"The base has not been timed on {view.device} yet (the ranking device)."
    baseline = next((a for a in view.attempts if a.is_baseline), None)
    before = view.comparable_times(baseline) if baseline is not None and baseline.sha != sha else {}
    order = sorted(times, key=times.get, reverse=True)
    bound = view.launch_bound(base)
    lines = [f"Mean time per benchmark shape on {view.device} (harness {view.harness}), slowest first"
             + (", with the baseline's time and the base's speedup over it:" if before else ":")]
    for key in order[:limit]:
        line = f"- {key}: {times[key]:.1f} us"
        if before.get(key):
            line += f" (baseline {before[key]:.1f} us, {before[key] / times[key]:.2f}x)"
        if key in bound:
            line += (f"; launch-bound: the GPU took {bound[key]['gpu_us']:.1f} us, the call's host side "
                     f"{bound[key]['host_us']:.1f} us")
        lines.append(line)
    if len(order) > limit:
        lines.append(f"- ... and {len(order) - limit} faster shapes")
    if bound:
        lines.append(f"{len(bound)} shape(s) are launch-bound: their time is the harness's clock over back-to-back "
                     "calls, host work included (allocations, copies, descriptor set-up and launches in the "
                     "Python wrapper, each torch op costing more under the harness's op guard), because the GPU "
                     "finished sooner than the host could issue the next call. Less host work per call helps there.")
    return "\n".join(lines)


def prompt(repo_root, selection, base_files, reference_files, attempts, pick, lessons: list[str],
           declared=None) -> str:
    view = ArchiveView(attempts)
    return prompts.render("design", repo_root, base=selection.base[:10], reason=selection.reason,
                          base_code=prompts.code_block(base_files),
                          reference=(selection.reference or "none")[:10],
                          reference_code=prompts.code_block(reference_files) if reference_files else "(none chosen)",
                          figures=view.explanation(), history=history(attempts, view=view),
                          notebook=notebook.text(lessons), pick=pick, base_times=base_times(view, selection.base),
                          targets=buildfacts.base_facts(attempts, selection.base, declared))


def ask(client, messages: list[dict], pick: int):
    """(Design or None, replies, error)."""
    return ask_json(client, "design", messages, lambda doc: design(doc, pick))
