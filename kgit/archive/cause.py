"""The one-line cause of a failed attempt, kept as the `Kgit-Cause` trailer so the
archive's single `git log` read carries it to the select table and the design history
(the full error excerpt stays in the commit body).
"""

from __future__ import annotations

import re

TRAILER = "Kgit-Cause"
CHARS = 160
_PATH = re.compile(r'File "[^"]*/([^/"]+)"')


def of_error(error: str | None) -> str:
    """A traceback's last line (the exception), else the error's first line (the first failed shape)."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if any(line.startswith("Traceback") for line in lines) else lines[0]
    flat = " ".join(_PATH.sub(r'File "\1"', line).split())
    return flat if len(flat) <= CHARS else flat[: CHARS - 3] + "..."


def trailer(result) -> list:
    """[("Kgit-Cause", its one line)] for a failed harness `Result`."""
    if result.status == "ok":
        return []
    text = of_error(result.error)
    return [(TRAILER, text)] if text else []


def of_attempt(a) -> str:
    """The stored cause: the rejection rule when there is one, else the error's one line."""
    for key in ("Kgit-Reason", TRAILER):
        values = a.trailers.get(key) or []
        if values:
            return values[-1]
    return ""
