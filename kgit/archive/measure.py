"""Which measurements may be compared, and the result-to-trailers mapping.

Two timings compare only when the same device and the same harness produced them, through
the same evaluator (backend and host: `evaluator_of`); otherwise the older commit is
measured again and the new figure stored as a note.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kgit.archive.notes import KernelsNote, KernelSplits, Measurement, PerShape, TargetLines, TargetsNote
from kgit_harness import targets as harness_targets
from kgit_harness.result import Result, geomean

if TYPE_CHECKING:
    from kgit.archive.attempt import Attempt


def evaluator_of(worker: Mapping[str, Any] | None) -> str | None:
    """Which evaluator took a figure, as the archive compares it: "<backend>@<host>" from a
    result's `worker` ("local@gpu7", "command@mi300-box"), the backend alone where the
    host is unknown, None where the result says nothing (kgit made it, or a test did).

    Two hosts with the same GPU model differ in clocks, cooling and drivers, and the same
    host measured through another backend differs in what surrounds the harness, so
    their figures are never ranked together."""
    backend = (worker or {}).get("backend")
    if not backend:
        return None
    host = (worker or {}).get("host")
    return f"{backend}@{host}" if host else str(backend)


def worker_of(evaluator: str | None) -> dict[str, str | None] | None:
    """The `worker` fields an evaluator name (`evaluator_of`) stands for; None for none."""
    if not evaluator:
        return None
    backend, _, host = evaluator.partition("@")
    return {"backend": backend, "host": host or None}


def comparable(attempt: Attempt, device: str, harness: str | None,
               evaluator: str | None = None) -> Measurement | None:
    """The latest measurement of `attempt` made on `device` with `harness`, through
    `evaluator` when one is given (`evaluator_of`; None: through any), if any."""
    matches = [m for m in attempt.measurements() if m.device == device and m.harness == harness
               and (evaluator is None or m.evaluator == evaluator)]
    # By time, not position: a notes merge (`kgit sync`) sorts the lines.
    matches.sort(key=lambda m: m.when)
    return matches[-1] if matches else None


def latest_on(attempt: Attempt, device: str) -> Measurement | None:
    """The latest re-measurement of `attempt` on `device`, by any harness, failed ones included."""
    matches = sorted((m for m in attempt.notes.measurements if m.device == device), key=lambda m: m.when)
    return matches[-1] if matches else None


def note_record(result: Result, tag: str | None = None, evaluator: str | None = None) -> Measurement:
    """A measurement of `result` as a note keeps it (see docs/archive.md); `evaluator`: the
    backend and host that took it (`evaluator_of`)."""
    return Measurement(
        device=result.device, harness=result.harness, evaluator=evaluator, timing=result.timing,
        protocol=result.protocol, status=result.status, geomean_us=result.geomean_us,
        times=result_times(result), tag=tag, when=int(time.time()), versions=result.versions,
        # Why it failed there, in one line: the model must learn that a kernel correct in
        # the interpreter is wrong on the GPU, and how.
        error=error_line(result.error) if result.status != "ok" else None,
        # Shapes the judge's clock ranked (launch-bound): what the GPU alone took by the
        # runner's events, and the runner's host time a call, so the model can tell a slow
        # kernel from a slow launch (the figure in "times" includes the launch).
        launch_bound=launch_bound(result) or None,
        kernels=kernel_splits(result) or None, per_call=per_call(result) or None)


def kernels_record(result: Result) -> KernelsNote | None:
    """The note kept beside a commit whose own GPU result carried a per-kernel split (the
    commit's trailers hold its times; the split would not fit there), or None."""
    splits, calls = kernel_splits(result), per_call(result)
    if not splits and not calls:
        return None
    return KernelsNote(result.device, result.harness, result.timing, splits, calls, int(time.time()))


def targets_record(result: Result) -> TargetsNote | None:
    """The note kept beside a commit whose build facts name more than one kernel variant for
    some target (its `Kgit-Target-*` trailers keep only the worst of them), or None.

    The facts are candidate-reported, as the trailers' are (docs/targets.md)."""
    results = (result.targets or {}).get("results") if isinstance(result.targets, dict) else None
    per_target = {name: harness_targets.kernel_lines(res) for name, res in (results or {}).items()
                  if isinstance(res, dict) and res.get("builds")}
    if not any(len(lines) > 1 for lines in per_target.values()):
        return None
    return TargetsNote(per_target, (result.targets or {}).get("triton"), int(time.time()))


def targets_of(attempt: Attempt) -> TargetLines:
    """{target: [[kernel, facts], ...]} from the newest `targets` note beside `attempt`; {} if none."""
    kept = attempt.notes.targets
    return max(kept, key=lambda n: n.when).targets if kept else {}


def _kernels_note(attempt: Attempt, found: Measurement, with_per_call: bool = False) -> KernelsNote | None:
    """The newest `kernels` note beside the commit whose own measurement is `found`."""
    beside = [n for n in attempt.notes.kernels if n.device == found.device and n.harness == found.harness
              and (n.per_call or not with_per_call)]
    return max(beside, key=lambda n: n.when) if beside else None


def kernels_of(attempt: Attempt, device: str, harness: str | None, evaluator: str | None = None) -> KernelSplits:
    """{shape: [[kernel, launches, us], ...]} of `attempt`'s measurement that `comparable` picks,
    from that note or, for the commit's own, the `kernels` note beside it; {} if none kept one."""
    found = comparable(attempt, device, harness, evaluator)
    if found is None:
        return {}
    if found.source != "commit":
        return found.kernels or {}
    beside = _kernels_note(attempt, found)
    return beside.kernels if beside else {}


def kernel_splits(result: Result) -> dict[str, list[list[Any]]]:
    """{shape: [[kernel, launches, us], ...]} of a GPU result: the runner's per-kernel split of
    one call per shape (harness/kernelsplit.py), candidate-reported and never ranked."""
    out = {}
    for s in result.shapes:
        rows = (s.kernels or {}).get("rows")
        if rows:
            out[s.key] = [[r["name"], r["count"], round(r["us"], 1)] for r in rows]
    return out


def per_call(result: Result) -> dict[str, dict[str, float]]:
    """{shape: {"device_us", "host_us"}}: beside each GPU shape's ranked figure, the kernel's device
    time (events after an L2 flush) and the host time of a call, both as the runner reported them."""
    return {s.key: {"device_us": round(s.device_us, 2), "host_us": round(s.host_us, 2)}
            for s in result.shapes if s.device_us is not None and s.host_us is not None}


def per_call_of(attempt: Attempt, device: str, harness: str | None, evaluator: str | None = None) -> PerShape:
    """per_call of `attempt`'s measurement that `comparable` picks: its note's, or for the commit's
    own, the `kernels` note beside it; {} if none kept them."""
    found = comparable(attempt, device, harness, evaluator)
    if found is None:
        return {}
    if found.source != "commit":
        return found.per_call or {}
    beside = _kernels_note(attempt, found, with_per_call=True)
    return beside.per_call if beside else {}


def launch_bound(result: Result) -> dict[str, dict[str, float]]:
    """{shape: {"gpu_us", "host_us"}} of the shapes ranked by the judge's clock."""
    found = {}
    for s in result.shapes:
        if s.clock == "judge" and s.events_mean_us is not None:
            host = max(s.host_call_us or 0.0, s.runner_batch_host_us or 0.0)
            found[s.key] = {"gpu_us": round(s.events_mean_us, 2), "host_us": round(float(host), 2)}
    return found


def error_line(text: str | None, limit: int = 300) -> str | None:
    """A failure in one line: a traceback's exception, else the message's first line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return None
    return (lines[-1] if "Traceback" in (text or "") else lines[0])[:limit]


def result_times(result: Result) -> dict[str, float]:
    """{shape: time} of a result, by its ranking statistic (mean, median or min)."""
    return result.times()


def ratio(before: Measurement | None, after_geomean: float | None, after_times: Mapping[str, float]) -> float | None:
    """Speedup of `after` over `before`, over the shapes both measured."""
    if not before or not after_geomean:
        return None
    shared = [k for k in after_times if k in before.times]
    if shared and len(shared) == len(after_times):
        old, new = geomean(before.times[k] for k in shared), geomean(after_times[k] for k in shared)
        return old / new if old is not None and new else None
    return before.geomean_us / after_geomean if before.geomean_us else None


def by_device(attempt: Attempt) -> dict[str, dict[str, Any]]:
    """Per device (or --device-tag) and timing protocol: the latest geomean, how many
    measurements, and their spread. A protocol other than kgit-adaptive is named in the key
    ("NVIDIA H200 · gpumode-leaderboard-wall"), so that figures of two protocols never make one
    spread; `device` in each entry is the device alone.

    The commit's own measurement counts as the earliest on its device; note records are
    ordered by their `when`, since a merge of notes sorts lines rather than keeping order.
    """
    out: dict[str, dict[str, Any]] = {}
    for m in sorted(attempt.measurements(), key=lambda m: m.when):
        protocol = m.protocol or "kgit-adaptive"
        key = m.place if protocol == "kgit-adaptive" else f"{m.place} · {protocol}"
        value = m.geomean_us
        slot = out.setdefault(key, {"latest_us": value, "n": 0, "min_us": value, "max_us": value, "when": m.when,
                                    "device": m.place, "protocol": protocol})
        slot.update(latest_us=value, when=m.when, n=slot["n"] + 1,
                    min_us=min(slot["min_us"], value), max_us=max(slot["max_us"], value))
    for slot in out.values():
        slot["spread"] = slot["max_us"] / slot["min_us"] - 1 if slot["min_us"] else None
    return out
