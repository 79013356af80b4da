"""The campaign's lab notebook: the lessons the designer has drawn so far, versioned in git.

Each version is one JSON line in a note under refs/notes/kgit, attached to a fixed blob
(the "anchor", `kgit lab notebook`) instead of to a commit: it travels with `kgit sync`
like every measurement (a notes merge keeps both sides' lines), yet the archive's hot
read (`git log --notes`) never loads it. The latest version by `when` is the notebook;
older ones stay as its history.
"""

from __future__ import annotations

import hashlib
import time

from kgit.archive.notes import json_lines
from kgit.archive.repo import NOTES_REF

ANCHOR_TEXT = "kgit lab notebook\n"
MAX_LESSONS = 12
LESSON_CHARS = 300


def anchor_sha() -> str:
    """The blob's name, as git computes it (no process needed to read)."""
    data = ANCHOR_TEXT.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def clean(lessons) -> list[str]:
    """At most MAX_LESSONS one-line lessons, each bounded, duplicates dropped."""
    out = []
    for item in lessons or []:
        text = " ".join(str(item).split())[:LESSON_CHARS]
        if text and text not in out:
            out.append(text)
    return out[:MAX_LESSONS]


def history(repo) -> list[dict]:
    """Every version, oldest first: {"lessons": [...], "when": unix time, "source": who wrote it}."""
    text = repo.git("notes", "--ref", NOTES_REF, "show", anchor_sha(), check=False)
    versions = [doc for doc in json_lines(text) if isinstance(doc.get("lessons"), list)]
    return sorted(versions, key=lambda d: (d.get("when", 0), d.get("seq", 0)))


def lessons(repo) -> list[str]:
    """The current lessons ([] before the first design)."""
    versions = history(repo)
    return clean(versions[-1]["lessons"]) if versions else []


def write(repo, new_lessons, source: str) -> list[str]:
    """Store a new version (unless it equals the current one); returns what is stored."""
    cleaned = clean(new_lessons)
    versions = history(repo)
    if versions and clean(versions[-1]["lessons"]) == cleaned:
        return cleaned
    repo.git("hash-object", "-w", "--stdin", input=ANCHOR_TEXT)
    # `seq` orders two versions written within the same second.
    repo.add_note(anchor_sha(), {"lessons": cleaned, "when": int(time.time()), "seq": len(versions),
                                 "source": source})
    return cleaned


def text(items: list[str]) -> str:
    return "\n".join(f"- {item}" for item in items) if items else "(empty: no lessons recorded yet)"
