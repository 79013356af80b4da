"""Select: pick the base (and a reference) from a compact table of the archive.

The table keeps to a token budget however large the archive grows: the best lines
(by kgit's one ranking rule), the winner of each shape and the unfixed failures come
first, then the rest, newest first, until the budget is spent. Interpreter timings are
never shown as performance (kgit/scientist/view.py).
"""

from __future__ import annotations

from kgit.archive import buildfacts, figures, measure, notebook
from kgit.archive import trailers as tr
from kgit.scientist import prompts
from kgit.scientist.answers import Selection, ask_json, selection
from kgit.scientist.view import ArchiveView

CHARS_PER_TOKEN = 4  # a rough figure for English and code; only sizes the table
BEST_ROWS, FAILURE_ROWS = 8, 8
TARGET_ERROR_CHARS = 100  # of a failing target's first compiler line, per row


def row(a, view: ArchiveView | None = None) -> str:
    view = view or ArchiveView([a])
    hypothesis = " ".join(a.hypothesis.split())[:140]
    line = (f"{a.sha[:10]} | {a.experiment}.{a.attempt} | {(a.base or '-')[:10]} | {view.status(a)} | "
            f"{view.timing(a)} | {hypothesis}")
    times = view.comparable_times(a) if a.ok else {}
    if times:
        bound = view.launch_bound(a)
        # A launch-bound shape's figure includes the host's launch: its GPU time beside it.
        line += " | per shape: " + " ".join(
            f"{k}:{v:.1f}" + (f"(GPU {bound[k]['gpu_us']:.1f}, launch-bound)" if k in bound else "")
            for k, v in times.items())
    if a.targets:  # build facts per target GPU (docs/targets.md)
        line += " | targets: " + target_cells(a.targets)
    if a.raw_notes:  # re-measured: the latest geomean per GPU and the spread of repeats (its repeatability)
        per_device = {dev: d for dev, d in measure.by_device(a).items() if not figures.is_interpreter(None, d["device"])}
        if len(per_device) > 1 or any(d["n"] > 1 for d in per_device.values()):
            line += " | remeasured: " + "; ".join(
                f"{dev} {d['latest_us']:.1f} (n={d['n']}, spread {100 * (d['spread'] or 0):.1f}%)"
                for dev, d in per_device.items())
    return line


def target_cells(targets: dict[str, str]) -> str:
    """Build facts per target for a row; a failing target with the compiler's first line, cut
    short, so the selector need not pick a failing base to learn why it fails."""
    cells = []
    for name, value in targets.items():
        cell = buildfacts.short({name: value})
        why = "" if value.startswith("builds") else value.partition(":")[2].strip()
        cells.append(cell + (f": {tr.one_line(why, TARGET_ERROR_CHARS)}" if why else ""))
    return "; ".join(cells)


def archive_table(attempts, token_budget: int, view: ArchiveView | None = None) -> tuple[str, int]:
    """The table text and how many attempts it shows."""
    view = view or ArchiveView(attempts)
    newest = sorted(attempts, key=lambda a: (a.time, a.experiment, a.attempt), reverse=True)
    # A stopped attempt is a measured loser, not a failure waiting for a fix: it goes with the rest.
    failures = [a for a in newest if not a.ok and a.status != "stopped"]
    failures = ([a for a in failures if a.sha not in view.fixed_by] + [a for a in failures if a.sha in view.fixed_by])
    if view.gpu:
        winners = []
        timed = [a for a in view.order if view.comparable_times(a)]
        for key in sorted({k for a in timed for k in view.comparable_times(a)}):
            having = [a for a in timed if key in view.comparable_times(a)]
            winners.append(min(having, key=lambda a: view.comparable_times(a)[key]))
        sections = [(f"best on {view.device}", view.order[:BEST_ROWS]), (f"per-shape winners on {view.device}", winners)]
    else:
        sections = [("correct attempts, newest first", view.order[:BEST_ROWS])]
    sections += [("failures, unfixed first", failures[:FAILURE_ROWS]), ("all others, newest first", newest)]
    budget = token_budget * CHARS_PER_TOKEN
    shown, out = set(), []
    for title, group in sections:
        lines = []
        for a in group:
            if a.sha in shown:
                continue
            line = row(a, view)
            if budget - len(line) < 0:
                break
            budget -= len(line) + 1
            shown.add(a.sha)
            lines.append(line)
        if lines:
            out.append(f"## {title}\n" + "\n".join(lines))
    return "\n\n".join(out), len(shown)


def prompt(repo_root, attempts, token_budget: int, lessons: list[str]) -> str:
    view = ArchiveView(attempts)
    table, shown = archive_table(attempts, token_budget, view)
    return prompts.render("select", repo_root, archive=table, count=len(attempts), shown=shown,
                          figures=view.explanation(), ranking=f"kgit's ranking rule: {view.rule}.",
                          notebook=notebook.text(lessons))


def forced(attempts, best) -> Selection | None:
    """The selection when there is nothing to choose (only the baseline exists)."""
    if len(attempts) == 1 and best is not None:
        return Selection(best.sha, None, "the baseline is the only attempt so far")
    return None


def ask(client, messages: list[dict], attempts, best):
    """(Selection, replies, note): asks once, re-asks with the error, then falls back to the best."""
    shas = [a.sha for a in attempts]
    chosen, replies, error = ask_json(client, "select", messages, lambda doc: selection(doc, shas))
    if chosen is None:
        return (Selection(best.sha, None, f"fallback to the best attempt: the selector's answers were unusable "
                                          f"({error})"), replies, error)
    return chosen, replies, ""
