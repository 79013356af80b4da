"""How much one timed call varies, per benchmark shape, and how many calls a precision needs.

Evaluates a shipped problem's baseline (a throwaway kernel repository, the default
.kgit.yaml, cold pairs) under a timing protocol and prints, per shape, the calls taken, the
mean, the spread of one call (cv: std / mean), the mean's relative standard error, and the
calls that a relative standard error of 0.5% and of 1% would need (at least min_reps). It
is what says whether a protocol's calls are spent on precision nobody uses, or on shapes
too noisy to get there (docs/harness.md, "How many calls").

    python benchmarks/shape_spread.py --problem fp8_blockscale_gemm --protocol gpumode-leaderboard-wall --runs 2
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

from bench_repo import make_repo
from tabulate import tabulate

from kgit import workflow


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="fp8_blockscale_gemm")
    parser.add_argument("--protocol", help="a timing protocol instead of the problem's own")
    parser.add_argument("--runs", type=int, default=1, help="evaluations of the baseline, one table each")
    args = parser.parse_args()

    def edit(data):
        data["evaluator"]["warm"] = False
        if args.protocol:
            data["timing"]["protocol"] = args.protocol

    with tempfile.TemporaryDirectory(prefix="kgit-shape-spread-") as tmp:
        repo, config = workflow.load(make_repo(Path(tmp) / "repo", args.problem, False, edit))
        least = config.timing.min_reps
        for run in range(1, args.runs + 1):
            result = workflow.evaluate_rev(repo, config, "HEAD").result
            rows, calls = [], 0
            for shape in result.shapes:
                doc = shape.to_dict()
                n, mean, std = int(doc.get("n") or 0), float(doc["mean_us"]), float(doc.get("std_us") or 0.0)
                cv = std / mean if mean > 0 else 0.0
                calls += n
                rows.append([doc["key"], n, f"{mean:.1f}", f"{100 * cv:.2f}%",
                             f"{100 * cv / math.sqrt(n):.3f}%" if n else "-",
                             max(least, math.ceil((cv / 0.005) ** 2)), max(least, math.ceil((cv / 0.01) ** 2))])
            print(f"run {run}: {args.problem}, status {result.status}, protocol {result.protocol}, device "
                  f"{result.device}, evaluation {result.eval_s or 0:.1f} s, {calls} timed calls")
            print(tabulate(rows, headers=["shape", "calls", "mean us", "cv of a call", "rse of the mean",
                                          "calls for 0.5%", "calls for 1%"], tablefmt="github"))
            print()


if __name__ == "__main__":
    main()
