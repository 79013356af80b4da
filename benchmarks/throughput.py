"""Evaluations per minute with 1 and 2 GPUs through the local per-device pool.

Makes a throwaway kernel repository of a shipped problem, then evaluates its baseline
commit N times per configuration through `get_evaluator` (each evaluation: a throwaway
worktree, a harness child pinned to one GPU, correctness checks, adaptive timing), with
twice as many caller threads as GPUs so no slot ever waits for work, as under
`kgit evolve --jobs J`.

    python benchmarks/throughput.py [--problem softmax] [--evaluations 8] [--gpus 1 2]
    python benchmarks/throughput.py --fake-devices   # CPU dry run: pins fake GPU ids
    python benchmarks/throughput.py --gpus 1 --warm off   # each pair started when its candidate is there

Timing settings are the default .kgit.yaml's unless --fast. On a host with fewer GPUs
than a row asks for, that row says so instead of measuring.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_repo import make_repo
from tabulate import tabulate

from kgit import config as config_mod
from kgit.archive.repo import BASELINE_TAG, Repo
from kgit.evaluation import backends
from kgit.evaluation.gpus import Host, discover


def measure(repo: Repo, gpus: int, evaluations: int, host: Host | None, warm: bool) -> dict:
    config = config_mod.load(repo.root)
    config.evaluator.devices = list(range(gpus))
    # As in `kgit evolve`: with warm evaluators each slot's next pair starts while it evaluates.
    evaluator = backends.LocalEvaluator(repo, config, host=host, warm=warm)
    sha = repo.rev(BASELINE_TAG)
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(2 * gpus) as threads:
            docs = list(threads.map(evaluator, [sha] * evaluations))
    finally:
        evaluator.close()
    wall = time.monotonic() - started
    statuses = sorted({d["status"] for d in docs})
    return {
        "gpus": gpus, "evaluations": evaluations, "wall_s": round(wall, 2),
        "per_minute": round(evaluations * 60 / wall, 2),
        "mean_eval_s": round(statistics.mean(d["eval_s"] or 0 for d in docs), 2),
        "devices": sorted({d["worker"]["device"] for d in docs}), "statuses": statuses,
        "device_name": docs[0].get("device"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="vector_add")
    parser.add_argument("--evaluations", type=int, default=8, help="evaluations per row")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--fast", action="store_true", help="short timing (as in the tests)")
    parser.add_argument("--fake-devices", action="store_true",
                        help="pretend this host has GPUs 0..N-1 (CPU dry run; figures mean nothing for GPUs)")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument("--warm", choices=["on", "off"], default="on",
                        help="warm evaluators (evaluator.warm, as in kgit evolve); default on")
    args = parser.parse_args()

    host = Host("nvidia", tuple(str(i) for i in range(max(args.gpus)))) if args.fake_devices else None
    visible = len((host or discover()).ids)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kgit-throughput-") as tmp:
        repo = Repo(make_repo(Path(tmp) / "repo", args.problem, args.fast))
        for gpus in args.gpus:
            if gpus > visible:
                rows.append({"gpus": gpus, "skipped": f"only {visible} GPU(s) visible"})
                continue
            rows.append(measure(repo, gpus, args.evaluations, host, args.warm == "on"))
    base = next((r["per_minute"] for r in rows if r.get("gpus") == 1 and "per_minute" in r), None)
    table = []
    for r in rows:
        if "skipped" in r:
            table.append([r["gpus"], "", "", "not run: " + r["skipped"], "", "", "", ""])
            continue
        scale = f"{r['per_minute'] / base:.2f}x" if base else ""
        table.append([r["gpus"], r["evaluations"], r["wall_s"], r["per_minute"], scale, r["mean_eval_s"],
                      ",".join(r["devices"]), ",".join(r["statuses"])])
    print(f"problem {args.problem}, timing {'fast' if args.fast else 'default'}, warm {args.warm}"
          + (", FAKE devices (CPU dry run)" if args.fake_devices else "")
          + (f", device {rows[0].get('device_name')}" if rows and rows[0].get("device_name") else ""))
    print(tabulate(table, headers=["GPUs", "evals", "wall s", "evals/min", "vs 1 GPU", "mean eval s",
                                   "devices used", "statuses"], tablefmt="github"))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
