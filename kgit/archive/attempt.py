"""One attempt as read from `git log`: its commit fields, its trailers (read through the
schema in kgit/archive/trailers.py, parsed on first use) and its measurement notes.

Also the parser of kgit's `git log -z` records. This module talks to no git: the
repository (kgit/archive/repo.py) runs the command, the cache (cache.py) stores records.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from kgit.archive import trailers as tr

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


@dataclass
class Attempt:
    sha: str
    parents: list
    tree: str
    author: str
    email: str
    time: int
    subject: str
    block: str  # the message's last paragraph: its trailers, parsed on first use
    raw_notes: str = ""

    @functools.cached_property
    def trailers(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for key, value in _TRAILER_LINE.findall(self.block):
            found.setdefault(key, []).append(value.strip())
        return found

    @functools.cached_property
    def _values(self) -> dict:
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
        out = {}
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
            out.update(status="refused", reason=f"malformed trailers: {refused}", geomean=None, speedup=None,
                       speedup_baseline=None)
            for _key, attr in _TIMES:
                out[attr] = {}
        return out

    @functools.cached_property
    def notes(self) -> list[dict]:
        return _parse_notes(self.raw_notes) if self.raw_notes else []

    def _one(self, key, default=None):
        """The last value of trailer `key` (stripped), or `default`."""
        values = self.trailers.get(key)
        return values[-1] if values else default

    @property
    def is_baseline(self) -> bool:
        return self.experiment == 0

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.geomean is not None

    def measurement(self) -> dict:
        """The commit's own measurement in the shape of a note record."""
        return {"device": self.device, "harness": self.harness, "evaluator": self.evaluator or None,
                "timing": self.timing, "protocol": self.protocol or None, "geomean_us": self.geomean,
                "times": self.times, "source": "commit"}

    def measurements(self) -> list[dict]:
        own = [self.measurement()] if self.ok else []
        return own + [n for n in self.notes if n.get("geomean_us")]

    def to_json(self) -> dict:
        out = {"sha": self.sha, "parents": self.parents}
        values = self._values
        for name, attr in _IN_JSON:
            out[name] = values[attr]
        out.update(author=self.author, time=self.time, subject=self.subject, notes=self.notes)
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
for _t in tr.SCHEMA:
    setattr(Attempt, _t.attr, property(lambda self, _a=_t.attr: self._values[_a], doc=f"The {_t.key} trailer."))
_IN_JSON = [(t.json, t.attr) for t in tr.SCHEMA if t.json]


def parse_log(out: str, notes: dict | None = None) -> list[Attempt]:
    """The kgit attempts in `git log -z --format=LOG_FORMAT` output; `notes`: the note text by sha."""
    return parse_records(out.split("\0"), notes)


def parse_records(records, notes: dict | None = None) -> list[Attempt]:
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


def _parse_notes(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
