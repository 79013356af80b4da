"""Which measurements may be compared, and the result-to-trailers mapping.

Two timings compare only when the same device and the same harness produced them;
otherwise the older commit is measured again and the new figure stored as a note.
"""

from __future__ import annotations

import time

from .harness.result import geomean


def comparable(attempt, device: str, harness: str) -> dict | None:
    """The latest measurement of `attempt` made on `device` with `harness`, if any."""
    matches = [m for m in attempt.measurements() if m.get("device") == device and m.get("harness") == harness]
    return matches[-1] if matches else None


def note_record(doc: dict, tag: str | None = None) -> dict:
    """A measurement as stored in refs/notes/kgit (see docs/archive.md)."""
    return {
        "device": doc.get("device"), "harness": doc.get("harness"), "timing": doc.get("timing"),
        "status": doc.get("status"), "geomean_us": doc.get("geomean_us"),
        "times": result_times(doc), "tag": tag, "when": int(time.time()),
        "versions": doc.get("versions", {}),
    }


def result_times(doc: dict) -> dict[str, float]:
    stat = (doc.get("ranking") or "mean") + "_us"
    return {s["key"]: s[stat] for s in doc.get("shapes") or [] if s.get(stat) is not None}


def ratio(before: dict | None, after_geomean: float | None, after_times: dict) -> float | None:
    """Speedup of `after` over `before`, over the shapes both measured."""
    if not before or not after_geomean:
        return None
    shared = [k for k in after_times if k in (before.get("times") or {})]
    if shared and len(shared) == len(after_times):
        return geomean(before["times"][k] for k in shared) / geomean(after_times[k] for k in shared)
    return before["geomean_us"] / after_geomean if before.get("geomean_us") else None
