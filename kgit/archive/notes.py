"""The records kgit keeps in `refs/notes/kgit`, typed: parsed once where a note is read.

A commit's note is JSON lines (docs/archive.md). Three kinds are kgit's figures and are
read here into frozen values: a measurement (no `kind`: `kgit remeasure`, a base re-timed
on another device), the per-kernel split and per-call times beside a commit's own GPU
result (`kind: "kernels"`), and the build facts of every kernel variant (`kind: "targets"`).
A commit's own measurement, from its trailers, is a `Measurement` too (`source: "commit"`),
so every reader of figures reads one type. Other kinds (profiles, model calls) stay the
dicts they were written as, for the modules that own them.

A note written back keeps its JSON: `Measurement.to_note` writes the keys kgit has always
written (None values included), and a key this version does not know is kept in `extra`. Only
empty values are normalised: an empty map reads as None (or is left out), and a note without
a stamp is written back with `when: 0`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Source = Literal["commit", "note"]
# {shape: [[kernel, launches, us], ...]}: one call per shape, split by kernel (harness/kernelsplit.py).
KernelSplits = Mapping[str, list[list[Any]]]
# {shape: {"device_us": .., "host_us": ..}} or, for launch-bound shapes, {"gpu_us": .., "host_us": ..}.
PerShape = Mapping[str, Mapping[str, float]]
# {target: [[kernel, facts], ...]}: build facts per kernel variant (harness/targets.py).
TargetLines = Mapping[str, list[list[Any]]]

# The keys a measurement note is written with, in the order of the fields below.
_MEASUREMENT_KEYS = ("device", "harness", "evaluator", "timing", "protocol", "status", "geomean_us", "times", "tag",
                     "when", "versions", "error", "launch_bound")
# Written only when they hold a value, or as null where `null_keys` names them.
_OPTIONAL_KEYS = ("kernels", "per_call", "device_tag", "reason", "error_excerpt", "noise")


@dataclass(frozen=True)
class Measurement:
    """One timing of an attempt: the commit's own (its trailers) or a note's re-measurement."""

    device: str | None  # the GPU model ("NVIDIA H200") or "cpu"
    harness: str | None  # the harness identity (kgit_harness.result.harness_id): figures of two never compare
    evaluator: str | None  # "<backend>@<host>" that took it (measure.evaluator_of); None: not said
    timing: str | None  # how it was timed: "cuda-events", "interpreter", ...
    geomean_us: float | None  # the ranked figure: geomean over the shapes of `times`
    times: Mapping[str, float]  # {shape: us} by the result's ranking statistic
    when: float  # unix seconds: the note's own stamp, the commit's time for the commit's own (0: never stamped)
    source: Source = "note"
    status: str | None = None  # the result's status; None on the commit's own (it is ok by construction)
    protocol: str | None = None  # the timing protocol (harness/protocols.py)
    tag: str | None = None  # why it was taken ("remeasure", "re-timed as a base")
    device_tag: str | None = None  # `kgit remeasure --device-tag`: groups figures under a name of the user's
    versions: Mapping[str, str] = field(default_factory=dict)  # torch, triton, python... where it ran
    error: str | None = None  # why it failed there, in one line
    reason: str | None = None  # a failed re-measurement's one-line reason
    error_excerpt: str | None = None  # and the end of its error
    noise: float | None = None  # the relative standard error of the geomean, where a note keeps it
    launch_bound: PerShape | None = None  # shapes ranked by the judge's clock: {shape: {gpu_us, host_us}}
    kernels: KernelSplits | None = None  # the runner's per-kernel split of one call per shape
    per_call: PerShape | None = None  # {shape: {device_us, host_us}}: a call's device and host time
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as read
    # Optional keys written as null when empty: those a note held so, and a re-timed base's
    # noise, which kgit has always written (null when unknown).
    null_keys: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        """Correct and timed: its figure can be ranked."""
        return self.status in (None, "ok") and bool(self.geomean_us)

    @property
    def place(self) -> str:
        """Where it was taken, as the user named it: the device tag, else the device."""
        return self.device_tag or self.device or "unknown"

    @classmethod
    def from_note(cls, doc: Mapping[str, Any]) -> Measurement:
        known = set(_MEASUREMENT_KEYS) | set(_OPTIONAL_KEYS)
        return cls(
            device=_text(doc.get("device")), harness=_text(doc.get("harness")),
            evaluator=_text(doc.get("evaluator")) or None, timing=_text(doc.get("timing")),
            geomean_us=_number(doc.get("geomean_us")), times=_mapping(doc.get("times")),
            when=_number(doc.get("when")) or 0, source="note", status=_text(doc.get("status")),
            protocol=_text(doc.get("protocol")), tag=_text(doc.get("tag")), device_tag=_text(doc.get("device_tag")),
            versions=_mapping(doc.get("versions")), error=_text(doc.get("error")), reason=_text(doc.get("reason")),
            error_excerpt=_text(doc.get("error_excerpt")), noise=_number(doc.get("noise")),
            launch_bound=_mapping(doc.get("launch_bound")) or None, kernels=_mapping(doc.get("kernels")) or None,
            per_call=_mapping(doc.get("per_call")) or None,
            extra={k: v for k, v in doc.items() if k not in known},
            null_keys=frozenset(k for k in _OPTIONAL_KEYS if k in doc and doc[k] is None))

    def to_note(self) -> dict[str, Any]:
        """The JSON object a note line holds (docs/archive.md)."""
        doc: dict[str, Any] = {key: getattr(self, key) for key in _MEASUREMENT_KEYS}
        doc["times"], doc["versions"] = dict(self.times), dict(self.versions)
        doc.update({key: getattr(self, key) for key in _OPTIONAL_KEYS
                    if getattr(self, key) is not None or key in self.null_keys})
        doc.update(self.extra)
        return doc


@dataclass(frozen=True)
class KernelsNote:
    """Beside a commit whose own GPU result carried a per-kernel split or per-call times,
    which its trailers cannot hold."""

    device: str | None
    harness: str | None
    timing: str | None
    kernels: KernelSplits
    per_call: PerShape
    when: float

    @classmethod
    def from_note(cls, doc: Mapping[str, Any]) -> KernelsNote:
        return cls(_text(doc.get("device")), _text(doc.get("harness")), _text(doc.get("timing")),
                   _mapping(doc.get("kernels")), _mapping(doc.get("per_call")), _number(doc.get("when")) or 0)

    def to_note(self) -> dict[str, Any]:
        doc = {"kind": "kernels", "device": self.device, "harness": self.harness, "timing": self.timing,
               "kernels": dict(self.kernels), "when": self.when}
        return doc | ({"per_call": dict(self.per_call)} if self.per_call else {})


@dataclass(frozen=True)
class TargetsNote:
    """Beside a commit whose build facts name more than one kernel variant for some target
    (its `Kgit-Target-*` trailers keep only the worst)."""

    targets: TargetLines
    compiler: str | None  # the Triton version that built them
    when: float

    @classmethod
    def from_note(cls, doc: Mapping[str, Any]) -> TargetsNote:
        return cls(_mapping(doc.get("targets")), _text(doc.get("compiler")), _number(doc.get("when")) or 0)

    def to_note(self) -> dict[str, Any]:
        return {"kind": "targets", "targets": dict(self.targets), "compiler": self.compiler, "when": self.when}


@dataclass(frozen=True)
class Notes:
    """Every record of one commit's note, by kind."""

    documents: tuple[dict[str, Any], ...] = ()  # each line as read (kgit log --json shows them whole)
    measurements: tuple[Measurement, ...] = ()  # re-measurements, failed ones included
    kernels: tuple[KernelsNote, ...] = ()
    targets: tuple[TargetsNote, ...] = ()

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """The records of a kind this module does not type (a profile, a model call), as written."""
        return [doc for doc in self.documents if doc.get("kind") == kind]


def json_lines(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a note's text, one a line; any other line is skipped, so a note a
    person or another tool appended to stays readable."""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            yield doc


def parse(text: str) -> Notes:
    """The records of a commit's note text: one JSON object a line; other lines are skipped."""
    documents, measurements, kernels, targets = [], [], [], []
    for doc in json_lines(text):
        documents.append(doc)
        kind = doc.get("kind")
        if not kind:
            measurements.append(Measurement.from_note(doc))
        elif kind == "kernels":
            kernels.append(KernelsNote.from_note(doc))
        elif kind == "targets" and isinstance(doc.get("targets"), dict):
            targets.append(TargetsNote.from_note(doc))
    return Notes(tuple(documents), tuple(measurements), tuple(kernels), tuple(targets))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: object) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
