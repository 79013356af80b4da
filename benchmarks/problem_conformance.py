"""Agreement with upstream: GPU MODE folders and KernelBench files judged by kgit on this machine.

Imports every GPU MODE folder under --gpumode (a folder holding reference.py and
task.yml, searched recursively) and every KernelBench problem file under --kernelbench
(a .py defining Model but not ModelNew), evaluates each imported baseline, and judges
the solutions upstream ships with their verdicts:

- GPU MODE: `solutions/correct/*.py` must pass, `solutions/wrong/*.py` must fail;
- KernelBench: the adversarial kernels of src/unit_tests/test_kernels (ModelNew files,
  all for the N=4096 square matmul problem) must fail, except the non-default-stream
  one, which is correct and only tests the timer.

A case counts as agreeing when kgit's verdict matches upstream's; an `unsupported`
verdict counts as agreeing only when its reason says what this machine lacks
("needs ..."), and one that says the problem's own code fails (a reference that fails
on its own input) counts as neither. A wrong solution rejected for another reason than `incorrect` agrees
but is listed as such. The tables are printed; nothing is asserted.

    python benchmarks/problem_conformance.py --gpumode tests/data/gpumode --kernelbench tests/data
    python /work/upstream/rebuild.py && python benchmarks/problem_conformance.py \\
        --gpumode /work/upstream/tree/reference-kernels/problems --kernelbench /work/upstream/tree/KernelBench

Evaluations run one per GPU at once, each pinned to its GPU and holding the same host-wide
slot lock as kgit's local evaluator (kgit/evaluation/gpus.py), so a campaign running beside
the benchmark never shares a GPU with it either; `--per-gpu N` allows N on each GPU. On a
host without a GPU they run one at a time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import yaml
from tabulate import tabulate

from kgit import config as config_mod
from kgit import importers
from kgit.errors import KgitError
from kgit.evaluation import child, gpus

QUICK_TIMING = {"target_rse": 0.5, "max_time_s": 0.05, "min_reps": 2, "warmup": 0}
# KernelBench's adversarial unit-test kernels: the problem they are written against, and
# whether upstream's eval must accept them.
KERNELBENCH_TEST_KERNELS = {"zero_out_kernel.py": False, "result_reuse_kernel.py": False,
                            "non_default_stream_kernel.py": True}
KERNELBENCH_TEST_PROBLEM = "1_Square_matrix_multiplication_.py"


def gpumode_folders(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("task.yml") if (p.parent / "reference.py").exists()
                  or (p.parent / "submission.py").exists())


def kernelbench_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "class Model" in p.read_text(errors="replace")
                  and "class ModelNew" not in p.read_text(errors="replace"))


def solutions(folder: Path) -> list[tuple[Path, bool]]:
    """Upstream's shipped solutions of a GPU MODE folder, with the verdict upstream expects."""
    return [(p, kind == "correct") for kind in ("correct", "wrong")
            for p in sorted((folder / "solutions" / kind).glob("*.py"))]


def evaluate_kernel(problem_dir: Path, kernel: str, config, scratch: Path, devices_env: dict | None = None) -> dict:
    shutil.copytree(problem_dir, scratch / "problem")
    (scratch / "candidate").mkdir()
    (scratch / "candidate" / "kernel.py").write_text(kernel)
    return child.run_child(scratch / "problem", scratch / "candidate", config, scratch, devices_env)


class Slots:
    """The host's evaluation slots: `per_gpu` on each visible GPU (one CPU slot without any).

    The keys and lock files are the local evaluator's (kgit/evaluation/backends.py), so
    this run and any kgit process on the host never put more than `per_gpu` evaluations
    on one GPU between them: four sharing an H200 ran KernelBench's 19_ReLU (12 GiB of
    inputs, three copies held) out of memory.
    """

    def __init__(self, per_gpu: int, host: gpus.Host | None = None):
        self.host = host or gpus.discover()
        self.devices = gpus.select(self.host, "all")
        self.keys = [("local", d or gpus.CPU, k) for k in range(per_gpu) for d in self.devices]
        if not self.host.ids:
            self.keys = self.keys[:1]

    def __len__(self) -> int:
        return len(self.keys)

    @contextlib.contextmanager
    def held(self):
        """One free slot, held for the block; yields the environment that pins a child to it."""
        key = gpus.BOARD.acquire(self.keys)
        device = None if key[1] == gpus.CPU else key[1]
        try:
            with gpus.host_slot(key) if device is not None else contextlib.nullcontext():
                yield gpus.pin_env(self.host, device)
        finally:
            gpus.BOARD.release(key)


def detail(doc: dict) -> str:
    if doc.get("reason"):
        return doc["reason"]
    lines = (doc.get("error") or "").strip().splitlines()
    return lines[-1] if lines else ""


def agreement(doc: dict, upstream_passes: bool) -> str:
    """'agree', 'agree (other reason)' or 'DISAGREE' for one kgit verdict."""
    status = doc["status"]
    if status == "unsupported":
        why = doc.get("reason") or ""
        if why.startswith("the problem's own code failed"):
            return "NEITHER (the upstream problem itself fails)"
        return "agree (cannot run here)" if why.startswith("needs ") else "DISAGREE"
    if upstream_passes:
        return "agree" if status == "ok" else "DISAGREE"
    if status == "ok":
        return "DISAGREE"
    return "agree" if status == "incorrect" else f"agree ({status})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpumode", type=Path, help="a folder of GPU MODE problem folders (searched recursively)")
    parser.add_argument("--kernelbench", type=Path, help="a KernelBench checkout or folder of problem files")
    parser.add_argument("--full-timing", action="store_true", help="kgit's default timing, not the quick one")
    parser.add_argument("--import-only", action="store_true", help="count imports; evaluate nothing")
    parser.add_argument("--only", action="append", default=[],
                        help="only sources whose path contains this text (repeat it: any of them)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds after which no new evaluation starts; the tables cover what finished")
    parser.add_argument("--per-gpu", type=int, default=None,
                        help="evaluations at once on each GPU (default: the config's evaluator.per_gpu, 1). More "
                             "than one shares the GPU between judges' clocks and memory: on the H200, 3 at once "
                             "got an honest conv2d baseline rejected (timings disagree) and a 19 GB KernelBench "
                             "ReLU out of memory, so verdicts of timing and memory are not upstream's then")
    args = parser.parse_args(argv)
    data = yaml.safe_load(config_mod.default_text())
    if not args.full_timing:
        data["timing"] = dict(QUICK_TIMING)
    if args.per_gpu is not None:
        data.setdefault("evaluator", {})["per_gpu"] = args.per_gpu
    config = config_mod.parse(yaml.safe_dump(data), "conformance config")
    slots = Slots(config.evaluator.per_gpu)

    rows, cases, counts = [], [], Counter()
    sources = [("gpumode", p) for p in (gpumode_folders(args.gpumode) if args.gpumode else [])]
    sources += [("kernelbench", p) for p in (kernelbench_files(args.kernelbench) if args.kernelbench else [])]
    sources = [(k, p) for k, p in sources if not args.only or any(text in str(p) for text in args.only)]
    # Folders with upstream's solutions first: under --deadline the agreement figure comes first.
    sources.sort(key=lambda kp: not (kp[0] == "gpumode" and (kp[1] / "solutions").is_dir()))
    test_kernels = sorted(args.kernelbench.rglob("unit_tests/test_kernels/*.py")) if args.kernelbench else []
    with tempfile.TemporaryDirectory(prefix="kgit-conformance-") as tmp:
        tmp = Path(tmp)
        jobs = []
        for index, (kind, source) in enumerate(sources):
            make = importers.gpumode_problem if kind == "gpumode" else importers.kernelbench_problem
            try:
                problem_dir, kernel = make(source, tmp / f"imported{index}")
            except KgitError as e:
                counts[kind, "import", "refused"] += 1
                rows.append([kind, source.name, "(import)", "refused", str(e).split(": ")[-1][:100]])
                continue
            counts[kind, "import", "imported"] += 1
            if args.import_only:
                continue
            candidates = [("baseline", kernel, True)]
            if kind == "gpumode":
                candidates += [(f"{'correct' if good else 'wrong'}/{p.name}", p.read_text(), good)
                               for p, good in solutions(source)]
            elif source.name == KERNELBENCH_TEST_PROBLEM:
                candidates += [(f"unit_tests/{p.name}", _kernelbench_candidate(p.read_text(), kernel),
                                KERNELBENCH_TEST_KERNELS.get(p.name, False)) for p in test_kernels]
            jobs += [(kind, source, problem_dir, label, text, good) for label, text, good in candidates]

        tally = threading.Lock()
        begun = time.monotonic()

        def judge(n: int, job) -> list:
            kind, source, problem_dir, label, text, upstream_passes = job
            if args.deadline is not None and time.monotonic() - begun > args.deadline:
                with tally:
                    counts[kind, "not run", "past --deadline"] += 1
                return [kind, source.name, label, "(not run)", "past --deadline"]
            (tmp / f"scratch{n}").mkdir()
            started = time.monotonic()
            with slots.held() as pin:
                doc = evaluate_kernel(problem_dir, text, config, tmp / f"scratch{n}", pin)
            verdict = agreement(doc, upstream_passes)
            row = [kind, source.name, label, doc["status"],
                   f"{verdict}; {time.monotonic() - started:.0f} s; " + detail(doc)[:110]]
            with tally:
                counts[kind, "baseline" if label == "baseline" else "solutions", doc["status"]] += 1
                if label != "baseline" or kind == "gpumode":
                    cases.append((kind, label == "baseline", verdict))
                print("\t".join(row), flush=True)  # as it comes: a run cut short still says something
            return row

        print(f"{len(jobs)} evaluations, {len(slots)} at once ({len(slots.devices) if slots.host.ids else 0} GPUs, "
              f"{config.evaluator.per_gpu} per GPU)", flush=True)
        with concurrent.futures.ThreadPoolExecutor(len(slots)) as pool:
            rows += list(pool.map(judge, range(len(jobs)), jobs))
    print()
    print(tabulate(rows, headers=["kind", "problem", "kernel", "kgit", "agreement; time; reason or last error line"]))
    print()
    print(tabulate([[k, what, status, n] for (k, what, status), n in sorted(counts.items())],
                   headers=["kind", "what", "status", "count"]))
    if cases:
        print()
        table = []
        for kind in ("gpumode", "kernelbench"):
            mine = [c for c in cases if c[0] == kind]
            if mine:
                agree = sum(c[2].startswith("agree") for c in mine)
                here = sum("cannot run here" in c[2] for c in mine)
                neither = sum(c[2].startswith("NEITHER") for c in mine)
                table.append([kind, len(mine), agree, here, neither, len(mine) - agree - neither])
        print(tabulate(table, headers=["kind", "cases (baselines + upstream solutions)", "agree",
                                       "of which: cannot run here", "upstream problem fails", "disagree"]))
    return 0


def _kernelbench_candidate(model_new: str, imported_kernel: str) -> str:
    """A KernelBench ModelNew file with the importer's custom_kernel adapter appended."""
    mark = importers.ADAPTER_MARK.format("kernelbench")
    return model_new.rstrip() + "\n\n\n" + imported_kernel[imported_kernel.index(mark):]


if __name__ == "__main__":
    sys.exit(main())
