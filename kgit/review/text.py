"""Text views of the archive: the log table, one attempt, per-shape comparisons."""

from __future__ import annotations

from tabulate import tabulate

from kgit.problems import shipped
from kgit.problems import load_task
from kgit.costs import unpriced, usd


def num(value, fmt="{:.1f}"):
    """A number for a table cell; "" for a missing one."""
    return "" if value is None else fmt.format(value)


_num = num


def _short(text: str, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def log_table(attempts) -> str:
    from kgit.archive import figures

    group = figures.gpu_group(attempts)
    on_gpu = {a.sha: g for a, g in group.entries} if group else {}
    baseline = next((a for a in attempts if a.is_baseline), None)
    rows = []
    for a in sorted(attempts, key=lambda a: (a.experiment, a.attempt)):
        measured = figures.describe(a.timing, a.device, figures.attempt_noise(a)) if a.ok else ""
        verdict = figures.attempt_verdict(a, attempts).word if a.ok and not a.is_baseline else ""
        # An interpreter timing says nothing about speed: its ratios are left blank, not shown as speedups.
        timed = a.ok and not figures.is_interpreter(a.timing, a.device)
        row = [a.experiment, a.attempt, a.branch, a.sha[:10], a.status, _num(a.geomean),
               _num(a.speedup if timed else None, "{:.2f}x"), verdict,
               _num(a.speedup_baseline if timed else None, "{:.2f}x"), measured]
        if group:
            base_us = on_gpu.get(baseline.sha) if baseline else None
            us = on_gpu.get(a.sha)
            row += [_num(us, "{:.2f}"), _num(base_us / us if us and base_us and not a.is_baseline else None,
                                              "{:.2f}x")]
        rows.append(row + [_short(a.hypothesis, 50)])
    headers = ["exp", "att", "branch", "sha", "status", "geomean us", "vs base", "verdict", "vs baseline",
               "measured on"]
    if group:
        headers += [f"{group.device} us", f"vs baseline on {group.device}"]
    # disable_numparse: tabulate would print 1331040.0 as 1.33104e+06.
    return tabulate(rows, headers=headers + ["hypothesis"], tablefmt="simple", disable_numparse=True)


def best_lines(attempts, attempt) -> list[str]:
    """What `kgit best` prints: the attempt with the figures of the device that ranks it, then the rule."""
    from kgit.archive import figures

    group = figures.gpu_group(attempts)
    if group is not None:
        device = group.device
        on_device = {a.sha: g for a, g in group.entries}
        baseline = next((a for a in attempts if a.is_baseline), None)
        us, base_us = on_device.get(attempt.sha), on_device.get(baseline.sha) if baseline else None
        figure = f"{us:.2f} us on {device}" + (f"  {base_us / us:.2f}x vs baseline there" if base_us and us else "")
    elif figures.is_interpreter(attempt.timing, attempt.device):
        figure = "correct (interpreter: not timed for speed)"
    else:
        figure = f"{_num(attempt.geomean, '{:.2f}')} us  {attempt.speedup_baseline or 1:.2f}x vs baseline"
    return [f"{attempt.sha}  {attempt.branch}  {figure}  {attempt.hypothesis}", f"rule: {figures.rule(attempts)}"]


def devices_table(attempts) -> str:
    """One row per attempt and device: the latest geomean and the spread of repeated measurements,
    beside the attempt's static build facts per target."""
    from kgit.archive.measure import by_device
    from kgit.evaluation.buildfacts import short

    rows = []
    for a in sorted(attempts, key=lambda a: (a.experiment, a.attempt)):
        for device, m in by_device(a).items():
            rows.append([a.experiment, a.attempt, a.sha[:10], device, _num(m["latest_us"], "{:.2f}"), m["n"],
                         _num(m["min_us"], "{:.2f}"), _num(m["max_us"], "{:.2f}"), _num(m["spread"], "{:.1%}"),
                         short(a.targets)])
    headers = ["exp", "att", "sha", "device", "latest us", "n", "min us", "max us", "spread", "build targets"]
    return tabulate(rows, headers=headers, tablefmt="simple")


def shape_table(result, before: dict | None = None) -> str:
    """Per-shape statistics of one harness `Result`, against `before` times (key -> us) when given."""
    ranking = result.ranking or "mean"
    rows = []
    # Beside the ranked figure: the kernel's device time (flushed events) and the host time a call (GPU).
    per_call = any(s.get("device_us") is not None for s in result.shapes)
    for s in result.shapes:
        row = [s["key"], _num(s.get("mean_us"), "{:.2f}"), _num(s.get("median_us"), "{:.2f}"),
               _num(s.get("min_us"), "{:.2f}"), _num(s.get("std_us"), "{:.2f}"), s.get("n")]
        if per_call:
            row += [_num(s.get("device_us"), "{:.2f}"), _num(s.get("host_us"), "{:.2f}")]
        if before is not None:
            b = before.get(s["key"])
            value = s.get(ranking + "_us")
            row += [_num(b, "{:.2f}"), _num(b / value if b and value else None, "{:.2f}x")]
        rows.append(row)
    headers = ["shape", "mean us", "median us", "min us", "std us", "n"]
    if per_call:
        headers += ["device us", "host us"]
    if before is not None:
        headers += ["base us", "speedup"]
    return tabulate(rows, headers=headers, tablefmt="simple")


def result_summary(judged) -> str:
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
        lines += kernel_lines({s["key"]: s["kernels"]["rows"] for s in result.shapes
                               if (s.get("kernels") or {}).get("rows")}, result.device)
    if result.error:
        lines += ["", "error:", result.error.rstrip()[-3000:]]
    from kgit.evaluation.buildfacts import trailers

    lines += [f"{key[len('Kgit-'):].lower()}: {value}" for key, value in trailers(result)]
    return "\n".join(lines)


def kernel_lines(splits: dict, device: str | None) -> list[str]:
    """The per-kernel split of one call per shape (harness/kernelsplit.py), or nothing."""
    from kgit_harness.kernelsplit import line

    if not splits:
        return []
    return (["", f"device kernels of one call per shape on {device} (torch.profiler, candidate-reported):"]
            + [f"  {key}: {line(rows)}" for key, rows in splits.items()])


def latest_kernels(attempt) -> tuple[dict, str | None]:
    """The newest per-kernel split kept for `attempt` (a remeasure note, or a kernels note
    beside a GPU-evaluated commit) and its device; ({}, None) when none was kept."""
    kept = [n for n in attempt.notes if n.get("kernels")]
    if not kept:
        return {}, None
    newest = max(kept, key=lambda n: n.get("when", 0))
    return newest["kernels"], newest.get("device_tag") or newest.get("device")


def attempt_text(attempt, body: str, base_times: dict, diffstat: str) -> str:
    lines = [
        f"{attempt.sha}  {attempt.branch}  attempt {attempt.attempt}",
        f"subject:    {attempt.subject}",
        f"status:     {attempt.status}",
        f"hypothesis: {attempt.hypothesis}",
        f"base:       {attempt.base or '-'}",
        f"device:     {attempt.device} ({attempt.timing}, protocol {attempt.protocol or 'kgit-adaptive'})",
        f"geomean:    {_num(attempt.geomean, '{:.2f} us')}   vs base {_num(attempt.speedup, '{:.2f}x')}   "
        f"vs baseline {_num(attempt.speedup_baseline, '{:.2f}x')}",
        f"model:      {attempt.model}" + (f"   cost {usd(attempt.cost, 6)}" if attempt.cost is not None else
                                           "   cost unpriced" if unpriced(attempt) else "")
        + (f"   {attempt.tokens:.0f} tokens" if attempt.tokens else "")
        + (f"   run {attempt.run}" if attempt.run else ""),
    ]
    for note in attempt.notes:  # re-measurements; a failed one shows its reason (the excerpt is in the note)
        if note.get("kind"):
            continue  # a profile or a kernel split beside a measurement, not one
        figure = f"{note['geomean_us']:.2f} us" if note.get("geomean_us") else note.get("status") or "?"
        lines.append(f"remeasured: {note.get('device_tag') or note.get('device') or 'unknown'}: {figure}"
                     + (f" under {note['protocol']}" if note.get("protocol") else "")
                     + (f" ({note['reason']})" if note.get("reason") else ""))
    from kgit.archive.measure import targets_of

    per_kernel = targets_of(attempt)
    for name, value in attempt.targets.items():
        lines.append(f"target:     {name} {value}")
        variants = per_kernel.get(name) or []
        if len(variants) > 1:  # the trailer is the worst of these
            lines += [f"              {kernel}: {facts}" for kernel, facts in variants]
    if body.strip():
        lines += ["", body.strip()]
    if attempt.times:
        rows = []
        for key, value in attempt.times.items():
            b = base_times.get(key)
            rows.append([key, f"{value:.2f}", _num(b, "{:.2f}"), _num(b / value if b else None, "{:.2f}x")])
        lines += ["", tabulate(rows, headers=["shape", "time us", "base us", "speedup"], tablefmt="simple")]
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
