"""The harness's result: one versioned dataclass, carried as a JSON document.

It travels from the judge to kgit on a dedicated pipe, and from remote evaluators as
their printed output, so it stays plain JSON with a schema tag (schema in
docs/harness.md). kgit reads it as a dict with the same keys; `Result.from_dict`
validates a document that came from outside, `validate` is that check for dict readers.
Keys a writer adds beyond the schema (kgit's `stdout`, `sandbox`, `worker`) are kept.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from kgit_harness import kernelsplit, reported

SCHEMA = "kgit.result/1"
# "stopped": correct, but racing (harness/racing.py) ended its timing once it was clearly
# slower than the incumbent; it carries the shapes timed so far and never a geomean.
STATUSES = ("ok", "incorrect", "compile-error", "runtime-error", "timeout", "crash", "rejected", "unsupported",
            "stopped")


@dataclass
class Result:
    status: str = "crash"
    reason: str | None = None
    error: str | None = None
    device: str | None = None
    timing: str | None = None
    ranking: str = "mean"
    tests: list = field(default_factory=list)
    shapes: list = field(default_factory=list)
    geomean_us: float | None = None
    versions: dict = field(default_factory=dict)
    harness: str | None = None
    eval_s: float | None = None
    # Added within kgit.result/1 (readers must tolerate their absence): whether the
    # speed-of-light guard ran, with which peaks, and why not when it did not; and what
    # confinement the runner reported applying to itself (informative: the runner is
    # the untrusted side, see docs/harness.md).
    speed_of_light: dict | None = None
    confine: dict | None = None
    # Added within kgit.result/1: the candidate's kernels cross-compiled for the build
    # targets (harness/targets.py), candidate-reported; None when none were declared.
    targets: dict | None = None
    # Added within kgit.result/1: the timing protocol the shapes were timed under
    # (harness/protocols.py); absent in results from before protocols, which were kgit-adaptive.
    protocol: str | None = None
    extra: dict = field(default_factory=dict)
    schema: str = SCHEMA

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; one of {', '.join(STATUSES)}")
        if self.schema != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document (schema={self.schema!r})")
        for name in ("reason", "error", "device", "timing", "harness", "protocol"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name!r} must be a string or null, not {type(value).__name__}")
        if not isinstance(self.tests, list) or not all(isinstance(t, dict) for t in self.tests):
            raise ValueError("'tests' must be a list of objects")
        if not isinstance(self.shapes, list):
            raise ValueError("'shapes' must be a list")
        for shape in self.shapes:
            if not isinstance(shape, dict) or "key" not in shape or not _number(shape.get("mean_us")):
                raise ValueError("each entry of 'shapes' needs 'key' and a number in 'mean_us'")
            if "kernels" in shape:  # (+) the runner's per-kernel split of one call, candidate-reported
                kernelsplit.check_entry(shape["kernels"])
        # Candidate-reported parts, held to their schemas (harness/reported.py): a malformed
        # part is dropped with a note, never the whole document.
        if self.targets is not None:
            self.targets = reported.clean_targets(self.targets)
        if self.confine is not None:
            self.confine = reported.clean_confine(self.confine)
        if self.eval_s is not None and not _number(self.eval_s):
            raise ValueError(f"'eval_s' must be a number or null, not {self.eval_s!r}")
        if self.status == "ok":
            geo = self.geomean_us
            if not _number(geo) or not math.isfinite(geo) or geo <= 0:
                raise ValueError(f"an ok result needs a positive number in 'geomean_us', not {geo!r}")

    @classmethod
    def from_dict(cls, doc) -> "Result":
        if not isinstance(doc, dict):
            raise ValueError(f"a result must be a JSON object, not {type(doc).__name__}")
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document (schema={doc.get('schema')!r})")
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in doc.items() if k in known},
                   extra={k: v for k, v in doc.items() if k not in known})

    def to_dict(self) -> dict:
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        doc.update(self.extra)
        return doc


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def new(status: str = "crash", **fields_) -> dict:
    """A fresh result document as the dict kgit passes around."""
    assert status in STATUSES, status
    doc = Result(harness=harness_id()).to_dict()
    doc.update(status=status, **fields_)
    return doc


def geomean(values) -> float | None:
    values = [v for v in values if v is not None]
    if not values or any(v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def harness_id(protocol: str | None = None) -> str:
    """kgit's version, a hash of the harness sources and the timing protocol: two results
    compare only when equal, so figures of different protocols are never ranked together."""
    from kgit_harness import __version__

    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return f"kgit {__version__} harness {h.hexdigest()[:12]}" + (f" protocol {protocol}" if protocol else "")


def validate(doc) -> dict:
    """Check a result that came from outside (the judge, a remote evaluator); raise ValueError if malformed.

    Returns the document as a dict, with the optional keys filled in.
    """
    return Result.from_dict(doc).to_dict()
