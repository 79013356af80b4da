"""Import counts and baseline verdicts for GPU MODE problem folders and KernelBench files.

Imports every GPU MODE folder under --gpumode (a folder holding reference.py and
task.yml) and every KernelBench problem file under --kernelbench (level*/ *.py, or
any .py defining Model), then evaluates each imported baseline with the harness on
this machine and prints one row per problem and the counts per status. An
`unsupported` row counts as agreeing with upstream only when its reason names what
this machine lacks.

    python benchmarks/problem_conformance.py --gpumode tests/data/gpumode --kernelbench tests/data
    python benchmarks/problem_conformance.py --gpumode ~/reference-kernels/problems \\
        --kernelbench ~/KernelBench/KernelBench --full-timing      # on the H200
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import yaml
from tabulate import tabulate

from kgit import config as config_mod
from kgit import importers
from kgit.errors import KgitError
from kgit.evaluation import child as evaluate

QUICK_TIMING = {"target_rse": 0.5, "max_time_s": 0.05, "min_reps": 2, "warmup": 0}


def gpumode_folders(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("task.yml") if (p.parent / "reference.py").exists()
                  or (p.parent / "submission.py").exists())


def kernelbench_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "class Model" in p.read_text(errors="replace")
                  and "class ModelNew" not in p.read_text(errors="replace"))


def evaluate_baseline(problem_dir: Path, kernel: str, config, scratch: Path) -> dict:
    shutil.copytree(problem_dir, scratch / "problem")
    (scratch / "candidate").mkdir()
    (scratch / "candidate" / "kernel.py").write_text(kernel)
    return evaluate.run_child(scratch / "problem", scratch / "candidate", config, scratch)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpumode", type=Path, help="a folder of GPU MODE problem folders (searched recursively)")
    parser.add_argument("--kernelbench", type=Path, help="a folder of KernelBench problem files (searched recursively)")
    parser.add_argument("--full-timing", action="store_true", help="kgit's default timing, not the quick one")
    parser.add_argument("--import-only", action="store_true", help="count imports; evaluate nothing")
    args = parser.parse_args(argv)
    data = yaml.safe_load(config_mod.default_text())
    if not args.full_timing:
        data["timing"] = dict(QUICK_TIMING)
    config = config_mod.parse(yaml.safe_dump(data), "conformance config")

    rows, imports, statuses = [], Counter(), Counter()
    sources = [("gpumode", p) for p in (gpumode_folders(args.gpumode) if args.gpumode else [])]
    sources += [("kernelbench", p) for p in (kernelbench_files(args.kernelbench) if args.kernelbench else [])]
    for kind, source in sources:
        with tempfile.TemporaryDirectory(prefix="kgit-conformance-") as tmp:
            tmp = Path(tmp)
            make = importers.gpumode_problem if kind == "gpumode" else importers.kernelbench_problem
            try:
                problem_dir, kernel = make(source, tmp / "imported")
            except KgitError as e:
                imports[kind, "refused"] += 1
                rows.append([kind, source.name, "refused", str(e).split(":")[-1].strip()[:90]])
                continue
            imports[kind, "imported"] += 1
            if args.import_only:
                continue
            (tmp / "scratch").mkdir()
            doc = evaluate_baseline(problem_dir, kernel, config, tmp / "scratch")
            statuses[kind, doc["status"]] += 1
            detail = doc.get("reason") or (doc.get("error") or "").strip().splitlines()[-1:] or [""]
            rows.append([kind, source.name, doc["status"], (detail if isinstance(detail, str) else detail[0])[:90]])
    print(tabulate(rows, headers=["kind", "problem", "baseline", "reason or last error line"]))
    print()
    counts = [[kind, what, n] for (kind, what), n in sorted({**imports, **statuses}.items())]
    print(tabulate(counts, headers=["kind", "import / baseline status", "count"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
