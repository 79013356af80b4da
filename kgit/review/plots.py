"""The report's figures, drawn with matplotlib's Agg backend into PNG bytes.

Each function takes a review.Campaign and returns PNG bytes, or None when there is
nothing to draw, so the HTML report can say why a figure is missing instead of
showing an empty frame.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # no display: the report is built on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from kgit.review.campaign import short  # noqa: E402

# Colour per experiment status: improvements green, correct-but-slower grey, correct without a
# speed figure (the interpreter) slate, which claims nothing about speed; failures warm.
STATUS_COLOURS = {
    "improved": "#2e7d32", "not-faster": "#9e9e9e", "correct": "#546e7a", "baseline": "#1565c0",
    "incorrect": "#e65100", "compile-error": "#c62828", "runtime-error": "#ad1457",
    "timeout": "#6a1b9a", "crash": "#4e342e", "rejected": "#f9a825",
}
OTHER_COLOUR = "#757575"
BEST_COLOUR = "#0d47a1"
# Past this many experiments the tree labels only the best path: every label would overlap.
MAX_LABELLED = 40
LABEL_PT = 7


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def progress(campaign) -> bytes | None:
    """Best geomean so far over experiments, each correct attempt as a dot, and the
    baseline and reference lines; only timings from the best attempt's device."""
    device = campaign.device
    points = [(a.experiment, g) for a in campaign.attempts
              if a.ok and not a.is_baseline and (g := campaign.geomean_of(a)) is not None]
    start = campaign.baseline_geomean
    if not points and start is None:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.2))
    if points:
        xs, ys = zip(*sorted(points))
        ax.scatter(xs, ys, s=14, color="#90a4ae", label="correct attempt", zorder=2)
    fastest: dict[int, float] = {}
    for number, g in points:
        fastest[number] = min(g, fastest.get(number, g))
    step_x, step_y, current = [0], [start], start
    for number in sorted(campaign.experiments):
        here = fastest.get(number)
        if here is not None and (current is None or here < current):
            current = here
        step_x.append(number)
        step_y.append(current)
    if any(y is not None for y in step_y):
        ax.step(step_x, step_y, where="post", color=BEST_COLOUR, linewidth=2, label="best so far", zorder=3)
    if start is not None:
        ax.axhline(start, color=STATUS_COLOURS["baseline"], linestyle=":", linewidth=1.2, label=f"baseline {start:.1f} us")
    styles = ["--", "-.", (0, (5, 2, 1, 2)), (0, (1, 1))]
    for i, (label, us) in enumerate(campaign.references.items()):
        ax.axhline(us, color="#6d4c41", linestyle=styles[i % len(styles)], linewidth=1.2, label=f"{label} {us:.1f} us")
    values = [y for _, y in points] + [y for y in step_y if y is not None] + list(campaign.references.values())
    scale = ""
    if max(values) / min(values) > 10:  # a campaign that gained 10x reads better on a log axis
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        scale = " (log)"
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("experiment")
    ax.set_ylabel(f"geomean us{scale}, {device}")
    ax.set_title("Progress: best geomean over experiments (lower is better)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _png(fig)


def _tree_layout(campaign, on_path=frozenset()) -> dict[int, tuple[float, float]]:
    """(depth, row) per experiment, baseline = 0. A parent shares the row of its first
    child, and a child on the best path comes first, so the best path is one straight line
    along the top and every other branch hangs below the node it left from."""
    children: dict[int, list[int]] = {0: []}
    for number, e in campaign.experiments.items():
        children.setdefault(0 if e.parent is None else e.parent, []).append(number)
        children.setdefault(number, [])
    pos: dict[int, tuple[float, float]] = {}
    next_row = 0.0
    # Post-order walk with an explicit stack: a long chain of experiments must not hit
    # Python's recursion limit.
    stack = [(0, 0, False)]
    while stack:
        node, depth, expanded = stack.pop()
        kids = sorted(children.get(node, []), key=lambda n: (n not in on_path, n))
        if not kids:
            pos[node] = (depth, next_row)
            next_row += 1
        elif expanded:
            pos[node] = (depth, pos[kids[0]][1])
        else:
            stack.append((node, depth, True))
            stack.extend((kid, depth + 1, False) for kid in reversed(kids))
    return pos


def lineage_tree(campaign) -> bytes:
    """Experiments as a tree from the baseline; colour = status, thick blue = the best path."""
    return _png(lineage_figure(campaign))


def lineage_figure(campaign):
    """The lineage tree as an open matplotlib figure (tests measure its labels)."""
    on_path = {a.experiment for a in campaign.best_path if not a.is_baseline}
    pos = _tree_layout(campaign, on_path)
    rows = max((r for _, r in pos.values()), default=0) + 1
    depth = max((d for d, _ in pos.values()), default=0) + 1
    row_height = 0.42 if rows <= MAX_LABELLED else 0.16
    width = min(4 + 1.6 * depth, 16)
    fig, ax = plt.subplots(figsize=(width, min(1.2 + row_height * rows, 30)))
    # One collection per kind of artist: thousands of separate plot() calls take minutes to draw.
    plain, best_edges = [], []
    for number, e in campaign.experiments.items():
        parent = 0 if e.parent is None else e.parent
        (x0, y0), (x1, y1) = pos[parent], pos[number]
        edge = [(x0, y0), (x0 + 0.5, y0), (x0 + 0.5, y1), (x1, y1)]
        (best_edges if number in on_path and (parent == 0 or parent in on_path) else plain).append(edge)
    ax.add_collection(LineCollection(plain, colors="#cfd8dc", linewidths=1, zorder=1))
    ax.add_collection(LineCollection(best_edges, colors=BEST_COLOUR, linewidths=3, zorder=2))
    numbers = list(campaign.experiments)
    if numbers:
        path = [n in on_path for n in numbers]
        ax.scatter([pos[n][0] for n in numbers], [pos[n][1] for n in numbers],
                   s=[90 if p else 50 for p in path], zorder=3,
                   c=[STATUS_COLOURS.get(campaign.experiments[n].status, OTHER_COLOUR) for n in numbers],
                   edgecolors=[BEST_COLOUR if p else "white" for p in path], linewidths=[2 if p else 0.5 for p in path])
    x, y = pos[0]
    ax.scatter([x], [y], s=120, color=STATUS_COLOURS["baseline"], zorder=3)
    # Left of the node: the first child's label starts one column to the right.
    ax.annotate("baseline", (x, y), xytext=(-4, 6), textcoords="offset points", fontsize=8, ha="right")
    if len(campaign.experiments) <= MAX_LABELLED:
        labelled = list(campaign.experiments)
    else:  # big campaigns: a dozen steps of the best path, the last one always
        path = [a.experiment for a in campaign.best_path if not a.is_baseline]
        labelled = path[::-(-len(path) // 12)] + path[-1:] if path else []
    # A node shares its row with its first child one column to the right, so only a node
    # with nothing to its right (a leaf) has room for its hypothesis; the others get
    # what fits in one column. Widths are estimated at 0.6 em per character.
    has_child = {0 if e.parent is None else e.parent for e in campaign.experiments.values()}
    column_pt = width * 72 * 0.75 / (depth + 1.5)
    fits = lambda text: len(text) * 0.6 * LABEL_PT + 8 < column_pt  # noqa: E731
    for number in labelled:
        e = campaign.experiments[number]
        ratio = campaign.speedup_of(e.best) if e.best else None
        tail = f" {ratio:.2f}x" if ratio else ""
        if len(campaign.experiments) <= MAX_LABELLED and number not in has_child:
            text = f"#{number} {short(e.hypothesis, 28)}{tail}"
        else:
            text = f"#{number}{tail}" if fits(f"#{number}{tail}") else f"#{number}"
        ax.annotate(text, pos[number], xytext=(4, 6), textcoords="offset points", fontsize=LABEL_PT)
    used = sorted({e.status for e in campaign.experiments.values()} | {"baseline"})
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=STATUS_COLOURS.get(s, OTHER_COLOUR), label=s)
               for s in used]
    handles.append(plt.Line2D([], [], color=BEST_COLOUR, linewidth=3,
                              label="best path" if campaign.timed else "path to the latest correct"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_xlim(-0.3, depth + 1.2)
    ax.set_ylim(rows - 0.5, -0.7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("generations from the baseline")
    ax.set_yticks([])
    # No title: the report's heading names the figure.
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    return fig


def correctness(campaign) -> bytes | None:
    """Stacked bars per experiment: correct and failed attempts (an archive with no speed figures)."""
    numbers = list(campaign.experiments)
    if not numbers:
        return None
    correct = [sum(a.ok for a in campaign.experiments[n].attempts) for n in numbers]
    failed = [len(campaign.experiments[n].attempts) - c for n, c in zip(numbers, correct)]
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.bar(numbers, correct, color=STATUS_COLOURS["correct"], label="correct")
    ax.bar(numbers, failed, bottom=correct, color=STATUS_COLOURS["incorrect"], label="failed")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("experiment")
    ax.set_ylabel("attempts")
    ax.set_title("Attempts per experiment (no GPU timing: correctness only)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _png(fig)


def shape_speedups(campaign) -> bytes | None:
    """Horizontal bars: the best attempt's speedup over the baseline per shape."""
    rows = campaign.shape_speedups()
    if not rows:
        return None
    keys = [r[0] for r in rows]
    values = [r[3] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.45 * len(rows)))
    colours = [STATUS_COLOURS["improved"] if v > 1 else STATUS_COLOURS["incorrect"] for v in values]
    ax.barh(range(len(rows)), values, color=colours)
    for i, v in enumerate(values):
        ax.annotate(f"{v:.2f}x", (v, i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(range(len(rows)), keys, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.18)
    ax.set_xlabel(f"speedup vs baseline on {campaign.device}")
    ax.set_title("Per-shape speedup of the best attempt")
    return _png(fig)

