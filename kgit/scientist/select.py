"""Select: pick the base (and a reference) from a compact table of the archive.

The table keeps to a token budget however large the archive grows: the best lines,
the winner of each shape and the recent failures come first, then the rest, newest
first, until the budget is spent.
"""

from __future__ import annotations

from kgit.archive import measure
from kgit.evaluation import buildfacts
from kgit.scientist import prompts
from kgit.scientist.answers import Selection, ask_json, selection

CHARS_PER_TOKEN = 4  # a rough figure for English and code; only sizes the table
BEST_ROWS, FAILURE_ROWS = 8, 8


def row(a) -> str:
    times = " ".join(f"{k}:{v:.1f}" for k, v in a.times.items())
    geomean = f"{a.geomean:.1f}" if a.geomean else "-"
    vs = f"{a.speedup_baseline:.2f}x" if a.speedup_baseline else "-"
    hypothesis = " ".join(a.hypothesis.split())[:140]
    line = (f"{a.sha[:10]} | {a.experiment}.{a.attempt} | {(a.base or '-')[:10]} | {a.status} | {geomean} | "
            f"{vs} | {times or '-'} | {hypothesis}")
    if a.targets:  # build facts per target GPU (issue 14)
        line += " | targets: " + buildfacts.short(a.targets)
    if a.raw_notes:  # re-measured: the latest geomean per device and the spread of repeats
        per_device = measure.by_device(a)
        if len(per_device) > 1 or any(d["n"] > 1 for d in per_device.values()):
            line += " | remeasured: " + "; ".join(
                f"{dev} {d['latest_us']:.1f} (n={d['n']}, spread {100 * (d['spread'] or 0):.1f}%)"
                for dev, d in per_device.items())
    return line


def archive_table(attempts, token_budget: int) -> tuple[str, int]:
    """The table text and how many attempts it shows."""
    ok = sorted((a for a in attempts if a.ok), key=lambda a: -(a.speedup_baseline or 0))
    winners = []
    for key in sorted({k for a in ok for k in a.times}):
        winners.append(min((a for a in ok if key in a.times), key=lambda a: a.times[key]))
    failures = [a for a in sorted(attempts, key=lambda a: -a.time) if not a.ok][:FAILURE_ROWS]
    rest = sorted(attempts, key=lambda a: -a.time)
    sections = [("best", ok[:BEST_ROWS]), ("per-shape winners", winners), ("recent failures", failures),
                ("all others, newest first", rest)]
    budget = token_budget * CHARS_PER_TOKEN
    shown, out = set(), []
    for title, group in sections:
        lines = []
        for a in group:
            if a.sha in shown:
                continue
            line = row(a)
            if budget - len(line) < 0:
                break
            budget -= len(line) + 1
            shown.add(a.sha)
            lines.append(line)
        if lines:
            out.append(f"## {title}\n" + "\n".join(lines))
    return "\n\n".join(out), len(shown)


def prompt(repo_root, task_text: str, attempts, best, token_budget: int) -> str:
    table, shown = archive_table(attempts, token_budget)
    return prompts.render("select", repo_root, task=task_text, archive=table, count=len(attempts), shown=shown,
                          best=best.sha[:10] if best else "none")


def choose(client, repo_root, task_text: str, attempts, best, token_budget: int):
    """(Selection, replies, note): asks once, re-asks with the error, then falls back to the best."""
    if client.model("select") == "offline":
        return Selection(best.sha, None, "the best correct attempt so far (offline selector)"), [], ""
    text = prompt(repo_root, task_text, attempts, best, token_budget)
    shas = [a.sha for a in attempts]
    chosen, replies, error = ask_json(client, "select", text, lambda doc: selection(doc, shas))
    if chosen is None:
        return (Selection(best.sha, None, f"fallback to the best attempt: the selector's answers were unusable "
                                          f"({error})"), replies, error)
    return chosen, replies, ""
