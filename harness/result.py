"""The harness's result: one versioned dataclass, carried as a JSON document.

It travels from the judge to kgit on a dedicated pipe, and from remote evaluators as
their printed output, so it stays plain JSON with a schema tag (schema in
docs/harness.md). `Result.from_dict` validates a document that came from outside and
types it (each timed shape a `ShapeTiming`); `to_dict` is the same document again.
`validate` is that check for dict readers. Keys a writer adds beyond the schema (kgit's
`stdout`, `sandbox`, `worker`) are kept.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kgit_harness import kernelsplit, reported

SCHEMA = "kgit.result/1"
# "stopped": correct, but racing (harness/racing.py) ended its timing once it was clearly
# slower than the incumbent; it carries the shapes timed so far and never a geomean.
STATUSES = ("ok", "incorrect", "compile-error", "runtime-error", "timeout", "crash", "rejected", "unsupported",
            "stopped")


@dataclass(frozen=True)
class ShapeTiming:
    """One timed benchmark shape of a result (docs/harness.md, "Each entry of `shapes`").

    The judge writes these; kgit reads the fields below. `to_dict` gives back the entry
    exactly as it was read, keys kgit does not read included.
    """

    key: str  # the shape's name, e.g. "m=1024,n=512"
    mean_us: float  # the statistics of the ranking clock, microseconds a call
    median_us: float | None = None
    min_us: float | None = None
    std_us: float | None = None
    n: int | None = None  # how many calls they are over
    # Which clock ranks the shape: "events" (the runner's device events, accepted by the
    # judge) or "judge" (the judge's own: always on a CPU, on a GPU for a launch-bound shape).
    clock: str | None = None
    events_mean_us: float | None = None  # GPU: the flushed, event-timed calls, whichever clock ranks
    host_call_us: float | None = None  # the host time inside a call, as the runner reported it
    runner_batch_host_us: float | None = None  # GPU: the runner's host time a call in the batch
    device_us: float | None = None  # GPU: the kernel's device time a call, beside the ranking figure
    host_us: float | None = None  # GPU: the host time a call, beside it
    kernels: Mapping[str, Any] | None = None  # GPU: the runner's per-kernel split (kernelsplit.check_entry)
    error: str | None = None  # a timed output that failed its re-check
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ShapeTiming:
        """A shape entry of a result document; ValueError when it has no key or no mean."""
        if not isinstance(doc, Mapping) or "key" not in doc or not _number(doc.get("mean_us")):
            raise ValueError("each entry of 'shapes' needs 'key' and a number in 'mean_us'")
        if "kernels" in doc:  # (+) the runner's per-kernel split of one call, candidate-reported
            kernelsplit.check_entry(doc["kernels"])
        kernels = doc.get("kernels")
        return cls(key=str(doc["key"]), mean_us=float(doc["mean_us"]), median_us=_float(doc.get("median_us")),
                   min_us=_float(doc.get("min_us")), std_us=_float(doc.get("std_us")),
                   n=doc["n"] if isinstance(doc.get("n"), int) else None,
                   clock=doc["clock"] if isinstance(doc.get("clock"), str) else None,
                   events_mean_us=_float(doc.get("events_mean_us")), host_call_us=_float(doc.get("host_call_us")),
                   runner_batch_host_us=_float(doc.get("runner_batch_host_us")),
                   device_us=_float(doc.get("device_us")), host_us=_float(doc.get("host_us")),
                   kernels=kernels if isinstance(kernels, Mapping) else None,
                   error=doc["error"] if isinstance(doc.get("error"), str) else None, document=dict(doc))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document) if self.document else {"key": self.key, "mean_us": self.mean_us}

    def statistic(self, ranking: str) -> float | None:
        """The figure of a ranking statistic ("mean", "median", "min")."""
        return {"mean": self.mean_us, "median": self.median_us, "min": self.min_us}.get(ranking)


@dataclass
class Result:
    status: str = "crash"
    reason: str | None = None
    error: str | None = None
    device: str | None = None
    timing: str | None = None
    ranking: str = "mean"
    tests: list[dict[str, Any]] = field(default_factory=list)
    shapes: list[ShapeTiming] = field(default_factory=list)
    geomean_us: float | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    harness: str | None = None
    eval_s: float | None = None
    # Added within kgit.result/1 (readers must tolerate their absence): whether the
    # speed-of-light guard ran, with which peaks, and why not when it did not; and what
    # confinement the runner reported applying to itself (informative: the runner is
    # the untrusted side, see docs/harness.md).
    speed_of_light: dict[str, Any] | None = None
    confine: dict[str, Any] | None = None
    # Added within kgit.result/1: the candidate's kernels cross-compiled for the build
    # targets (harness/targets.py), candidate-reported; None when none were declared.
    targets: dict[str, Any] | None = None
    # Added within kgit.result/1: the timing protocol the shapes were timed under
    # (harness/protocols.py); absent in results from before protocols, which were kgit-adaptive.
    protocol: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    def __post_init__(self) -> None:
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
        # A shape given as the document's object is read (and checked) here, once.
        self.shapes = [s if isinstance(s, ShapeTiming) else ShapeTiming.from_dict(s) for s in self.shapes]
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
            if geo is None or not _number(geo) or not math.isfinite(geo) or geo <= 0:
                raise ValueError(f"an ok result needs a positive number in 'geomean_us', not {geo!r}")

    @classmethod
    def from_dict(cls, doc: object) -> Result:
        if not isinstance(doc, dict):
            raise ValueError(f"a result must be a JSON object, not {type(doc).__name__}")
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document (schema={doc.get('schema')!r})")
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in doc.items() if k in known},
                   extra={k: v for k, v in doc.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        doc["shapes"] = [s.to_dict() for s in self.shapes]
        doc.update(self.extra)
        return doc

    def times(self) -> dict[str, float]:
        """{shape: us} by the ranking statistic (mean, median or min), shapes without it left out."""
        found = {s.key: s.statistic(self.ranking or "mean") for s in self.shapes}
        return {key: us for key, us in found.items() if us is not None}


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def new(status: str = "crash", **fields_: Any) -> dict[str, Any]:
    """A fresh result document as the dict kgit passes around."""
    assert status in STATUSES, status
    doc = Result(harness=harness_id()).to_dict()
    doc.update(status=status, **fields_)
    return doc


def geomean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    if not present or any(v <= 0 for v in present):
        return None
    return math.exp(sum(math.log(v) for v in present) / len(present))


def harness_id(protocol: str | None = None) -> str:
    """kgit's version, a hash of the harness sources and the timing protocol: two results
    compare only when equal, so figures of different protocols are never ranked together."""
    from kgit_harness import __version__

    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return f"kgit {__version__} harness {h.hexdigest()[:12]}" + (f" protocol {protocol}" if protocol else "")


def validate(doc: object) -> dict[str, Any]:
    """Check a result that came from outside (the judge, a remote evaluator); raise ValueError if malformed.

    Returns the document as a dict, with the optional keys filled in.
    """
    return Result.from_dict(doc).to_dict()
