"""Design: avenues, plans and the pick, from the base code, the task, the knowledge
documents and what earlier experiments found.

kgit never drops a plan for looking like an earlier one: the designer sees the
history and decides.
"""

from __future__ import annotations

from kgit.evaluation import buildfacts
from kgit.scientist import prompts
from kgit.scientist.answers import ask_json, design

HISTORY_CHARS = 12_000


def history(attempts, limit: int = HISTORY_CHARS) -> str:
    """One line per experiment, newest first: hypothesis and how its attempts ended."""
    by_experiment: dict[int, list] = {}
    for a in attempts:
        if not a.is_baseline:
            by_experiment.setdefault(a.experiment, []).append(a)
    lines = []
    for number in sorted(by_experiment, reverse=True):
        tries = sorted(by_experiment[number], key=lambda a: a.attempt)
        best = max((a for a in tries if a.ok), key=lambda a: a.speedup or 0, default=None)
        outcome = (f"ok, {best.speedup:.2f}x vs its base" if best and best.speedup else
                   "ok" if best else "failed: " + ", ".join(a.status for a in tries))
        lines.append(f"- experiment {number} (base {(tries[0].base or '')[:10]}): {' '.join(tries[0].hypothesis.split())}"
                     f" -> {outcome}")
    text, used = [], 0
    for line in lines:
        if used + len(line) > limit:
            text.append(f"- ... and {len(lines) - len(text)} older experiments")
            break
        text.append(line)
        used += len(line) + 1
    return "\n".join(text) or "No experiments yet: only the baseline was measured."


def prompt(repo_root, task_text, base_sha, reason, base_files, attempts, knowledge_text, pick) -> str:
    return prompts.render("design", repo_root, task=task_text, base=base_sha[:10], reason=reason,
                          base_code=prompts.code_block(base_files), history=history(attempts),
                          knowledge=knowledge_text, pick=pick, targets=buildfacts.base_facts(attempts, base_sha))


def plans(client, prompt_text: str, pick: int):
    """(chosen plans or None, replies, error)."""
    result, replies, error = ask_json(client, "design", prompt_text, lambda doc: design(doc, pick))
    if result is None:
        return None, replies, error
    return [result.plans[i] for i in result.chosen], replies, None
