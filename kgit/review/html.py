"""`kgit report`: one self-contained HTML file (figures inlined as base64 PNG, CSS
inline, no scripts, nothing fetched from the network) describing a campaign.

Each part is a <section> with a stable id (summary, progress, lineage, shapes,
references, hypotheses) so tests and people's tooling can find them.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from html import escape
from pathlib import Path

from kgit.archive import figures
from kgit.review import campaign as review
from kgit.review import plots

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #212121; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem;
       border-bottom: 1px solid #e0e0e0; padding-bottom: .2rem; }
.sub { color: #616161; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: .8rem; }
.card { background: #f5f7fa; border-radius: 8px; padding: .6rem 1rem; min-width: 9rem; }
.card b { display: block; font-size: 1.35rem; } .card span { color: #616161; font-size: .85rem; }
img { max-width: 100%; }
table { border-collapse: collapse; font-size: .88rem; width: 100%; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #eeeeee; vertical-align: top; }
th { background: #fafafa; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status { border-radius: 4px; padding: 0 .35rem; color: white; font-size: .8rem; white-space: nowrap; }
.note { background: #fff8e1; border-left: 4px solid #f9a825; padding: .4rem .8rem; }
code { font-size: .85rem; }
"""


def write(repo, task, out: Path, title: str | None = None) -> Path:
    """Render the report of `repo`'s archive into `out`; returns the path written."""
    campaign = review.load(repo, task)
    out = Path(out)
    out.write_text(render(campaign, title or (task.name if task else repo.root.name)), encoding="utf-8")
    return out


def open_in_browser(path: Path) -> bool:
    """Open the report in the default browser; False (and nothing run) where there is none.

    A Linux machine without a display (a GPU server over ssh) has no browser to show a
    page: xdg-open would only print why each of its methods failed, and Python's
    webbrowser would start a text browser inside the terminal.
    """
    import os
    import sys
    import webbrowser

    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        return webbrowser.open(Path(path).resolve().as_uri())
    except webbrowser.Error:
        return False


def render(campaign, title: str) -> str:
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        # Refuse every network load: the file must read the same offline, in a mail or an artifact store.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
        "style-src 'unsafe-inline'\">",
        f"<title>kgit report: {escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>kgit report: {escape(title)}</h1>",
        f'<p class="sub">generated {when} from the archive of {len(campaign.attempts)} commits</p>',
    ]
    if campaign.timed:
        parts += [_summary(campaign), _progress(campaign), _lineage(campaign), _shapes(campaign),
                  _references(campaign), _targets(campaign), _hypotheses(campaign), _notebook(campaign)]
    else:
        # No speed figure anywhere: correctness and lineage lead, and the report says what a GPU would add.
        parts += [_summary(campaign), _lineage(campaign), _hypotheses(campaign), _progress(campaign),
                  _shapes(campaign), _targets(campaign), _notebook(campaign)]
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)


def _notebook(c) -> str:
    if not c.notebook:
        return ""
    items = "".join(f"<li>{escape(item)}</li>" for item in c.notebook)
    return f'<section id="notebook"><h2>Lab notebook</h2><p>The designer\'s lessons so far.</p><ul>{items}</ul></section>'


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _summary(c) -> str:
    t = c.totals
    rate = "-" if t["success_rate"] is None else f"{t['success_rate']:.0%}"
    counts = [(str(t["experiments"]), "experiments"), (str(t["attempts"]), "attempts"),
              (rate, f"correct ({t['correct']})")]
    spent = [(c.spent.short(), "LLM cost"), (f"{t['gpu_s'] / 60:.1f} min", "evaluation time")]
    if c.timed:
        cards = [(f"{t['best_speedup']:.2f}x", "best vs baseline"), (_us(t["best_geomean_us"]), "best geomean")]
        cards += counts + spent
    else:
        cards = [(f"{t['correct']} of {t['attempts']}", "attempts correct")] + counts[:2] + spent
    html = ['<section id="summary"><h2>Summary</h2><div class="cards">']
    html += [f'<div class="card"><b>{escape(v)}</b><span>{escape(k)}</span></div>' for v, k in cards]
    html.append("</div>")
    best = c.best
    if c.timed:
        html.append(f"<p>Best attempt: <code>{best.sha[:10]}</code> {escape(best.branch or 'baseline')} "
                    f"(attempt {best.attempt}) on {escape(c.device or 'unknown device')}: "
                    f"{escape(best.hypothesis)}. Reproduce with <code>kgit eval {best.sha[:10]}</code>.</p>")
    else:
        html.append(f"<p>Latest correct attempt: <code>{best.sha[:10]}</code> {escape(best.branch or 'baseline')} "
                    f"(attempt {best.attempt}): {escape(best.hypothesis)}. Reproduce with "
                    f"<code>kgit eval {best.sha[:10]}</code>.</p>")
        html.append(f'<p class="note">Every timing here comes from {escape(figures.INTERPRETER_MEANING)}, so '
                    "nothing is ranked by speed and no speedup is shown (see what a GPU would add, below).</p>")
    html.append("</section>")
    return "\n".join(html)


def _progress(c) -> str:
    if not c.timed:
        png = plots.correctness(c)
        body = _img(png, "correct and failed attempts per experiment") if png else "<p>No experiments yet.</p>"
        return f'<section id="progress"><h2>Correctness over experiments</h2>{body}</section>'
    png = plots.progress(c)
    body = _img(png, "best geomean over experiments") if png else "<p>No timed attempt yet.</p>"
    return f'<section id="progress"><h2>Progress</h2>{body}</section>'


def _lineage(c) -> str:
    path = " &rarr; ".join(f"#{a.experiment}" if not a.is_baseline else "baseline" for a in c.best_path)
    return (f'<section id="lineage"><h2>Lineage</h2>{_img(plots.lineage_tree(c), "lineage tree of experiments")}'
            f"<p>{'Best path' if c.timed else 'Path to the latest correct attempt'}: {path}</p></section>")


def _shapes(c) -> str:
    if not c.timed:
        return ('<section id="shapes"><h2>What a GPU would add</h2>'
                f"<p>{_code(figures.GPU_WOULD_ADD)}</p></section>")
    png = plots.shape_speedups(c)
    if png is None:
        body = (f"<p>The baseline has no measurement on {escape(c.device)}; run "
                "<code>kgit remeasure kgit/baseline</code> there to compare shapes.</p>")
    else:
        rows = "".join(f"<tr><td>{escape(k)}</td><td class=num>{b:.2f}</td><td class=num>{u:.2f}</td>"
                       f"<td class=num>{s:.2f}x</td></tr>" for k, b, u, s in c.shape_speedups())
        body = (_img(png, "per-shape speedup of the best attempt") +
                "<table><tr><th>shape</th><th>baseline us</th><th>best us</th><th>speedup</th></tr>"
                f"{rows}</table>")
    return f'<section id="shapes"><h2>Per-shape speedup of the best attempt</h2>{body}</section>'


def _references(c) -> str:
    if not c.references:
        return ""
    best = c.geomean_of(c.best) or 0.0
    rows = "".join(f"<tr><td>{escape(label)}</td><td class=num>{us:.2f}</td><td class=num>{best / us:.2f}x</td></tr>"
                   for label, us in c.references.items())
    return ('<section id="references"><h2>Reference lines</h2><table><tr><th>reference</th><th>geomean us</th>'
            f"<th>best time / reference</th></tr>{rows}</table></section>")


def _targets(c) -> str:
    """Build facts of the baseline and the best attempt per target GPU (docs/targets.md)."""
    label = "best" if c.timed else "latest correct"
    pairs = [("baseline", c.baseline), (label, c.best)] if c.best.sha != c.baseline.sha else [("baseline", c.baseline)]
    names = list(dict.fromkeys(n for _, a in pairs for n in a.targets))
    if not names:
        return ""
    head = "".join(f"<th>{escape(label)} <code>{a.sha[:10]}</code></th>" for label, a in pairs)
    rows = "".join(f"<tr><td>{escape(n)}</td>" + "".join(f"<td>{escape(a.targets.get(n, '-'))}</td>" for _, a in pairs)
                   + "</tr>" for n in names)
    return ('<section id="targets"><h2>Build targets</h2><p class="note">Compiled for each target by Triton on the '
            "evaluating machine, reported by the candidate's process.</p>"
            f"<table><tr><th>target</th>{head}</tr>{rows}</table></section>")


def _hypotheses(c) -> str:
    if not c.experiments:
        return '<section id="hypotheses"><h2>Hypotheses</h2><p>No experiments yet.</p></section>'
    head = "".join(f"<th>{escape(h)}</th>" for h in review.EXPERIMENT_HEADERS)
    rows = []
    for e, row in zip(c.experiments.values(), review.experiment_rows(c)):
        colour = plots.STATUS_COLOURS.get(e.status, plots.OTHER_COLOUR)
        cells = [str(row[0]), escape(row[1]), escape(row[2]),
                 f'<span class="status" style="background:{colour}">{escape(e.status)}</span> {escape(row[3])}',
                 str(row[4]), escape(row[5]), escape(row[6])]
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    return (f'<section id="hypotheses"><h2>Hypotheses</h2><table><tr>{head}</tr>{"".join(rows)}</table>'
            "</section>")


def _code(text: str) -> str:
    """Plain text with its `backquoted` commands set as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


def _us(value) -> str:
    return "-" if value is None else f"{value:.1f} us"
