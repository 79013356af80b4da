"""A candidate's error in the terms of the person who wrote the kernel.

The runner's traceback runs through kgit's harness and Python's import machinery before it
reaches the kernel, and names the kernel by the scratch folder it was staged in. People
(`kgit record`, `kgit eval`, `kgit show`, `kgit init`) and the writer model read it with
the kernel's own place first (`kernel.py, line 7: SyntaxError: ...`) and without kgit's
frames; `--verbose` keeps everything. Where no frame of the kernel's files is in the text
(a harness failure, a check that disagreed), it is left as it is: then kgit's frames are the
story.
"""

from __future__ import annotations

import re
from pathlib import Path

# Python's import machinery: between the runner's import call and the kernel's first line.
_FROZEN = r"<frozen importlib\._bootstrap(?:_external)?>"
_FRAME_HEAD = re.compile(r'^[ \t]*File "(?P<path>[^"]+)", line (?P<line>\d+)', re.M)


def relative_paths(text: str, folder) -> str:
    """`text` with the staged candidate folder's path taken off its files' names, so that a
    traceback names `kernel.py`, not `.git/kgit/scratch/eval-.../candidate/kernel.py`."""
    if not text or not folder:
        return text
    return text.replace(str(Path(folder)) + "/", "")


def _own_roots() -> list[str]:
    import kgit
    import kgit_harness

    return [str(Path(m.__file__).resolve().parent) + "/" for m in (kgit, kgit_harness)]


def own_frame() -> re.Pattern:
    """A traceback frame of kgit's or the harness's sources, or of Python's import machinery,
    with the source lines under it."""
    roots = "|".join(re.escape(r) for r in _own_roots())
    return re.compile(rf'^[ \t]*File "(?:(?:{roots})[^"]*|{_FROZEN})", line \d+.*\n(?:[ \t]+(?!File ")\S.*\n)*?'
                      rf'(?=[ \t]*File "|\S)', re.M)


def without_own_frames(text: str) -> tuple[str, int]:
    """(`text` without kgit's and the import machinery's frames, how many were left out)."""
    if not text:
        return "", 0
    cleaned, count = own_frame().subn("", text if text.endswith("\n") else text + "\n")
    return re.sub(r"\n{3,}", "\n\n", cleaned), count


def kernel_place(text: str) -> str | None:
    """"kernel.py, line 7": the innermost frame in a file the candidate owns (a relative path:
    `relative_paths` made it so), or None."""
    places = [m for m in _FRAME_HEAD.finditer(text or "")
              if not m.group("path").startswith(("/", "<")) and m.group("path").endswith(".py")]
    if not places:
        return None
    last = places[-1]
    return f"{last.group('path')}, line {last.group('line')}"


def in_user_terms(text: str, verbose: bool = False) -> str:
    """The error for a person: its place in the kernel and its last line first, then the
    traceback without kgit's frames (`verbose`: the whole of it, as the harness wrote it)."""
    text = (text or "").rstrip()
    place = kernel_place(text)
    if place is None:
        return text
    last = next((line for line in reversed(text.splitlines()) if line.strip() and not line[0].isspace()), "")
    if verbose:
        return f"{place}: {last}\n\n{text}"
    cleaned, dropped = without_own_frames(text)
    note = (f"\n({dropped} frame(s) of kgit's harness and Python's import machinery left out; --verbose shows "
            "them)" if dropped else "")
    return f"{place}: {last}\n\n{cleaned.rstrip()}{note}"
