"""The judge's cache of build facts: a candidate evaluated again costs no cross-compile.

Build facts (harness/targets.py) are what the candidate's process reports about the
launches it made during the checks. They depend on nothing but what the judge itself
can read before it asks: the candidate's editable files, the problem folder (its
shapes and input makers), the target names, the host's device and the torch, Triton
and Python versions, and the harness's own compile code. The key is a SHA-256 of all
of those, computed by the judge from bytes it reads itself, never from anything the
runner says, so the facts a runner reported are only ever served again to an
evaluation of byte-identical candidate code under the same problem and software: code
that could have told the same lies itself. That is why one candidate cannot plant
facts for another here.

Only the judge reads and writes the folder (kgit passes it as spec["targets_cache"],
under the kernel repository's .git/kgit, which the sandbox hides from the runner; see
docs/targets.md for hosts where the sandbox cannot). Entries are JSON, never pickle,
written to a temporary name and renamed, so a crash leaves either the whole entry or
none. Facts from an interrupted check loop or a compile that crashed or overran are
not stored: they say more about this machine's load than about the kernel.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

from kgit_harness.spec import Spec

SCHEMA = "kgit.target-facts/1"
_OWN_CODE = (Path(__file__).with_name("targets.py"), Path(__file__))


def key(spec: Spec, task, names, doc: dict) -> str:
    """The entry's name: a digest of everything the facts of this evaluation depend on."""
    h = hashlib.sha256()

    def add(label: str, data: bytes):
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    add("schema", SCHEMA.encode())
    add("names", json.dumps(list(names)).encode())
    add("host", json.dumps({"device": doc.get("device"), "versions": doc.get("versions"),
                            "triton": _triton_version()}, sort_keys=True).encode())
    for path in _OWN_CODE:
        add(f"harness:{path.name}", path.read_bytes())
    candidate_dir = Path(spec.candidate_dir)
    for name in sorted(task.files):
        path = candidate_dir / name
        add(f"candidate:{name}", path.read_bytes() if path.is_file() else b"\0missing")
    problem_dir = Path(spec.problem_dir)
    for path in problem_files(problem_dir):
        add(f"problem:{path.relative_to(problem_dir).as_posix()}", path.read_bytes())
    return h.hexdigest()


def problem_files(problem_dir: Path) -> list[Path]:
    """The problem folder's files in a fixed order, bytecode caches left out: what a digest covers."""
    return sorted(p for p in Path(problem_dir).rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def write_atomic(path: Path, text: str) -> bool:
    """`text` into `path` by a temporary name and a rename: a crash leaves the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


def _triton_version() -> str | None:
    """Triton's version from its installed metadata (the judge does not import Triton)."""
    from importlib import metadata

    for dist in ("triton", "pytorch-triton-rocm", "pytorch-triton"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


class Cache:
    """One evaluation's entry in the folder (or no cache when `folder` is None)."""

    def __init__(self, folder: str | None, digest: str):
        self.path = Path(folder) / digest[:2] / f"{digest}.json" if folder else None
        self.digest = digest

    def read(self) -> dict | None:
        """The stored facts, marked `cached`, or None (no entry, or one that does not parse)."""
        if self.path is None:
            return None
        try:
            entry = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("schema") != SCHEMA or entry.get("key") != self.digest:
            return None
        facts = entry.get("targets")
        if not isinstance(facts, dict):
            return None
        return {**facts, "cached": True, "waited_s": 0.0}

    def write(self, facts: dict) -> bool:
        """Store complete facts; False (nothing stored) for partial ones or an unwritable folder."""
        if self.path is None or not storable(facts):
            return False
        return write_atomic(self.path, json.dumps({"schema": SCHEMA, "key": self.digest, "targets": facts}))


def storable(facts: dict) -> bool:
    """Facts worth serving again: every target answered (none crashed, overran or was refused)."""
    results = facts.get("results")
    if not isinstance(results, dict) or not results or facts.get("cached"):
        return False
    return all(isinstance(r, dict) and not str(r.get("error") or "").startswith("not built:") for r in results.values())
