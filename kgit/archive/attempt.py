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
# lazily, only for the attempts a caller actually looks at.
FIELDS = ["%H", "%P", "%T", "%an", "%ae", "%at", "%B", "%N"]
LOG_FORMAT = "%x1f".join(FIELDS)
_TRAILER_LINE = re.compile(r"^(Kgit-[A-Za-z0-9-]+): ?(.*)$", re.M)


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
        for line in self.block.split("\n"):
            key, sep, value = line.partition(":")
            if not sep:
                continue
            if key in _REPEATED:
                repeated.setdefault(key, []).append(value)
            elif key in tr.BY_KEY:
                last[key] = value
            elif key.startswith(_FAMILY_PREFIXES):
                found = tr.family_of(key)
                if found:
                    families.setdefault(found[0].attr, {})[found[1]] = value.strip()
        return {t.attr: (families.get(t.attr, {}) if t.kind == "family" else
                         _CONVERT[t.kind](t, repeated.get(t.key) if t.kind == "times" else last.get(t.key)))
                for t in tr.SCHEMA}

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
        return {"device": self.device, "harness": self.harness, "timing": self.timing,
                "geomean_us": self.geomean, "times": self.times, "source": "commit"}

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


def _text(t: tr.Trailer, raw: str | None):
    return t.default if raw is None else raw.strip()


def _int(t: tr.Trailer, raw: str | None) -> int:
    # A hand-edited commit may carry anything here; -1 keeps it out of the
    # baseline (0) and out of every real experiment instead of breaking `kgit log`.
    try:
        return int("0" if raw is None else raw.strip())
    except ValueError:
        return -1


def _float(t: tr.Trailer, raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw.strip())  # float() alone keeps some characters strip() removes (\x1c-\x1f)
    except ValueError:
        return None


def _times(t: tr.Trailer, raws: list[str] | None) -> dict[str, float]:
    """{shape: us} from the repeated `<shape> <us>` lines."""
    out = {}
    for value in raws or ():
        key, _, number = value.strip().rpartition(" ")
        try:
            out[key] = float(number)
        except ValueError:
            continue
    return out


_CONVERT = {"text": _text, "int": _int, "float": _float, "times": _times}
_REPEATED = {t.key for t in tr.SCHEMA if t.kind == "times"}
_FAMILY_PREFIXES = tuple(t.key for t in tr.FAMILIES)
for _t in tr.SCHEMA:
    setattr(Attempt, _t.attr, property(lambda self, _a=_t.attr: self._values[_a], doc=f"The {_t.key} trailer."))
_IN_JSON = [(t.json, t.attr) for t in tr.SCHEMA if t.json]


def parse_log(out: str) -> list[Attempt]:
    """The kgit attempts in `git log -z --format=LOG_FORMAT` output."""
    return parse_records(out.split("\0"))


def parse_records(records) -> list[Attempt]:
    """The kgit attempts among `git log -z --format=LOG_FORMAT` records."""
    attempts = []
    width = len(FIELDS)
    for record in records:
        fields = record.split("\x1f")
        if len(fields) != width:
            continue
        sha, parents, tree, author, email, when, message, notes = fields
        end = message.rstrip("\n")
        cut = end.rfind("\n\n")
        block = end[cut + 2:] if cut >= 0 else ""
        # Only kgit's commits carry the experiment trailer; the rest is the user's history.
        if "Kgit-Experiment:" not in block:
            continue
        subject = message.lstrip("\n").split("\n", 1)[0]
        attempts.append(Attempt(sha.lstrip("\n"), parents.split(), tree, author, email, int(when or 0),
                                subject, block, notes))
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
