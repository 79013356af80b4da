"""Attempt commit messages: subject, body and git trailers, written and parsed.

The lowercase word "speedup" appears only in messages of timed, correct attempts, so
`git log --all --grep speedup` lists exactly those; everything else kgit quotes
(hypotheses, notes, errors) is scrubbed of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SPEEDUP = re.compile(r"speedup", re.I)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
FAILED_SUBJECT = {
    "incorrect": "incorrect", "compile-error": "compile error", "runtime-error": "runtime error",
    "timeout": "timeout", "crash": "crash", "rejected": "rejected", "unsupported": "unsupported here",
}


def scrub(text: str) -> str:
    """Text safe to quote in any attempt: no "speedup" in any case, no control characters."""
    return _CONTROL.sub(" ", _SPEEDUP.sub("speed-up", text or ""))


def one_line(text: str, limit: int = 2000) -> str:
    """A trailer value: one line, no control characters, bounded length."""
    flat = " ".join(_CONTROL.sub(" ", str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def slugify(text: str, words: int = 5, limit: int = 40) -> str:
    parts = re.findall(r"[a-z0-9]+", (text or "").lower())
    slug = "-".join(parts[:words])[:limit].strip("-")
    return scrub(slug) or "experiment"


def subject(slug: str, status: str, speedup: float | None, geomean_us: float | None, reason: str | None = None) -> str:
    if status == "ok":
        ratio = f"{speedup:.2f}x" if speedup else "n/a"
        return f"{slug}: speedup {ratio} vs base (geomean {geomean_us:.1f} us)"
    word = FAILED_SUBJECT.get(status, status)
    if status in ("rejected", "unsupported") and reason:
        word = f"{word} ({one_line(reason, 120)})"
    return scrub(f"{slug}: {word}")


@dataclass
class Message:
    subject: str
    paragraphs: list = field(default_factory=list)
    trailers: list = field(default_factory=list)  # [(key, value)], keys may repeat

    def render(self, ok: bool) -> str:
        # Control characters go in every case: git refuses a NUL in a message outright.
        clean = (lambda t: _CONTROL.sub(" ", t)) if ok else scrub
        # git stops looking for trailers at a line starting with "---" (a patch separator),
        # so quoted diffs and tracebacks get those lines indented.
        body = [re.sub(r"(?m)^---", " ---", clean(p).strip()) for p in self.paragraphs if p and p.strip()]
        lines = [f"{k}: {one_line(clean(str(v)))}" for k, v in self.trailers]
        parts = [clean(self.subject).strip()] + body + ["\n".join(lines)] if lines else [clean(self.subject)] + body
        return "\n\n".join(parts).rstrip() + "\n"


def parse(block: str) -> dict[str, list[str]]:
    """Parse `%(trailers:only,unfold)` output (or the trailer paragraph itself)."""
    found: dict[str, list[str]] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and " " not in key.strip():
            found.setdefault(key.strip(), []).append(value.strip())
    return found
