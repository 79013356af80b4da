"""The cost log: every model call of a `kgit evolve` run, kept whether or not a commit followed.

A call is recorded when its answer arrives, before anything is done with it: a design
whose iteration was skipped, an answer that could not be used, the select and design of a
run stopped by `--max-cost` all cost money and leave no commit. Each run appends its
records, one JSON line per call, to a note under refs/notes/kgit on an anchor blob of its
own (`kgit model calls <run>`), as the lab notebook does (kgit/archive/notebook.py): the
records travel with `kgit sync`, whose notes merge keeps both sides' lines, and the
archive's log never reads them. Each commit of the run carries `Kgit-Run: <run>`, so a
total counts every call once: the log for the runs it holds, the commits' own
`Kgit-Cost-USD` for runs it does not (older ones, or notes a clone never fetched).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid

from kgit.archive.refs import NOTES_REF

KIND = "model-call"
_MARK = f'"kind":"{KIND}"'


def new_run() -> str:
    """A run's name: when it started (UTC) and a random tail, e.g. 20261202T061053Z-3f2a9c."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def anchor_text(run: str) -> str:
    return f"kgit model calls {run}\n"


def anchor_sha(run: str) -> str:
    """The anchor blob's name, as git computes it."""
    data = anchor_text(run).encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Log:
    """The calls of one run, appended as they are answered (the run holds the archive lock)."""

    def __init__(self, repo, run: str | None = None):
        self.repo = repo
        self.run = run or new_run()
        self._anchored = False

    def append(self, record: dict):
        """Record one call: stage, model, tokens, cost_usd (None: no price), ..."""
        if not self._anchored:
            self.repo.git("hash-object", "-w", "--stdin", input=anchor_text(self.run))
            self._anchored = True
        self.repo.add_note(anchor_sha(self.run), {"kind": KIND, "run": self.run, "when": round(time.time(), 3),
                                                  **record})


def read(repo) -> list[dict]:
    """Every call record in the archive, oldest first."""
    commit = repo.resolve(NOTES_REF)
    records = []
    for text in repo.notes(commit).values():
        if _MARK not in text:
            continue
        for line in text.splitlines():
            if _MARK not in line:
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(doc, dict) and doc.get("kind") == KIND:
                records.append(doc)
    return sorted(records, key=lambda r: (r.get("when") or 0))
