"""A plot of fp8 kernels' geomeans under each timing protocol, from protocol_compare.py's JSON.

Takes one or more `--json` files of `benchmarks/protocol_compare.py` (kgit's figures under
its protocols, GPU MODE's own eval.py beside them) and draws, per kernel, one bar per figure:
which protocol, who measured it, and the geometric mean of the benchmark shapes.

    python benchmarks/protocol_plot.py run1.json run4.json -o examples/fp8-h200/protocols.png
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def figures(paths: list[Path]) -> dict[str, dict[str, float]]:
    """{kernel: {label: geomean us}}, later files taking precedence for the same label."""
    out: dict[str, dict[str, float]] = {}
    for path in paths:
        data = json.loads(path.read_text())
        for kernel, runs in data["kernels"].items():
            row = out.setdefault(kernel, {})
            for protocol, run in (runs.get("kgit") or {}).items():
                value = geomean(run["times"].values())
                # "default" is the problem's own protocol at the time: kgit-adaptive before protocols.
                name = run.get("protocol") or ("kgit-adaptive" if protocol == "default" else protocol)
                if value:
                    row[f"kgit, {name}"] = value
            upstream = runs.get("upstream")
            if upstream and upstream.get("times"):
                row["GPU MODE amd/eval.py, leaderboard"] = geomean(upstream["times"].values())
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = figures(args.inputs)
    labels = sorted({label for row in found.values() for label in row})
    kernels = list(found)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        xs = [k + (i - (len(labels) - 1) / 2) * width for k in range(len(kernels))]
        values = [found[kernel].get(label, 0.0) for kernel in kernels]
        bars = ax.bar(xs, values, width, label=label)
        for bar, value in zip(bars, values):
            if value:
                ax.annotate(f"{value:.0f}", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom",
                            fontsize=8)
    ax.set_xticks(range(len(kernels)), kernels)
    ax.set_ylabel("geomean of the 18 benchmark shapes, us (lower is faster)")
    ax.set_title("fp8_blockscale_gemm on an NVIDIA H200, by how it is timed")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    for kernel in kernels:
        print(kernel, {k: round(v, 1) for k, v in found[kernel].items()})


if __name__ == "__main__":
    main()
