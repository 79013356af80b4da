"""The harness's result: a versioned JSON document (schema in docs/harness.md).

It travels from the child to kgit on a dedicated pipe, and from remote evaluators
as their printed output, so it stays plain JSON with a schema tag.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

SCHEMA = "kgit.result/1"
STATUSES = ("ok", "incorrect", "compile-error", "runtime-error", "timeout", "crash", "rejected")


def new(status: str = "crash", **fields) -> dict:
    assert status in STATUSES, status
    doc = {
        "schema": SCHEMA, "status": status, "reason": None, "error": None,
        "device": None, "timing": None, "ranking": "mean",
        "tests": [], "shapes": [], "geomean_us": None,
        "versions": {}, "harness": harness_id(), "eval_s": None,
        # Added within kgit.result/1 (readers must tolerate its absence): whether the
        # speed-of-light guard ran, with which peaks, and why not when it did not.
        "speed_of_light": None,
        # Added within kgit.result/1: the candidate's kernels cross-compiled for the build
        # targets (harness/targets.py), candidate-reported; None when none were declared.
        "targets": None,
    }
    doc.update(fields)
    return doc


def geomean(values) -> float | None:
    values = [v for v in values if v is not None]
    if not values or any(v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def harness_id() -> str:
    """kgit's version and a hash of the harness sources: two results compare only when equal."""
    from kgit_harness import __version__

    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return f"kgit {__version__} harness {h.hexdigest()[:12]}"


def validate(doc) -> dict:
    """Check a result that came from outside (a remote evaluator); raise ValueError if malformed."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} document (schema={doc.get('schema') if isinstance(doc, dict) else None!r})")
    if doc.get("status") not in STATUSES:
        raise ValueError(f"unknown status {doc.get('status')!r}")
    for shape in doc.get("shapes") or []:
        if not isinstance(shape, dict) or "key" not in shape or "mean_us" not in shape:
            raise ValueError("each entry of 'shapes' needs 'key' and 'mean_us'")
    if doc["status"] == "ok":
        geo = doc.get("geomean_us")
        if isinstance(geo, bool) or not isinstance(geo, (int, float)) or not math.isfinite(geo) or geo <= 0:
            raise ValueError(f"an ok result needs a positive number in 'geomean_us', not {geo!r}")
    for key in ("device", "harness", "timing"):
        doc.setdefault(key, None)
    return doc
