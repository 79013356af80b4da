"""Text views of the archive: the log table, one attempt, per-shape comparisons."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tabulate import tabulate

from kgit.archive.notes import KernelsNote, Measurement
from kgit.costs import unpriced, usd
from kgit.problems import load_task, shipped


def num(value, fmt="{:.1f}"):
    """A number for a table cell; "" for a missing one."""
    return "" if value is None else fmt.format(value)


_num = num


def _short(text: str, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


# Columns that may be said once above the table when every row has the same cell there.
_FOLDED = ("measured on", "verdict")
# Columns left out when every row's cell is blank (an archive with no speed figures).
_DROPPED_BLANK = ("vs base", "verdict", "vs baseline")
_MIN_HYPOTHESIS = 16


def log_table(attempts, width: int | None = None, wide: bool = False) -> str:
    """The archive, one row per attempt, oldest experiment first.

    A column whose cell is the same on every row (the device and timing method of an
    interpreter-only archive) is said once on a line above the table, an empty one is left
    out, and the branch is left out (experiment N is kgit/N-...); the hypothesis is cut so
    that a row fits `width` characters. `wide`: every column on every row, nothing cut.
    """
    from kgit.archive import figures

    group = figures.gpu_group(attempts)
    on_gpu = {a.sha: g for a, g in group.entries} if group else {}
    baseline = next((a for a in attempts if a.is_baseline), None)
    gpu_us, gpu_vs = (f"{group.device} us", f"vs baseline on {group.device}") if wide and group else ("gpu us", "gpu vs baseline")
    rows = []
    for a in sorted(attempts, key=lambda a: (a.experiment, a.attempt)):
        # An interpreter timing says nothing about speed: no ratio, no verdict; its meaning is in "measured on".
        timed = a.ok and figures.timed(a)
        measured = figures.describe(a.timing, a.device, figures.attempt_noise(a)) if a.ok else ""
        row = {"exp": a.experiment, "att": a.attempt, "branch": a.branch, "sha": a.sha[:10], "status": a.status,
               "geomean us": _num(a.geomean_us), "vs base": _num(a.speedup if timed else None, "{:.2f}x"),
               "verdict": figures.attempt_verdict(a, attempts).word if timed and not a.is_baseline else "",
               "vs baseline": _num(a.speedup_baseline if timed else None, "{:.2f}x"), "measured on": measured}
        if group:
            base_us = on_gpu.get(baseline.sha) if baseline else None
            us = on_gpu.get(a.sha)
            row[gpu_us] = _num(us, "{:.2f}")
            row[gpu_vs] = _num(base_us / us if us and base_us and not a.is_baseline else None, "{:.2f}x")
        row["hypothesis"] = a.hypothesis
        rows.append(row)
    if not rows:
        return ""
    columns = list(rows[0])
    said = []
    if not wide:
        columns.remove("branch")
        for name in _DROPPED_BLANK:
            if all(not r[name] for r in rows):
                columns.remove(name)
        for name in _FOLDED:
            values = {r[name] for r in rows if r[name]}
            if name in columns and len(values) == 1 and all(r[name] or r["status"] != "ok" for r in rows):
                columns.remove(name)
                said.append(f"{name}, every correct attempt: {values.pop()}")
        if group:
            said.append(f"gpu: {group.device}, the device that ranks the attempts (harness {group.harness or 'unknown'})")
        said.append("experiment N is the branch kgit/N-...; `kgit log --wide` shows every column")
    cut = _hypothesis_width(rows, columns, width) if not wide else None
    body = [[_short(r[c], cut or len(r[c])) if c == "hypothesis" else r[c] for c in columns] for r in rows]
    # disable_numparse: tabulate would print 1331040.0 as 1.33104e+06.
    table = tabulate(body, headers=columns, tablefmt="simple", disable_numparse=True)
    return "\n".join(said + ([""] if said else []) + [table])


def _hypothesis_width(rows: list[dict], columns: list[str], width: int | None) -> int | None:
    """What is left of `width` for the hypothesis column once the others are laid out (tabulate
    pads a header by two characters, and "simple" tables put two spaces between columns)."""
    if not width:
        return None
    used = sum(max(len(c) + 2, *(len(str(r[c])) for r in rows)) + 2 for c in columns if c != "hypothesis")
    return max(_MIN_HYPOTHESIS, width - used)


def best_lines(attempts, attempt) -> list[str]:
    """What `kgit best` prints: the attempt with the figures of the device that ranks it, then the rule.

    With no GPU timing in the archive nothing is ranked by speed: the attempt is named for
    what it is, the latest correct one, beside what kgit can say and what a GPU would add.
    """
    from kgit.archive import figures

    group = figures.gpu_group(attempts)
    if group is not None:
        device = group.device
        on_device = {a.sha: g for a, g in group.entries}
        baseline = next((a for a in attempts if a.is_baseline), None)
        us, base_us = on_device.get(attempt.sha), on_device.get(baseline.sha) if baseline else None
        figure = f"{us:.2f} us on {device}" + (f"  {base_us / us:.2f}x vs baseline there" if base_us and us else "")
    elif not figures.timed(attempt):
        tried = [a for a in attempts if not a.is_baseline]
        correct = sum(a.ok for a in tried)
        return [f"{attempt.sha}  {attempt.branch}  latest correct attempt (not timed for speed)  {attempt.hypothesis}",
                f"rule: {figures.ranking_rule(attempts)}.",
                f"What kgit can rank here: correctness only ({correct} of {len(tried)} attempt(s) correct); every "
                f"timing in the archive comes from {figures.INTERPRETER_MEANING}.",
                figures.GPU_WOULD_ADD]
    else:
        figure = f"{_num(attempt.geomean_us, '{:.2f}')} us  {attempt.speedup_baseline or 1:.2f}x vs baseline"
    return [f"{attempt.sha}  {attempt.branch}  {figure}  {attempt.hypothesis}", f"rule: {figures.ranking_rule(attempts)}"]


def devices_table(attempts) -> str:
    """One row per attempt and device: the latest geomean and the spread of repeated measurements,
    beside the attempt's static build facts per target."""
    from kgit.archive.buildfacts import short
    from kgit.archive.measure import by_device

    rows = []
    for a in sorted(attempts, key=lambda a: (a.experiment, a.attempt)):
        for device, m in by_device(a).items():
            rows.append([a.experiment, a.attempt, a.sha[:10], device, _num(m["latest_us"], "{:.2f}"), m["n"],
                         _num(m["min_us"], "{:.2f}"), _num(m["max_us"], "{:.2f}"), _num(m["spread"], "{:.1%}"),
                         short(a.targets)])
    headers = ["exp", "att", "sha", "device", "latest us", "n", "min us", "max us", "spread", "build targets"]
    return tabulate(rows, headers=headers, tablefmt="simple")


def shape_table(result, before: dict | None = None) -> str:
    """Per-shape statistics of one harness `Result`, against `before` times (key -> us) when given;
    an interpreter result gets the base's times but no ratio (they are not speed figures)."""
    from kgit.archive import figures

    ranking = result.ranking or "mean"
    ratios = not figures.is_interpreter(result.timing, result.device)
    rows = []
    # Beside the ranked figure: the kernel's device time (flushed events) and the host time a call (GPU).
    per_call = any(s.device_us is not None for s in result.shapes)
    for s in result.shapes:
        row = [s.key, _num(s.mean_us, "{:.2f}"), _num(s.median_us, "{:.2f}"),
               _num(s.min_us, "{:.2f}"), _num(s.std_us, "{:.2f}"), s.n]
        if per_call:
            row += [_num(s.device_us, "{:.2f}"), _num(s.host_us, "{:.2f}")]
        if before is not None:
            b = before.get(s.key)
            value = s.statistic(ranking)
            row += [_num(b, "{:.2f}")] + ([_num(b / value if b and value else None, "{:.2f}x")] if ratios else [])
        rows.append(row)
    headers = ["shape", "mean us", "median us", "min us", "std us", "n"]
    if per_call:
        headers += ["device us", "host us"]
    if before is not None:
        headers += ["base us"] + (["speedup"] if ratios else [])
    return tabulate(rows, headers=headers, tablefmt="simple")


def recorded_text(judged, base_times: dict, verbose: bool = False) -> str:
    """What `kgit record` prints of its evaluation: the per-shape table against the base (an
    interpreter result without ratios, and said so), or the summary of one that has no shapes."""
    from kgit.archive import figures

    result = judged.result
    if not result.shapes:
        return result_summary(judged, verbose)
    lines = [shape_table(result, base_times)]
    if figures.is_interpreter(result.timing, result.device):
        lines.append(f"\ntimings: from {figures.INTERPRETER_MEANING}; no ratio is shown.")
    if result.error:
        lines += ["", "error:", error_text(result.error, verbose)]
    return "\n".join(lines)


def error_text(error: str, verbose: bool = False) -> str:
    """A candidate's error for the terminal: its place in the kernel first, kgit's frames left
    out unless `verbose` (kgit/excerpts.py), at most its last 3000 characters."""
    from kgit.excerpts import in_user_terms

    return in_user_terms(error.rstrip()[-3000:], verbose)


def result_summary(judged, verbose: bool = False) -> str:
    """One evaluation (kgit.evaluation.evaluated.Evaluation) for the terminal."""
    result = judged.result
    lines = [f"status: {result.status}" + (f" ({result.reason})" if result.reason else ""),
             f"device: {result.device}  timing: {result.timing}  protocol: {result.protocol or 'kgit-adaptive'}  "
             f"ranking: {result.ranking}"]
    if result.timing == "interpreter":
        lines.append("note: measured in the Triton CPU interpreter; the figures say nothing about GPU speed.")
    missing = (judged.sandbox or {}).get("missing")
    if missing:
        lines.append("sandbox: not applied: " + "; ".join(missing) + " (docs/sandbox.md)")
    if result.geomean_us is not None:
        lines.append(f"geomean: {result.geomean_us:.2f} us")
    if result.shapes:
        lines += ["", shape_table(result)]
        lines += kernel_lines({s.key: s.kernels["rows"] for s in result.shapes
                               if s.kernels and s.kernels.get("rows")}, result.device)
    if result.error:
        lines += ["", "error:", error_text(result.error, verbose)]
    from kgit.archive.buildfacts import trailers

    lines += [f"{key[len('Kgit-'):].lower()}: {value}" for key, value in trailers(result)]
    return "\n".join(lines)


def kernel_lines(splits: Mapping[str, list[list[Any]]], device: str | None) -> list[str]:
    """The per-kernel split of one call per shape (harness/kernelsplit.py), or nothing."""
    from kgit_harness.kernelsplit import line

    if not splits:
        return []
    return (["", f"device kernels of one call per shape on {device} (torch.profiler, candidate-reported):"]
            + [f"  {key}: {line(rows)}" for key, rows in splits.items()])


def latest_kernels(attempt) -> tuple[Mapping[str, list[list[Any]]], str | None]:
    """The newest per-kernel split kept for `attempt` (a remeasure note, or a kernels note
    beside a GPU-evaluated commit) and its device; ({}, None) when none was kept."""
    kept: list[Measurement | KernelsNote] = [n for n in attempt.notes.measurements if n.kernels]
    kept += [n for n in attempt.notes.kernels if n.kernels]
    if not kept:
        return {}, None
    newest = max(kept, key=lambda n: n.when)
    tag = newest.device_tag if isinstance(newest, Measurement) else None
    return newest.kernels or {}, tag or newest.device


def _body_in_user_terms(body: str, verbose: bool) -> str:
    """The commit body with its error excerpt paragraph in the user's terms (`error_text`)."""
    out = []
    for paragraph in body.split("\n\n"):
        if paragraph.startswith("Error excerpt:"):
            excerpt = "\n".join(line[4:] for line in paragraph.splitlines()[1:])
            shown = error_text(excerpt, verbose).splitlines()
            paragraph = "Error excerpt:\n" + "\n".join(("    " + line).rstrip() for line in shown)
        out.append(paragraph)
    return "\n\n".join(out)


def attempt_text(attempt, body: str, base_times: dict, diffstat: str, verbose: bool = False) -> str:
    """What `kgit show` prints; an interpreter attempt's timings come without ratios, an error
    excerpt in the user's terms (the whole traceback with `verbose`)."""
    from kgit.archive import figures

    timed = figures.timed(attempt)
    lines = [
        f"{attempt.sha}  {attempt.branch}  attempt {attempt.attempt}",
        f"subject:    {attempt.subject}",
        f"status:     {attempt.status}",
        f"hypothesis: {attempt.hypothesis}",
        f"base:       {attempt.base or '-'}",
        f"device:     {attempt.device} ({attempt.timing}, protocol {attempt.protocol or 'kgit-adaptive'})",
        f"geomean:    {_num(attempt.geomean_us, '{:.2f} us')}   vs base {_num(attempt.speedup, '{:.2f}x')}   "
        f"vs baseline {_num(attempt.speedup_baseline, '{:.2f}x')}" if timed else
        f"geomean:    {_num(attempt.geomean_us, '{:.2f} us')} (from {figures.INTERPRETER_MEANING}; no ratio is shown)",
        f"model:      {attempt.model}" + (f"   cost {usd(attempt.cost, 6)}" if attempt.cost is not None else
                                           "   cost unpriced" if unpriced(attempt) else "")
        + (f"   {attempt.tokens:.0f} tokens" if attempt.tokens else "")
        + (f"   run {attempt.run}" if attempt.run else ""),
    ]
    for note in attempt.notes.measurements:  # a failed one shows its reason (the excerpt is in the note)
        figure = f"{note.geomean_us:.2f} us" if note.geomean_us else note.status or "?"
        lines.append(f"remeasured: {note.place}: {figure}"
                     + (f" under {note.protocol}" if note.protocol else "")
                     + (f" ({note.reason})" if note.reason else ""))
    from kgit.archive.measure import targets_of

    per_kernel = targets_of(attempt)
    for name, value in attempt.targets.items():
        lines.append(f"target:     {name} {value}")
        variants = per_kernel.get(name) or []
        if len(variants) > 1:  # the trailer is the worst of these
            lines += [f"              {kernel}: {facts}" for kernel, facts in variants]
    if body.strip():
        lines += ["", _body_in_user_terms(body.strip(), verbose)]
    if attempt.times:
        rows = []
        for key, value in attempt.times.items():
            b = base_times.get(key)
            rows.append([key, f"{value:.2f}", _num(b, "{:.2f}")] + ([_num(b / value if b else None, "{:.2f}x")]
                                                                     if timed else []))
        headers = ["shape", "time us", "base us"] + (["speedup"] if timed else [])
        lines += ["", tabulate(rows, headers=headers, tablefmt="simple")]
    lines += kernel_lines(*latest_kernels(attempt))
    if diffstat.strip():
        lines += ["", diffstat.rstrip()]
    return "\n".join(lines)


def problems_table() -> str:
    rows = []
    for name, path in shipped().items():
        task = load_task(path)
        rows.append([name, len(task.tests), len(task.benchmarks), task.summary])
    return tabulate(rows, headers=["problem", "tests", "benchmarks", "summary"], tablefmt="simple")
