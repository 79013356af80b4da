"""A cache of the parsed archive under .git/kgit/cache, so a read asks git only for
what is new.

Attempt branches only ever grow (attempt k's parent is attempt k-1), so a read with
a warm cache is one `git log` limited to commits not reachable from the tips seen last
time. The cache is dropped, and the archive read whole, when anything happened that
growth does not explain: a branch deleted or moved sideways, a new baseline, or a
different cache format. The records hold no notes: re-measurements attach notes to old
commits, so every read takes the notes whole from git (repo.Repo.notes, beside the log),
and a new note renders only its own attempt's `kgit log --json` object again (below).

Two files: `archive-records.jsonl`, one JSON array per attempt, separated by commas
and only ever appended to (so growth costs the new records, not a rewrite of 100 MB),
and `archive-state.json`, the tips, how many records (and bytes) are valid (a crash
mid-append leaves extra bytes, which are ignored), the `segments` they were appended in
(each newer than the ones before it, so a read returns the last segment first and the
order is git's, newest first, however the records got there) and a `generation` that
changes whenever the records are written whole. JSON, not pickle: evaluated code may be able
to write here on some hosts, and loading must not run anything. All 100,000 records
are read with one orjson call, with the garbage collector paused; a whole read writes
them piece by piece while git still formats the rest.

Beside them, `archive-log.jsonl` and `archive-log-state.json` keep each attempt's
`kgit log --json` object, rendered (`log_json`): an attempt's object depends only on its
commit, which never changes, and its notes, whose digest the state keeps for each
attempt that has any; a new note renders that attempt again, and only it.
"""

from __future__ import annotations

import gc
import hashlib
import json
import operator
import os
import uuid
import zlib
from contextlib import contextmanager
from pathlib import Path

import orjson

from kgit.archive.attempt import Attempt

FORMAT = 9
_ATTEMPT_FIELDS = ("sha", "parents", "tree", "author", "email", "time", "subject", "block")
_record = operator.attrgetter(*_ATTEMPT_FIELDS)


def _paths(repo) -> tuple[Path, Path]:
    root = repo.state / "cache"
    return root / "archive-state.json", root / "archive-records.jsonl"


def _log_paths(repo) -> tuple[Path, Path]:
    root = repo.state / "cache"
    return root / "archive-log-state.json", root / "archive-log.jsonl"


def _load(state_path: Path, records_path: Path):
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        if not isinstance(state, dict) or state.get("format") != FORMAT or not state.get("generation"):
            return None, None
        size = state["bytes"]
        # The records are comma-separated, so "[" + the valid bytes + "]" is one JSON
        # array: one parse for the whole archive, read in place.
        buf = bytearray(size + 2)
        with open(records_path, "rb") as f:
            if f.readinto(memoryview(buf)[1:size + 1]) != size:
                return None, None
        buf[0], buf[-1] = ord("["), ord("]")
        records = orjson.loads(buf)
        if len(records) != state["lines"] or not all(type(r) is list and len(r) == _WIDTH for r in records):
            return None, None
        if sum(state["segments"]) != len(records):
            return None, None
        return state, records
    except (OSError, ValueError, KeyError, TypeError):
        return None, None


_WIDTH = len(_ATTEMPT_FIELDS)


@contextmanager
def gc_paused():
    """No cyclic garbage collection while 100,000 attempts' dicts are made: it would scan
    the growing heap again and again (half of a warm read). The data holds no cycles."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:  # another thread that paused it first turns it back on
            gc.enable()


def _attempt(record: list) -> Attempt:
    return Attempt(*record)


def _write_state(path: Path, state: dict):
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, path)  # readers see the old state or the new one, never half of one
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _save(state_path: Path, records_path: Path, state: dict, attempts: list, append_at: int):
    """Best effort: a read-only or full disk costs the next read its speed, not its answer.

    `attempts` are appended after the first `append_at` bytes of the records.
    """
    data = orjson.dumps([_record(a) for a in attempts])[1:-1]  # one call; the array's brackets off
    if data and append_at:
        data = b"," + data
    try:
        with open(records_path, "r+b") as f:
            f.truncate(append_at)  # drop whatever a crashed append left past the valid lines
            f.seek(append_at)
            f.write(data)
        _write_state(state_path, {**state, "bytes": append_at + len(data)})
    except OSError:
        pass


def _read_whole(state_path: Path, records_path: Path, state: dict, batches) -> list:
    """Every attempt of `batches` (lists, as git writes them; a repeated sha kept once), and
    the records written whole, best effort as `_save`.

    Each list is encoded and written as it arrives, while git formats the next: on two
    cores this takes the writing off the critical path of a cold read (benchmarks/archive_scale.py).
    """
    attempts: list = []
    seen: set = set()
    tmp = records_path.with_name(f"{records_path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    out = _open_quietly(state_path, tmp)
    size = 0
    try:
        for batch in batches:
            fresh = []
            for a in batch:  # an attempt once, however many batches (or places in one) hold it
                if a.sha not in seen:
                    seen.add(a.sha)
                    fresh.append(a)
            attempts += fresh
            if out is None or not fresh:
                continue
            data = orjson.dumps([_record(a) for a in fresh])[1:-1]
            try:
                out.write(b"," + data if size else data)
                size += len(data) + (1 if size else 0)
            except OSError:  # a full disk: the read goes on, uncached
                _close_quietly(out)
                out = None
        if out is not None:
            try:
                out.close()
                out = None
                os.replace(tmp, records_path)
                _write_state(state_path, {**state, "lines": len(attempts), "bytes": size, "segments": [len(attempts)]})
            except OSError:
                pass
    finally:  # also when git failed mid-read: its error goes on, the half-written file goes
        _close_quietly(out)
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
    return attempts


def _newest_first(records: list, segments: list[int]) -> list:
    """The records as attempts in git's order: the last appended segment first."""
    out: list = []
    end = len(records)
    for count in reversed(segments):
        out += map(_attempt, records[end - count:end])
        end -= count
    return out


def _open_quietly(state_path: Path, tmp: Path):
    """The new records file, or None where it cannot be written; the old state dropped
    first, since no state is valid while the records are rewritten."""
    try:
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.unlink(missing_ok=True)
        return open(tmp, "wb")
    except OSError:
        return None


def _close_quietly(out) -> None:
    """Close a records file being given up (None: nothing to close)."""
    try:
        if out is not None:
            out.close()
    except OSError:
        pass


def _grew(old_tip: str, new_tip: str, new_by_sha: dict) -> bool:
    """True when new_tip descends from old_tip through commits read just now."""
    sha = new_tip
    while sha != old_tip:
        attempt = new_by_sha.get(sha)
        if attempt is None or len(attempt.parents) != 1:
            return False
        sha = attempt.parents[0]
    return True


def read(repo, refs: dict[str, str], log, notes) -> list:
    """The archive's attempts; `notes()` starts reading the note text by sha, beside the
    log, and returns what waits for it."""
    with gc_paused():
        return _read(repo, refs, log, notes)


def log_json(repo, refs: dict[str, str], log, notes, render) -> bytes:
    """The archive as one JSON array of `render(attempt)` objects (bytes, compact), in
    `read`'s order.

    The objects are kept one per line in that order, with the refs they were read at:
    while no kgit ref has moved (no attempt, no note since), the kept lines are the
    answer and nothing else is read. Otherwise the archive is read, each object is taken
    from the kept lines by its sha and the text of its notes (a commit never changes, so
    only a new attempt or a new note renders), and the lines are written again.
    """
    state_path, lines_path = _log_paths(repo)
    key = _refs_key(refs)
    state, data = _load_rendered(state_path, lines_path)
    if state is not None and state["refs"] == key:
        return b"[" + data[:-1].replace(b"\n", b",") + b"]"
    with gc_paused():
        attempts = _read(repo, refs, log, notes)
        kept = {line[_SHA_AT:_SHA_AT + 40].decode("ascii", "replace"): line
                for line in data.split(b"\n")[:-1]} if state is not None else {}
        was_noted = state["noted"] if state is not None else {}
        pieces, noted = [], {}
        for a in attempts:
            notes_key = _notes_key(a.raw_notes)
            piece = kept.get(a.sha) if was_noted.get(a.sha) == notes_key else None
            if piece is None:
                piece = render(a)
            if notes_key is not None:
                noted[a.sha] = notes_key
            pieces.append(piece)
        _save_rendered(state_path, lines_path, pieces, noted, key)
        return b"[" + b",".join(pieces) + b"]"


_SHA_AT = len(b'{"sha":"')  # every rendered object starts with its sha (Attempt.to_json)


def _refs_key(refs: dict[str, str]) -> str:
    """One digest of every kgit ref and its sha: equal only when nothing was committed or noted."""
    return _digest("\n".join(f"{name} {sha}" for name, sha in sorted(refs.items())).encode("utf-8"))


def _notes_key(text: str) -> str | None:
    """What a rendered object's notes are checked by: None for none, else a digest of their text."""
    return _digest(text.encode("utf-8")) if text else None


def _digest(*parts: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part)
    return h.hexdigest()


def _load_rendered(state_path: Path, lines_path: Path) -> tuple[dict | None, bytes]:
    """(the state, the kept lines), or (None, b"") where none are usable.

    The checksum catches a damaged or half-written file (it is printed as it is, so it
    must be exactly what was rendered); like the records, the file is not proof against
    someone who rewrites it and its state together.
    """
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        if (not isinstance(state, dict) or state.get("format") != FORMAT or not isinstance(state.get("noted"), dict)
                or not isinstance(state.get("refs"), str)):
            return None, b""
        with open(lines_path, "rb") as f:
            data = f.read(state["bytes"] + 1)
        if len(data) != state["bytes"] or zlib.crc32(data) != state["crc32"]:
            return None, b""
        # Compact JSON holds no raw newline, so the lines are the objects.
        if data and (not data.endswith(b"\n") or not data.startswith(b'{"sha":"')
                     or data.count(b'\n{"sha":"') != data.count(b"\n") - 1):
            return None, b""
        return state, data
    except (OSError, ValueError, KeyError, TypeError):
        return None, b""


def _save_rendered(state_path: Path, lines_path: Path, pieces: list, noted: dict, refs_key: str):
    """Best effort, as `_save`: the rendered objects, in order, one per line, and their state."""
    data = b"".join(piece + b"\n" for piece in pieces)
    try:
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.unlink(missing_ok=True)
        tmp = lines_path.with_name(f"{lines_path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, lines_path)
        _write_state(state_path, {"format": FORMAT, "bytes": len(data), "crc32": zlib.crc32(data),
                                  "noted": noted, "refs": refs_key})
    except OSError:
        pass


def _read(repo, refs: dict[str, str], log, notes) -> list:
    """The archive, from the cache plus ONE `git log` over what is new (or everything),
    with its notes attached.

    `refs` maps each kgit ref (branches, "baseline", "notes") to its sha; `log(exclude)`
    runs the archive's `git log`, less what is reachable from the shas `exclude`, and
    yields its attempts in lists; `notes()` starts reading the note text by sha beside the
    log and returns what waits for it.
    """
    wait = notes()  # started now: git reads the notes while it writes the log
    attempts = _read_records(repo, refs, log)
    by_sha = wait()
    if by_sha:
        for a in attempts:
            a.raw_notes = by_sha.get(a.sha, "")
    return attempts


def _read_records(repo, refs: dict[str, str], log) -> list:
    state_path, records_path = _paths(repo)
    cached, records = _load(state_path, records_path)
    tips = {ref: sha for ref, sha in refs.items() if ref.startswith("refs/heads/")}
    usable = (cached is not None and cached["baseline"] == refs.get("baseline")
              and all(ref in tips for ref in cached["tips"]))
    state = {"format": FORMAT, "baseline": refs.get("baseline"), "tips": tips}
    if usable:
        state["generation"] = cached["generation"]
        # Everything reachable from these is in the cache already (the baseline included).
        old_tips = sorted(set(cached["tips"].values()) | {cached["baseline"]})
        new = [a for batch in log(old_tips) for a in batch]
        new_by_sha = {a.sha: a for a in new}
        moved = [(cached["tips"][ref], tips[ref]) for ref in cached["tips"] if tips[ref] != cached["tips"][ref]]
        if all(_grew(old, now, new_by_sha) for old, now in moved):
            # git resolves the branches a moment after `refs` was read; a commit made in
            # between can come back as new although the cache has it. Keep it once.
            if new:
                known = {r[0] for r in records}
                new = [a for a in new if a.sha not in known]
            segments = cached["segments"] + ([len(new)] if new else [])
            if new or tips != cached["tips"]:
                _save(state_path, records_path, {**state, "lines": len(records) + len(new), "segments": segments},
                      new, cached["bytes"])
            return new + _newest_first(records, cached["segments"])
    state["generation"] = uuid.uuid4().hex  # a new generation: every record may have changed
    return _read_whole(state_path, records_path, state, log([]))
