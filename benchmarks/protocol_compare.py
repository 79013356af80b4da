"""fp8 kernels timed by kgit under each timing protocol, and by GPU MODE's own evaluator.

The figure kgit writes into git should be the figure the problem's real evaluator gives. For
each kernel (the shipped fp8_blockscale_gemm baseline, and experiment 47 of
examples/fp8-h200, read from the campaign's bundle) this prints, per benchmark shape:

- kgit: one evaluation in a throwaway repository under each protocol asked for
  (`--protocols`, default: the problem's own), the ranking figure of every shape and the
  evaluation's wall time;
- upstream: `problems/amd/eval.py` of a gpu-mode/reference-kernels checkout (`--upstream
  PATH`, e.g. ../shared/upstream/gpumode) in leaderboard mode, run as it is from that
  checkout, with kgit's fp8 reference and benchmark shapes in place of upstream's (an H200
  has no e4m3fnuz tensor cores); its per-shape mean;
- kgit's figure over upstream's, per shape and as a geometric mean (goal: within 5%).

`--costs` adds, per shape, what the judge's side of a fresh-input protocol costs on this
GPU: one `generate_input` and one `check_implementation` (median of 5).

    python benchmarks/protocol_compare.py --upstream ../shared/upstream/gpumode
    python benchmarks/protocol_compare.py --kernels exp47 --protocols kgit-adaptive gpumode-leaderboard-wall
    python benchmarks/protocol_compare.py --skip-kgit --upstream PATH --costs --json out.json

Needs a GPU for figures that mean anything; on the CPU the kgit part runs in the interpreter
on the problem's CPU shapes and the upstream part is skipped (its eval.py is CUDA-only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from tabulate import tabulate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

PROBLEM = "fp8_blockscale_gemm"
PROBLEM_DIR = ROOT / "harness" / "problems" / PROBLEM
BUNDLE = ROOT / "examples" / "fp8-h200" / "kgit-fp8.bundle"
# Experiment 47's best attempt, the campaign's headline kernel (examples/fp8-h200/README.md).
EXP47 = "c224c86e6e1bc193aebfdb7feefb51df0cb9df13"


def kernel_sources(names: list[str], tmp: Path) -> dict[str, str]:
    """{name: kernel.py text} for `baseline` and `exp47` (and any path to a kernel file)."""
    out = {}
    for name in names:
        if name == "baseline":
            out[name] = (PROBLEM_DIR / "kernel.py").read_text()
        elif name == "exp47":
            clone = tmp / "campaign"
            if not clone.exists():
                subprocess.run(["git", "clone", "-q", str(BUNDLE), str(clone)], check=True)
                subprocess.run(["git", "-C", str(clone), "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*"],
                               check=True)
            out[name] = subprocess.run(["git", "-C", str(clone), "show", f"{EXP47}:kernel.py"], check=True,
                                       capture_output=True, text=True).stdout
        else:
            out[Path(name).stem] = Path(name).read_text()
    return out


# -- kgit ---------------------------------------------------------------------------------

def kgit_figures(source: str, protocol: str | None, tmp: Path, label: str) -> dict:
    """One kgit evaluation of `source` (a kernel.py) under `protocol` (None: the problem's own)."""
    from bench_repo import make_repo

    from kgit import config as config_mod
    from kgit.evaluation import child

    root = tmp / f"kgit-{label}-{protocol or 'default'}"
    if root.exists():
        shutil.rmtree(root)

    def edit(data):
        if protocol:
            data.setdefault("timing", {})["protocol"] = protocol

    # The repository's own baseline is measured by init; the kernel is then evaluated on its own.
    make_repo(root, PROBLEM, fast=False, edit=edit)
    (root / "kernel.py").write_text(source)
    config = config_mod.load(root)
    started = time.monotonic()
    doc = child.evaluate_tree(root, config, state_dir=root / ".git" / "kgit" / "scratch")
    wall = time.monotonic() - started
    shapes = {s["key"]: s for s in doc.get("shapes") or []}
    ranking = (doc.get("ranking") or "mean") + "_us"
    return {"status": doc["status"], "error": (doc.get("error") or "")[-600:], "wall_s": wall,
            "protocol": doc.get("protocol"), "geomean_us": doc.get("geomean_us"),
            "times": {k: s.get(ranking) for k, s in shapes.items()},
            "device_us": {k: s.get("device_us") for k, s in shapes.items()},
            "host_us": {k: s.get("host_us") for k, s in shapes.items()}}


# -- upstream -----------------------------------------------------------------------------

def shape_line(shape: dict) -> str:
    return "; ".join(f"{k}: {v}" for k, v in shape.items())


def benchmark_shapes() -> list[dict]:
    return yaml.safe_load((PROBLEM_DIR / "task.yml").read_text())["benchmarks"]


def upstream_figures(source: str, upstream: Path, tmp: Path, label: str, timeout_s: float) -> dict:
    """GPU MODE's amd eval.py in leaderboard mode on `source`, kgit's reference and shapes.

    eval.py and utils.py are run from the checkout given, unchanged; the folder they run in
    holds kgit's reference.py (generate_input, check_implementation) and the kernel as
    submission.py, as upstream's runner lays out a submission."""
    amd = upstream / "problems" / "amd"
    if not (amd / "eval.py").is_file():
        raise SystemExit(f"{amd / 'eval.py'} not found: --upstream takes a gpu-mode/reference-kernels checkout")
    work = tmp / f"upstream-{label}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    for name in ("eval.py", "utils.py"):
        shutil.copy2(amd / name, work / name)
    shutil.copy2(PROBLEM_DIR / "reference.py", work / "reference.py")
    (work / "submission.py").write_text(source)
    shapes = benchmark_shapes()
    (work / "tests.txt").write_text("\n".join(shape_line(s) for s in shapes) + "\n")
    read, write = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "POPCORN_SEED"}
    env["POPCORN_FD"] = str(write)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "eval.py", "leaderboard", "tests.txt"], cwd=work, env=env,
                            pass_fds=(write,), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    output = proc.communicate(timeout=timeout_s)[0].decode(errors="replace")
    wall = time.monotonic() - started
    values: dict[str, str] = {}
    for line in report.splitlines():
        key, _, value = line.partition(": ")
        values[key.strip()] = value.strip()
    times, failed = {}, None
    for i, shape in enumerate(shapes):
        key = ",".join(f"{k}={v}" for k, v in shape.items() if k != "seed")
        mean = values.get(f"benchmark.{i}.mean")
        if mean is not None:
            times[key] = float(mean) / 1e3  # ns -> us
        elif values.get(f"benchmark.{i}.status") == "fail":
            failed = f"{key}: {values.get(f'benchmark.{i}.error', '')[:300]}"
    return {"check": values.get("check"), "times": times, "failed": failed, "wall_s": wall,
            "runs": {k: values.get(f"benchmark.{i}.runs") for i, k in enumerate(times)},
            "output_tail": output[-800:] if values.get("check") != "pass" else ""}


# -- the judge's costs --------------------------------------------------------------------

def judge_costs() -> list[list]:
    """Per shape: generate_input and check_implementation on this GPU, ms (median of 5)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("_fp8_reference", PROBLEM_DIR / "reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    rows = []
    for shape in benchmark_shapes():
        args = dict(shape)
        gen, chk = [], []
        for i in range(5):
            args["seed"] = shape["seed"] + 13 * i
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            data = ref.generate_input(**args)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            out = ref.ref_kernel(data)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            ok, _ = ref.check_implementation(data, out)
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            assert ok
            gen.append((t1 - t0) * 1e3)
            chk.append((t3 - t2) * 1e3)
        key = ",".join(f"{k}={v}" for k, v in shape.items() if k != "seed")
        rows.append([key, f"{statistics.median(gen):.3f}", f"{statistics.median(chk):.3f}"])
    return rows


# -- output -------------------------------------------------------------------------------

def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def fmt(value, digits=1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(label: str, kgit: dict, upstream: dict | None) -> str:
    keys = list(upstream["times"]) if upstream and upstream["times"] else []
    for run in kgit.values():
        keys += [k for k in run["times"] if k not in keys]
    headers = ["shape"]
    for protocol, run in kgit.items():
        headers += [f"kgit {protocol} us"] + (["device us", "host us"] if any(run["device_us"].values()) else [])
    if upstream:
        headers += ["upstream us"] + [f"{p} / upstream" for p in kgit]
    rows = []
    for key in keys:
        row = [key]
        for run in kgit.values():
            row.append(fmt(run["times"].get(key)))
            if any(run["device_us"].values()):
                row += [fmt(run["device_us"].get(key)), fmt(run["host_us"].get(key))]
        if upstream:
            up = upstream["times"].get(key)
            row.append(fmt(up))
            row += [fmt(run["times"].get(key) / up, 3) if up and run["times"].get(key) else "-" for run in kgit.values()]
        rows.append(row)
    foot = ["geomean"]
    for run in kgit.values():
        foot.append(fmt(geomean(run["times"].get(k) for k in keys)))
        if any(run["device_us"].values()):
            foot += [fmt(geomean(run["device_us"].get(k) for k in keys)), fmt(geomean(run["host_us"].get(k) for k in keys))]
    if upstream:
        up = geomean(upstream["times"].get(k) for k in keys)
        foot.append(fmt(up))
        for run in kgit.values():
            mine = geomean(run["times"].get(k) for k in keys if upstream["times"].get(k))
            foot.append(fmt(mine / up, 3) if mine and up else "-")
    rows.append(foot)
    lines = [f"\n{label}", tabulate(rows, headers=headers)]
    for protocol, run in kgit.items():
        lines.append(f"kgit {protocol}: status {run['status']}, protocol {run['protocol']}, "
                     f"evaluation wall {run['wall_s']:.1f} s" + (f"\n  {run['error']}" if run["status"] != "ok" else ""))
    if upstream:
        lines.append(f"upstream leaderboard: check {upstream['check']}, wall {upstream['wall_s']:.1f} s"
                     + (f", failed: {upstream['failed']}" if upstream["failed"] else "")
                     + (f"\n{upstream['output_tail']}" if upstream["output_tail"] else ""))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--kernels", nargs="+", default=["baseline", "exp47"],
                        help="baseline, exp47, or paths to kernel files")
    parser.add_argument("--protocols", nargs="*", default=[None],
                        help="kgit timing protocols to evaluate under (default: the problem's own)")
    parser.add_argument("--upstream", type=Path, help="a gpu-mode/reference-kernels checkout")
    parser.add_argument("--skip-kgit", action="store_true")
    parser.add_argument("--costs", action="store_true", help="the judge's per-call costs on this GPU")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one upstream run")
    parser.add_argument("--json", type=Path, help="write every figure here too")
    args = parser.parse_args()
    try:
        import torch
        on_gpu = torch.cuda.is_available()
    except ImportError:
        on_gpu = False
    everything = {"device": torch.cuda.get_device_name() if on_gpu else "cpu", "kernels": {}}
    print(f"device: {everything['device']}")
    with tempfile.TemporaryDirectory(prefix="kgit-protocols-") as tmp:
        tmp = Path(tmp)
        for label, source in kernel_sources(args.kernels, tmp).items():
            kgit = {} if args.skip_kgit else {
                (p or "default"): kgit_figures(source, p, tmp, label) for p in args.protocols}
            upstream = None
            if args.upstream and on_gpu:
                upstream = upstream_figures(source, args.upstream.resolve(), tmp, label, args.timeout)
            elif args.upstream:
                print("upstream: skipped (its eval.py needs a CUDA or ROCm GPU)")
            everything["kernels"][label] = {"kgit": kgit, "upstream": upstream}
            print(table(label, kgit, upstream), flush=True)
    if args.costs and on_gpu:
        rows = judge_costs()
        everything["costs_ms"] = rows
        print("\nthe judge's side of one fresh-input call, ms (median of 5)")
        print(tabulate(rows, headers=["shape", "generate_input", "check_implementation"]))
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
