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


def prompt(repo_root, selection, base_files, reference_files, attempts, pick, lessons: list[str],
           declared=None) -> str:
    view = ArchiveView(attempts)
    return prompts.render("design", repo_root, base=selection.base[:10], reason=selection.reason,
                          base_code=prompts.code_block(base_files),
                          reference=(selection.reference or "none")[:10],
                          reference_code=prompts.code_block(reference_files) if reference_files else "(none chosen)",
                          figures=view.explanation(), history=history(attempts, view=view),
                          notebook=notebook.text(lessons), pick=pick,
                          targets=buildfacts.base_facts(attempts, selection.base, declared))


def ask(client, messages: list[dict], pick: int):
    """(Design or None, replies, error)."""
    return ask_json(client, "design", messages, lambda doc: design(doc, pick))
