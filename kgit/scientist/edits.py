"""The writer's edit format: SEARCH/REPLACE blocks or whole files, parsed and applied.

Errors are written for the model: they say which block failed, show the closest
lines of the current file, and say what to send instead. Matching tolerates the
whitespace drift models produce (trailing spaces, a shifted indentation), never
a different token.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
BLOCK_START, BLOCK_END = "EVOLVE-BLOCK-START", "EVOLVE-BLOCK-END"
_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+.-]*)\s*$")


class EditError(Exception):
    """The answer's edits cannot be used; the message is meant for the model."""


@dataclass
class Edit:
    path: str
    search: str | None  # None: `replace` is the whole new file
    replace: str


def _path_of(line: str) -> str:
    """A file name line as models write it: `kernel.py`, **kernel.py**, # kernel.py, kernel.py:"""
    return line.strip().strip("`*#:").strip()


def parse(text: str) -> list[Edit]:
    """All edits in an answer, in order. Raises EditError when none are found or a block is cut."""
    lines = text.splitlines()
    edits: list[Edit] = []
    i = 0
    last_name = ""
    open_fence = None  # a fence wrapping SEARCH blocks; its closing line is not a new file
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("<<<<<<<") and "SEARCH" in line:
            if not last_name:
                raise EditError("a SEARCH block has no file name before it. Put the file name (for example "
                                "kernel.py) alone on the line above each <<<<<<< SEARCH.")
            i, edit = _read_block(lines, i + 1, last_name, len(edits) + 1)
            edits.append(edit)
            continue
        fence = _FENCE.match(line)
        if fence and open_fence and line.strip() == open_fence:
            open_fence = None
        elif fence and _has_search(lines, i + 1, fence.group(1)):
            open_fence = fence.group(1)
        elif fence and _looks_like_file(last_name):
            i, edit = _read_whole(lines, i + 1, last_name, fence.group(1))
            edits.append(edit)
            last_name = ""
            continue
        elif fence:
            i, _ = _skip_block(lines, i + 1, fence.group(1))
            continue
        elif line.strip():
            last_name = _path_of(line)
        i += 1
    if not edits:
        raise EditError("the answer holds no edits. Send SEARCH/REPLACE blocks (the file name on its own line, then "
                        f"{SEARCH} / {DIVIDER} / {REPLACE}), or the file name on its own line followed by one "
                        "fenced code block with the whole new file.")
    return edits


def _looks_like_file(name: str) -> bool:
    return bool(re.fullmatch(r"[\w./-]+\.\w+", name))


def _has_search(lines, start, fence) -> bool:
    for line in lines[start:]:
        if line.strip().startswith(fence):
            return False
        if line.strip().startswith("<<<<<<<") and "SEARCH" in line:
            return True
    return False


def _read_block(lines, i, path, number) -> tuple[int, Edit]:
    search: list[str] = []
    replace: list[str] = []
    part = search
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped == DIVIDER and part is search:
            part = replace
        elif stripped.startswith(">>>>>>>") and "REPLACE" in stripped:
            return i + 1, Edit(path, "\n".join(search), "\n".join(replace))
        else:
            part.append(lines[i])
        i += 1
    missing = DIVIDER if part is search else REPLACE
    raise EditError(f"SEARCH block {number} for {path} is cut off: {missing} never came. Send every block whole.")


def _skip_block(lines, i, fence) -> tuple[int, None]:
    while i < len(lines) and lines[i].strip() != fence:
        i += 1
    return i + 1, None


def _read_whole(lines, i, path, fence) -> tuple[int, Edit]:
    body: list = []
    while i < len(lines):
        if lines[i].strip() == fence:
            return i + 1, Edit(path, None, "\n".join(body) + "\n")
        body.append(lines[i])
        i += 1
    raise EditError(f"the code block with the whole of {path} is not closed with {fence}. Send the file whole.")


def apply(files: dict[str, str], edits: list[Edit], editable: list[str]) -> dict[str, str]:
    """The files after the edits. All problems are collected into one EditError."""
    new = dict(files)
    problems = []
    for number, edit in enumerate(edits, 1):
        path = _resolve(edit.path, editable)
        if path is None:
            problems.append(f"edit {number} changes {edit.path}, which is not an editable file. You may only edit: "
                            f"{', '.join(editable)}.")
            continue
        if edit.search is None:
            new[path] = edit.replace
            continue
        current = new.get(path, "")
        if not edit.search.strip():
            if current.strip():
                problems.append(f"edit {number} for {path} has an empty SEARCH part. Copy the lines to change from "
                                "the current file into SEARCH.")
            else:
                new[path] = edit.replace + "\n"
            continue
        try:
            new[path] = replace_once(current, edit.search, edit.replace)
        except EditError as e:
            problems.append(f"edit {number} for {path}: {e}")
    for path in editable:
        if path in files and path in new:
            try:
                check_regions(files[path], new[path])
            except EditError as e:
                problems.append(f"{path}: {e}")
    if problems:
        raise EditError("\n\n".join(problems))
    return new


def _resolve(path: str, editable: list[str]) -> str | None:
    clean = path.strip().lstrip("./")
    if clean in editable:
        return clean
    matches = [e for e in editable if e.endswith("/" + clean) or clean.endswith("/" + e)]
    return matches[0] if len(matches) == 1 else None


def replace_once(text: str, search: str, replace: str) -> str:
    """Replace the one place `search` matches: exactly, else line by line ignoring whitespace drift."""
    # Exact matches count only when they cover whole lines: `BLOCK = 1` must not edit
    # the middle of `BLOCK = 128`. Anything else goes to the line-by-line match below.
    exact = _whole_line_matches(text, search)
    if len(exact) == 1:
        at = exact[0]
        return text[:at] + replace + text[at + len(search):]
    if len(exact) > 1:
        raise EditError(f"the SEARCH part matches {len(exact)} places. Add a few surrounding lines so it matches one.")
    file_lines = text.splitlines()
    want = _trim_blank(search.splitlines())
    spans = _fuzzy_spans(file_lines, want)
    if len(spans) > 1:
        raise EditError(f"the SEARCH part matches {len(spans)} places. Add a few surrounding lines so it matches one.")
    if not spans:
        raise EditError("the SEARCH part matched nothing in the current file." + _closest(file_lines, want) +
                        "\nCopy the SEARCH lines exactly from the current file, which is shown above.")
    start = spans[0]
    shift = _indent(file_lines[start]) - _indent(want[0])
    new_lines = [_reindent(line, shift) for line in _trim_blank(replace.splitlines())]
    out = file_lines[:start] + new_lines + file_lines[start + len(want):]
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _whole_line_matches(text: str, search: str) -> list[int]:
    if not search.strip():
        return []
    found, at = [], text.find(search)
    while at >= 0:
        end = at + len(search)
        starts_line = at == 0 or text[at - 1] == "\n" or search.startswith("\n")
        ends_line = end == len(text) or text[end] == "\n" or search.endswith("\n")
        if starts_line and ends_line:
            found.append(at)
        at = text.find(search, at + 1)
    return found


def _trim_blank(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _fuzzy_spans(file_lines, want) -> list[int]:
    if not want:
        return []
    # Same tokens, same relative indentation: only a uniform shift and trailing spaces may differ.
    key = [(line.strip(), _indent(line) - _indent(want[0])) for line in want]
    found = []
    for start in range(len(file_lines) - len(want) + 1):
        window = file_lines[start:start + len(want)]
        base = _indent(window[0])
        if all(w.strip() == k and (not k or _indent(w) - base == rel) for w, (k, rel) in zip(window, key)):
            found.append(start)
    return found


def _indent(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())


def _reindent(line: str, shift: int) -> str:
    if not line.strip() or shift == 0:
        return line
    if shift > 0:
        return " " * shift + line
    width = min(-shift, _indent(line))
    return line.expandtabs(4)[width:]


def _closest(file_lines, want) -> str:
    if not file_lines or not want:
        return ""
    target = "\n".join(line.strip() for line in want)
    best, best_start = 0.0, 0
    for start in range(max(1, len(file_lines) - len(want) + 1)):
        window = "\n".join(line.strip() for line in file_lines[start:start + len(want)])
        score = difflib.SequenceMatcher(None, target, window).quick_ratio()
        if score > best:
            best, best_start = score, start
    if best < 0.5:
        return ""
    snippet = "\n".join(file_lines[best_start:best_start + len(want)])
    return f" The most similar lines are:\n{snippet}\nDid you mean these?"


def regions(text: str) -> list[str] | None:
    """The text outside EVOLVE-BLOCK regions, as a list of chunks; None when the file marks none."""
    lines = text.splitlines()
    if not any(BLOCK_START in line for line in lines):
        return None
    outside, chunk, inside = [], [], False
    for line in lines:
        if BLOCK_START in line and not inside:
            chunk.append(line)
            outside.append("\n".join(chunk))
            chunk, inside = [], True
        elif BLOCK_END in line and inside:
            chunk, inside = [line], False
        elif not inside:
            chunk.append(line)
    outside.append("\n".join(chunk))
    return outside


def check_regions(old: str, new: str):
    """Where the original marks EVOLVE-BLOCK regions, only their insides may change."""
    before = regions(old)
    if before is None:
        return
    after = regions(new)
    if after != before:
        raise EditError(f"this file marks the editable regions with {BLOCK_START} / {BLOCK_END}; your edits "
                        "change lines outside them (or the markers themselves). Change only the lines between "
                        "the markers and keep the marker lines as they are.")
