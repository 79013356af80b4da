"""A cache of the parsed archive under .git/kgit/cache, so a read asks git only for
what is new.

Attempt branches only ever grow (attempt k's parent is attempt k-1), so a read with
a warm cache is one `git log` limited to commits not reachable from the tips seen last
time. The cache is dropped, and the archive read whole, when anything happened that
growth does not explain: a branch deleted or moved sideways, a new baseline, a new
notes commit (re-measurements attach to old commits), or a different cache format.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

FORMAT = 1
_ATTEMPT_FIELDS = ("sha", "parents", "tree", "author", "email", "time", "subject", "block", "raw_notes")


def _load(path: Path) -> dict | None:
    # JSON, not pickle: on hosts where evaluated code can write here, loading must not run code.
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def _save(path: Path, data: dict):
    """Best effort: a read-only or full disk costs the next read its speed, not its answer."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(tmp, path)  # readers see the old cache or the new one, never half of one
    except OSError:
        tmp.unlink(missing_ok=True)


def _grew(old_tip: str, new_tip: str, new_by_sha: dict) -> bool:
    """True when new_tip descends from old_tip through commits read just now."""
    sha = new_tip
    while sha != old_tip:
        attempt = new_by_sha.get(sha)
        if attempt is None or len(attempt.parents) != 1:
            return False
        sha = attempt.parents[0]
    return True


def read(repo, log_args: list[str], refs: dict[str, str], parse) -> list:
    """The archive, from the cache plus ONE `git log` over what is new (or everything).

    `log_args` is the full-read `git log` command without its revision arguments'
    exclusions; `refs` maps each kgit ref (branches, baseline, notes) to its sha.
    """
    from .archive import Attempt

    path = repo.state / "cache" / "archive.json"
    cached = _load(path)
    tips = {ref: sha for ref, sha in refs.items() if ref.startswith("refs/heads/")}
    usable = (cached is not None and cached["baseline"] == refs.get("baseline")
              and cached["notes"] == refs.get("notes") and all(ref in tips for ref in cached["tips"]))
    attempts = None
    if usable:
        # Everything reachable from these is in the cache already (the baseline included).
        old_tips = sorted(set(cached["tips"].values()) | {cached["baseline"]})
        new = parse(repo.git(*log_args, "--stdin", input="".join(f"^{sha}\n" for sha in old_tips)))
        new_by_sha = {a.sha: a for a in new}
        moved = [(cached["tips"][ref], tips[ref]) for ref in cached["tips"] if tips[ref] != cached["tips"][ref]]
        if all(_grew(old, now, new_by_sha) for old, now in moved):
            attempts = new + [Attempt(*record) for record in cached["records"]]
        if not new and not moved and len(tips) == len(cached["tips"]):
            return attempts  # nothing happened since the cache was written
    if attempts is None:
        attempts = parse(repo.git(*log_args))
    # git resolves the branches a moment after `refs` was read; a commit made in between
    # is then both in this read and, next time, after the recorded tip. Keep it once.
    seen: set = set()
    attempts = [a for a in attempts if not (a.sha in seen or seen.add(a.sha))]
    _save(path, {"format": FORMAT, "baseline": refs.get("baseline"), "notes": refs.get("notes"), "tips": tips,
                 "records": [tuple(getattr(a, f) for f in _ATTEMPT_FIELDS) for a in attempts]})
    return attempts
