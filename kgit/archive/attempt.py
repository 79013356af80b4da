"""One attempt as read from `git log`: its commit fields, its trailers (read through the
schema in kgit/archive/trailers.py, parsed on first use) and its measurement notes.

Also the parser of kgit's `git log -z` records. This module talks to no git: the
repository (kgit/archive/repo.py) runs the command, the cache (cache.py) stores records.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from kgit.archive import notes as notes_mod
from kgit.archive import trailers as tr
from kgit.archive.notes import Measurement, Notes

# One record per commit: fields split by \x1f, records by NUL (git log -z). The raw
# message (%B) is cheaper for git than %(trailers), and its trailer block is parsed
# lazily, only for the attempts a caller actually looks at. The message comes last, so a
# \x1f inside it cannot shift the fields. Notes are read apart (repo.Repo.notes): git's
# note lookup for every commit (%N) cost a 100,000-attempt log a third of its time.
FIELDS = ["%H", "%P", "%T", "%an", "%ae", "%at", "%B"]
LOG_FORMAT = "%x1f".join(FIELDS)
_TRAILER_LINE = re.compile(r"^(Kgit-[A-Za-z0-9-]+): ?(.*)$", re.M)
# Kept at the end of an attempt's trailer block in memory (never in git: a message cannot hold
# NUL) when lines of its body read as kgit trailers, which kgit's writer never leaves there.
BODY_TRAILERS = "\x00kgit: trailers in the body"


T = TypeVar("T")


class _TrailerValue(Generic[T]):
    """An attribute of `Attempt` read from its trailers: the `trailers.SCHEMA` row whose
    `attr` is the attribute's name, parsed with the others on first use."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _TrailerValue[T]: ...
    @overload
    def __get__(self, obj: Attempt, owner: type) -> T: ...
    def __get__(self, obj: Attempt | None, owner: type) -> T | _TrailerValue[T]:
        if obj is None:
            return self
        value: T = obj._values[self.name]
        return value


@dataclass
class Attempt:
    sha: str
    parents: list[str]
    tree: str
    author: str
    email: str
    time: int
    subject: str
    block: str  # the message's last paragraph: its trailers, parsed on first use
    raw_notes: str = ""

    # The trailer schema's attributes (kgit/archive/trailers.py SCHEMA, one row each; a test
    # holds the two lists equal). Text trailers read "" or None when absent, numbers None.
    experiment = _TrailerValue[int]()
    attempt = _TrailerValue[int]()
    branch = _TrailerValue[str]()
    base = _TrailerValue[str | None]()
    reference = _TrailerValue[str | None]()
    hypothesis = _TrailerValue[str]()
    expected_gain = _TrailerValue[str | None]()
    status = _TrailerValue[str]()
    reason = _TrailerValue[str | None]()
    device = _TrailerValue[str]()
    timing = _TrailerValue[str]()
    protocol = _TrailerValue[str]()
    geomean_us = _TrailerValue[float | None]()
    noise = _TrailerValue[str | None]()
    times = _TrailerValue[dict[str, float]]()
    cause = _TrailerValue[str | None]()
    harness = _TrailerValue[str]()
    evaluator = _TrailerValue[str]()
    eval_s = _TrailerValue[float | None]()
    speedup = _TrailerValue[float | None]()
    speedup_baseline = _TrailerValue[float | None]()
    model = _TrailerValue[str]()
    cost = _TrailerValue[float | None]()
    tokens = _TrailerValue[float | None]()
    run = _TrailerValue[str | None]()
    squash_of = _TrailerValue[str | None]()
    targets = _TrailerValue[dict[str, str]]()
    targets_compiler = _TrailerValue[str | None]()

    @functools.cached_property
    def trailers(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for key, value in _TRAILER_LINE.findall(self.block):
            found.setdefault(key, []).append(value.strip())
        return found

    @functools.cached_property
    def _values(self) -> dict[str, Any]:
        """Every schema attribute, typed, from one pass over the trailer lines.

        Equivalent to reading `trailers` (same line rule, values stripped, the last of a
        repeated key wins), but without a regex and a dict of lists per attempt:
        `kgit log --json` reads 100,000 of these.
        """
        last: dict[str, str] = {}
        repeated: dict[str, list[str]] = {}
        families: dict[str, dict[str, str]] = {}
        refused = None  # why this commit's trailers cannot be kgit's own
        for line in self.block.split("\n"):
            if line == BODY_TRAILERS:
                refused = "lines of its message body read as kgit trailers"
                continue
            key, sep, value = line.partition(":")
            if not sep:
                continue
            if key in _REPEATED:
                repeated.setdefault(key, []).append(value)
            elif key in tr.BY_KEY:
                if key in last:
                    refused = f"{key} appears more than once"
                last[key] = value
            elif key.startswith(_FAMILY_PREFIXES):
                found = tr.family_of(key)
                if found:
                    named = families.setdefault(found[0].attr, {})
                    if found[1] in named:
                        refused = f"{key} appears more than once"
                    named[found[1]] = value.strip()
        # Kind by kind rather than a converter call per row: this runs 100,000 times.
        out: dict[str, Any] = {}
        for key, attr, default in _TEXT:
            raw = last.get(key)
            out[attr] = default if raw is None else raw.strip()
        for key, attr in _INT:
            raw = last.get(key)
            if raw is None:
                out[attr] = 0
            else:
                try:
                    out[attr] = int(raw.strip())
                except ValueError:  # a hand-edited commit: -1 keeps it out of the baseline and every experiment
                    out[attr] = -1
        for key, attr in _FLOAT:
            raw = last.get(key)
            if raw is None:
                out[attr] = None
            else:
                try:
                    out[attr] = float(raw.strip())  # float() alone keeps some characters strip() removes
                except ValueError:
                    out[attr] = None
        for key, attr in _TIMES:
            out[attr], twice = _times(repeated.get(key))
            if twice:
                refused = f"{key} names a shape more than once"
        for attr in _FAMILY_ATTRS:
            out[attr] = families.get(attr, {})
        if refused is not None:
            # A forged or hand-made trailer block: kept in the log, never ranked or trusted.
            out.update(status="refused", reason=f"malformed trailers: {refused}", geomean_us=None, speedup=None,
                       speedup_baseline=None)
            for _key, attr in _TIMES:
                out[attr] = {}
        return out

    @functools.cached_property
    def notes(self) -> Notes:
        """The records of its note (refs/notes/kgit), typed by kind."""
        return notes_mod.parse(self.raw_notes) if self.raw_notes else Notes()

    @property
    def is_baseline(self) -> bool:
        return self.experiment == 0

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.geomean_us is not None

    def measurement(self) -> Measurement:
        """The commit's own measurement, as a note's would read; its time is the commit's."""
        return Measurement(device=self.device, harness=self.harness, evaluator=self.evaluator or None,
                           timing=self.timing, protocol=self.protocol or None, geomean_us=self.geomean_us,
                           times=self.times, when=self.time, source="commit")

    def measurements(self) -> list[Measurement]:
        """The commit's own measurement (when correct and timed), then every timed re-measurement."""
        own = [self.measurement()] if self.ok else []
        return own + [m for m in self.notes.measurements if m.geomean_us]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sha": self.sha, "parents": self.parents}
        values = self._values
        for name, attr in _IN_JSON:
            out[name] = values[attr]
        out.update(author=self.author, time=self.time, subject=self.subject, notes=list(self.notes.documents))
        return out


def _times(raws: list[str] | None) -> tuple[dict[str, float], bool]:
    """{shape: us} from the repeated `<shape> <us>` lines, and whether a shape came twice."""
    out, twice = {}, False
    for value in raws or ():
        key, _, number = value.strip().rpartition(" ")
        try:
            us = float(number)
        except ValueError:
            continue
        twice = twice or key in out
        out[key] = us
    return out, twice


_TEXT = [(t.key, t.attr, t.default) for t in tr.SCHEMA if t.kind == "text"]
_INT = [(t.key, t.attr) for t in tr.SCHEMA if t.kind == "int"]
_FLOAT = [(t.key, t.attr) for t in tr.SCHEMA if t.kind == "float"]
_TIMES = [(t.key, t.attr) for t in tr.SCHEMA if t.kind == "times"]
_FAMILY_ATTRS = [t.attr for t in tr.FAMILIES]
_REPEATED = {t.key for t in tr.SCHEMA if t.kind == "times"}
_FAMILY_PREFIXES = tuple(t.key for t in tr.FAMILIES)
_IN_JSON = [(t.json, t.attr) for t in tr.SCHEMA if t.json]


def parse_log(out: str, notes: dict[str, str] | None = None) -> list[Attempt]:
    """The kgit attempts in `git log -z --format=LOG_FORMAT` output; `notes`: the note text by sha."""
    return parse_records(out.split("\0"), notes)


def parse_records(records: Iterable[str], notes: dict[str, str] | None = None) -> list[Attempt]:
    """The kgit attempts among `git log -z --format=LOG_FORMAT` records; `notes`: the note text by sha."""
    attempts = []
    last = len(FIELDS) - 1
    notes = notes or {}
    for record in records:
        fields = record.split("\x1f", last)
        if len(fields) != len(FIELDS):
            continue
        sha, parents, tree, author, email, when, message = fields
        end = message.rstrip("\n")
        cut = end.rfind("\n\n")
        block = end[cut + 2:] if cut >= 0 else ""
        # Only kgit's commits carry the experiment trailer; the rest is the user's history.
        if "Kgit-Experiment:" not in block:
            continue
        # The body: after the subject (a slug may start with "kgit-"), before the trailer block.
        body = end.find("\n")
        if 0 <= body < cut and tr.TRAILER_LIKE.search(end, body, cut):
            block += "\n" + BODY_TRAILERS
        sha = sha.lstrip("\n")
        subject = message.lstrip("\n").split("\n", 1)[0]
        attempts.append(Attempt(sha, parents.split(), tree, author, email, int(when or 0),
                                subject, block, notes.get(sha, "")))
    return attempts
