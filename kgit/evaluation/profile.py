"""Hardware counters for one attempt: `kgit profile REV` and `evolve.profile`.

Nsight Compute (NVIDIA) or rocprofv3 (AMD) runs the candidate on the problem's
benchmark shapes (kgit_harness/profiling.py) and kgit keeps, per shape, the kernel
time, the achieved DRAM bandwidth and the SM / tensor-pipe throughput as percentages
of the device's peak, as one JSON line of kind "profile" in the commit's note
(refs/notes/kgit, beside the re-measurements). The designer reads them as lines such
as "memory-bound at 78% of peak DRAM bandwidth".

The rocprofv3 path follows the CSV format rocprofv3's documentation describes
(counter_collection.csv: one row per counter per dispatch) and is marked unverified
until it has met a real MI300.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kgit.archive.buildfacts import latest_profile, profile_lines
from kgit.cleanup import remove_tree
from kgit.errors import KgitError

# The metrics of the recorded H200 run (tests/data/ncu/), one ncu replay set.
NCU_METRICS = (
    "gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes.sum.per_second",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread", "launch__grid_size",
    "launch__block_size", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
)
# rocprofv3 derived counters: bytes from and to HBM (KiB), vector ALU and memory-unit busy %.
ROCPROF_COUNTERS = ("FETCH_SIZE", "WRITE_SIZE", "VALUBusy", "MemUnitBusy")
PROFILERS = ("ncu", "rocprofv3")
VERIFIED = {"ncu": True, "rocprofv3": False}


class ProfilerError(KgitError):
    """No profiler, no permission for counters, or a profile that could not be read."""


@dataclass
class Profiler:
    name: str
    path: str

    def command(self, out_dir: Path) -> list[str]:
        if self.name == "ncu":
            return [self.path, "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
                    "--profile-from-start", "off", "--metrics", ",".join(NCU_METRICS)]
        return [self.path, "--pmc", *ROCPROF_COUNTERS, "--output-format", "csv", "-d", str(out_dir), "-o", "kgit",
                "--"]


def find(choice: str = "auto") -> Profiler:
    """The profiler to use: `choice`, or in auto mode ncu, then rocprofv3, found on PATH."""
    names = PROFILERS if choice == "auto" else (choice,)
    if choice not in PROFILERS + ("auto",):
        raise ProfilerError(f"unknown profiler {choice!r}; use ncu, rocprofv3 or auto.")
    for name in names:
        path = shutil.which(name)
        if path:
            return Profiler(name, path)
    raise ProfilerError(
        "no hardware profiler is installed here: " + (f"{choice} is not on PATH. " if choice != "auto" else
                                                      "neither ncu nor rocprofv3 is on PATH. ")
        + "Install Nsight Compute (ncu, NVIDIA) or ROCm's rocprofv3 (AMD) on the GPU host, or put it on PATH; "
          "the static build facts (`kgit show`) need no profiler.")


# -- parsing -----------------------------------------------------------------------------
_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_RATE = {"byte/s": 1.0, "Kbyte/s": 1e3, "Mbyte/s": 1e6, "Gbyte/s": 1e9, "Tbyte/s": 1e12, "B/s": 1.0,
         "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12}


def _number(text: str) -> float | None:
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def _check_ncu_errors(text: str):
    if "ERR_NVGPUCTRPERM" in text:
        raise ProfilerError("ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): run kgit "
                            "profile as root, or let users profile (the NVIDIA driver option "
                            "NVreg_RestrictProfilingToAdminUsers=0), then try again.")
    for line in text.splitlines():
        if line.startswith("==ERROR=="):
            raise ProfilerError(f"ncu failed: {line[len('==ERROR=='):].strip()}")


def parse_ncu(text: str) -> list[dict]:
    """Rows of `ncu --csv --page raw` output (ncu's own ==PROF== lines and the program's
    output around it are skipped): one dict per profiled kernel launch, in launch order."""
    _check_ncu_errors(text)
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID","Process ID"')), None)
    if start is None:
        raise ProfilerError("ncu printed no kernel table: no kernel ran between cudaProfilerStart and Stop, or ncu "
                            "stopped early (its messages are above).")
    table = [line for line in lines[start:] if line.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(table))))
    header, units, body = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}

    def get(row, name, scale=None):
        if name not in col:
            return None
        value = _number(row[col[name]])
        if value is None or scale is None:
            return value
        unit = units[col[name]]
        if unit not in scale:
            raise ProfilerError(f"ncu reported {name} in {unit!r}, a unit kgit does not know.")
        return value * scale[unit]

    out = []
    for row in body:
        if len(row) != len(header) or not row[col["ID"]].strip().isdigit():
            continue
        out.append({
            "kernel": row[col["Kernel Name"]], "device": row[col["device__attribute_display_name"]]
            if "device__attribute_display_name" in col else None,
            "duration_ns": get(row, "gpu__time_duration.sum", _TIME),
            "dram_pct": get(row, "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            "dram_bytes_per_s": get(row, "dram__bytes.sum.per_second", _RATE),
            "memory_pct": get(row, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
            "sm_pct": get(row, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            "tensor_pct": get(row, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
            "warps_active_pct": get(row, "sm__warps_active.avg.pct_of_peak_sustained_active"),
            "registers": get(row, "launch__registers_per_thread"),
            "grid": get(row, "launch__grid_size"), "block": get(row, "launch__block_size"),
        })
    return out


def parse_rocprof(text: str, peak_bytes_per_s: float | None) -> list[dict]:
    """Rows of rocprofv3's counter_collection.csv, one per counter per dispatch, turned into
    one dict per dispatch in dispatch order. Unverified against a real MI300."""
    by_dispatch: dict[int, dict] = {}
    for row in csv.DictReader(io.StringIO(text)):
        dispatch = int(row["Dispatch_Id"])
        entry = by_dispatch.setdefault(dispatch, {
            "kernel": row["Kernel_Name"], "start": int(row["Start_Timestamp"]), "end": int(row["End_Timestamp"]),
            "registers": _number(row.get("VGPR_Count")), "grid": _number(row.get("Grid_Size")),
            "block": _number(row.get("Workgroup_Size")), "counters": {}})
        entry["counters"][row["Counter_Name"]] = _number(row["Counter_Value"])
    out = []
    for dispatch in sorted(by_dispatch):
        e = by_dispatch[dispatch]
        duration_ns = max(e["end"] - e["start"], 0)
        kib = [e["counters"].get(c) for c in ("FETCH_SIZE", "WRITE_SIZE")]
        rate = sum(kib) * 1024 / (duration_ns * 1e-9) if None not in kib and duration_ns else None
        out.append({
            "kernel": e["kernel"], "device": None, "duration_ns": float(duration_ns), "dram_bytes_per_s": rate,
            "dram_pct": 100 * rate / peak_bytes_per_s if rate is not None and peak_bytes_per_s else None,
            "memory_pct": e["counters"].get("MemUnitBusy"), "sm_pct": e["counters"].get("VALUBusy"),
            "tensor_pct": None, "warps_active_pct": None, "registers": e["registers"], "grid": e["grid"],
            "block": e["block"],
        })
    return out


_FIGURES = ("dram_pct", "memory_pct", "sm_pct", "tensor_pct", "warps_active_pct")


def per_shape(rows: list[dict], plan: dict) -> list[dict]:
    """The profiled pass's launches grouped by shape, using the plan's launch counts.

    Only the candidate's Triton kernels count (rows of other kernels are dropped), and
    only the last pass: a profiler that also saw the warm-up pass listed it first.
    """
    names = {k for s in plan["shapes"] for k in s["kernels"]}
    ours = [r for r in rows if r["kernel"] in names or _base_name(r["kernel"]) in names]
    wanted = sum(s["launches"] for s in plan["shapes"])
    if len(ours) < wanted:
        raise ProfilerError(f"the profiler saw {len(ours)} launches of the candidate's kernels "
                            f"({', '.join(sorted(names)) or 'none'}), fewer than the {wanted} of the profiled pass.")
    ours = ours[len(ours) - wanted:]
    out, i = [], 0
    for shape in plan["shapes"]:
        group, i = ours[i:i + shape["launches"]], i + shape["launches"]
        total = sum(r["duration_ns"] or 0 for r in group)
        entry = {"key": shape["key"], "kernels": len(group), "duration_us": round(total / 1e3, 3)}
        for name in _FIGURES + ("dram_bytes_per_s",):
            pairs = [(r[name], r["duration_ns"] or 0) for r in group if r.get(name) is not None]
            weight = sum(w for _, w in pairs)
            entry[name] = round(sum(v * w for v, w in pairs) / weight, 2) if pairs and weight else None
        entry["registers"] = max((r["registers"] for r in group if r.get("registers")), default=None)
        entry["bound"] = bound(entry)
        out.append(entry)
    return out


def _base_name(kernel: str) -> str:
    return kernel.split("(")[0].strip()


def bound(s: dict) -> str:
    """What limits one shape, in words: `memory-bound at 78% of peak DRAM bandwidth`."""
    dram, mem, sm, tensor = (s.get(k) for k in ("dram_pct", "memory_pct", "sm_pct", "tensor_pct"))
    mem_top = max(x for x in (dram, mem, 0.0) if x is not None)
    sm = sm or 0.0
    rate = s.get("dram_bytes_per_s")
    dram_text = (f"DRAM {dram:.1f}% of peak" if dram is not None else "DRAM n/a") + (
        f", {rate / 1e9:.0f} GB/s" if rate else "")
    extra = f"SM {sm:.1f}%" + (f", tensor pipes {tensor:.1f}%" if tensor is not None else "")
    if max(mem_top, sm) < 40:
        return f"latency-bound: no unit is near its peak (memory {mem_top:.0f}%, {extra}; {dram_text})"
    if mem_top >= sm:
        if dram is not None and dram >= 0.8 * mem_top:
            return f"memory-bound at {dram:.0f}% of peak DRAM bandwidth ({extra})"
        return (f"memory-bound at {mem_top:.0f}% of peak in the on-chip memory pipes (L1/shared/L2; "
                f"{dram_text}; {extra})")
    return f"compute-bound at {sm:.0f}% of peak SM throughput (" + (
        f"tensor pipes {tensor:.1f}%; " if tensor is not None else "") + f"{dram_text})"


# -- running ------------------------------------------------------------------------------
def profile(repo, config, rev: str, choice: str = "auto", devices_env: dict | None = None) -> dict:
    """Profile the attempt at `rev` on this host, store the record in its note, return it."""
    import json

    from kgit.evaluation import child
    from kgit.problems import load_task
    from kgit_harness import peaks

    profiler = find(choice)
    sha = repo.rev(rev)
    if not any(a.sha == sha for a in repo.read()):
        raise KgitError(f"{rev} ({sha[:10]}) is not a kgit attempt; `kgit log` lists the attempts.")
    state = repo.state / "scratch"
    state.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="profile-", dir=state))
    try:
        with repo.checkout_copy(sha) as tree:
            task = load_task(tree / config.problem)
            problem_dir, candidate_dir = child.stage_candidate(tree, config.problem, task.files, scratch)
        out_dir, plan_path = scratch / "profile-out", scratch / "plan.json"
        out_dir.mkdir()
        cmd = [*profiler.command(out_dir), sys.executable, "-I", "-B", "-m", "kgit_harness.profiling",
               "--problem", str(problem_dir), "--candidate", str(candidate_dir), "--plan", str(plan_path)]
        started = time.monotonic()
        try:
            done = subprocess.run(cmd, cwd=scratch, env=child.child_env(scratch, devices_env), capture_output=True,
                                  text=True, timeout=config.evaluator.timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise ProfilerError(f"{profiler.name} did not finish within evaluator.timeout_s "
                                f"({config.evaluator.timeout_s:g} s).") from None
        text = done.stdout + "\n" + done.stderr
        if not plan_path.exists():
            raise ProfilerError(f"the profiled program stopped before the profiled pass (exit {done.returncode}):\n"
                                + text.strip()[-2000:])
        plan = json.loads(plan_path.read_text())
        if profiler.name == "ncu":
            rows = parse_ncu(text)
        else:
            files = sorted(out_dir.rglob("*counter_collection.csv"))
            if not files:
                raise ProfilerError("rocprofv3 wrote no counter_collection.csv; its output:\n" + text.strip()[-2000:])
            peak = peaks.lookup(plan.get("device") or "")
            rows = parse_rocprof(files[-1].read_text(), peak.bytes_per_s if peak else None)
        record = {"kind": "profile", "profiler": profiler.name, "verified": VERIFIED[profiler.name],
                  "device": plan.get("device"), "when": int(time.time()),
                  "wall_s": round(time.monotonic() - started, 1), "shapes": per_shape(rows, plan)}
    finally:
        remove_tree(scratch)  # the profiled candidate shaped it: a hostile tree defeats rmtree
    repo.add_note(sha, record)
    return record


def after_iteration(repo, config, best) -> str:
    """`evolve.profile`: profile `best` (the loop's best attempt) unless it has a profile already; one progress line."""
    if best is None:
        return "no correct attempt to profile"
    if latest_profile(best) is not None:
        return f"{best.sha[:10]} has a profile already"
    try:
        record = profile(repo, config, best.sha, config.evolve.profile)
    except ProfilerError as e:
        return f"{best.sha[:10]} not profiled: {e}"
    first = profile_lines(record)
    return f"{best.sha[:10]} profiled" + (f": {first[0]}" if first else "")


def profile_text(record: dict) -> str:
    """`kgit profile`'s table."""
    from tabulate import tabulate

    def pct(v):
        return "" if v is None else f"{v:.1f}"

    rows = [[s["key"], f"{s['duration_us']:.1f}", pct(s["dram_pct"]),
             "" if not s.get("dram_bytes_per_s") else f"{s['dram_bytes_per_s'] / 1e9:.0f}", pct(s["memory_pct"]),
             pct(s["sm_pct"]), pct(s["tensor_pct"]), s["bound"].split(" (")[0].split(":")[0]]
            for s in record["shapes"]]
    head = f"{record['profiler']} on {record.get('device')}" + ("" if record.get("verified", True) else
                                                               " (rocprofv3 path: unverified on a real MI300)")
    return head + "\n" + tabulate(rows, headers=["shape", "time us", "DRAM %", "DRAM GB/s", "mem pipes %", "SM %",
                                                 "tensor %", "bound"], tablefmt="simple")
