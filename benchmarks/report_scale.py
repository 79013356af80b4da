"""How long `kgit report` takes on big campaigns, and how big the file gets.

Part 1 builds campaigns in memory (no git) with a realistic lineage: each experiment
starts from the best attempt so far or, one time in three, from a random earlier one;
a third of attempts fail. It times the campaign model, each figure, and the HTML.
Part 2 runs the whole report (one `git log` read included) on the 10,000-attempt
archive that benchmarks/archive_scale.py synthesizes.

    python benchmarks/report_scale.py [--sizes 100 1000 5000] [--archive 10000] [--out DIR]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).parent))

from kgit.archive.repo import Attempt, Repo  # noqa: E402
from kgit.review import campaign as review
from kgit.review import html as report_html
from kgit.review import plots  # noqa: E402

SHAPES = [f"m={m},n=1536,k=7168" for m in (128, 1024, 6144)]


def _attempt(sha, exp, att, base, status, geomean, speedup, vs_baseline) -> Attempt:
    lines = [f"Kgit-Experiment: {exp}", f"Kgit-Attempt: {att}", f"Kgit-Branch: kgit/{exp}-idea-{exp}",
             f"Kgit-Hypothesis: idea {exp}: retile and pipeline deeper", f"Kgit-Status: {status}",
             "Kgit-Device: NVIDIA H200", "Kgit-Timing: events", "Kgit-Harness: bench", "Kgit-Eval-s: 12.0",
             "Kgit-Model: openai/gpt-5", "Kgit-Cost-USD: 0.02"]
    if base:
        lines.append(f"Kgit-Base: {base}")
    if status == "ok":
        lines += [f"Kgit-Geomean-us: {geomean:.3f}", f"Kgit-Speedup: {speedup:.3f}",
                  f"Kgit-Speedup-Baseline: {vs_baseline:.3f}"]
        lines += [f"Kgit-Time-us: {s} {geomean * (0.5 + i):.3f}" for i, s in enumerate(SHAPES)]
    return Attempt(sha, [], "", "bench", "b@x", 0, f"idea-{exp}", "\n".join(lines))


def synthetic(experiments: int, seed: int = 1):
    rng = random.Random(seed)
    baseline = _attempt(f"{0:040x}", 0, 0, None, "ok", 100.0, 1.0, 1.0)
    attempts, correct, best, serial = [baseline], [baseline], baseline, 1
    for exp in range(1, experiments + 1):
        base = best if rng.random() < 2 / 3 else rng.choice(correct)
        for att in range(1, rng.randint(1, 4) + 1):
            ok = rng.random() > 1 / 3
            geomean = base.geomean_us / rng.uniform(0.8, 1.15) if ok else None
            a = _attempt(f"{serial:040x}", exp, att, base.sha, "ok" if ok else "incorrect", geomean,
                         base.geomean_us / geomean if ok else None, 100.0 / geomean if ok else None)
            serial += 1
            attempts.append(a)
            if ok:
                correct.append(a)
                best = a if a.geomean_us < best.geomean_us else best
    return attempts, baseline


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--archive", type=int, default=10000, help="attempts in part 2 (0: skip it)")
    parser.add_argument("--out", type=Path, help="keep the reports here (to look at them)")
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        attempts, baseline = synthetic(n)
        campaign, t_model = timed(lambda: review.from_attempts(attempts, baseline))
        _, t_progress = timed(lambda: plots.progress(campaign))
        _, t_tree = timed(lambda: plots.lineage_tree(campaign))
        _, t_shapes = timed(lambda: plots.shape_speedups(campaign))
        html, t_all = timed(lambda: report_html.render(campaign, f"synthetic {n}"))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"synthetic-{n}.html").write_text(html)
        rows.append([n, len(attempts), f"{t_model:.2f}", f"{t_progress:.2f}", f"{t_tree:.2f}", f"{t_shapes:.2f}",
                     f"{t_all:.2f}", f"{len(html) / 1e6:.2f}"])
    print(tabulate(rows, headers=["experiments", "attempts", "model s", "progress s", "tree s", "shapes s",
                                  "whole html s", "html MB"]))
    if args.archive:
        import archive_scale

        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "archive"
            archive_scale.synthesize(root, args.archive)
            out = (args.out or Path(tmp)) / f"archive-{args.archive}.html"
            _, seconds = timed(lambda: report_html.write(Repo(root), None, out))
            print(f"\nkgit report on a {args.archive}-attempt archive (git read included): {seconds:.2f} s, "
                  f"{out.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
