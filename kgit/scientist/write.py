"""Write: one plan turned into edits of the editable files, and the fix loop's prompts.

The writers of one iteration share a stable part (prompts/iteration.md: the base, the
reference and every chosen plan), sent once per call as a cacheable prefix; only the
plan's own instruction, or the fix request, follows it.
"""

from __future__ import annotations

import re

from kgit.archive import trailers as tr
from kgit.scientist import edits, prompts

NOTES_CHARS = 4000
_FENCE = re.compile(r"^\s*(```+|~~~+)")


def regions_note(files: dict[str, str]) -> str:
    marked = [p for p, text in files.items() if edits.regions(text) is not None]
    if not marked:
        return ""
    return (f"In {', '.join(marked)} change only the lines between {edits.BLOCK_START} and {edits.BLOCK_END}; "
            "keep the marker lines.")


def iteration_text(repo_root, selection, plans, base_files, reference_files, targets: str = "") -> str:
    listing = "\n\n".join(f"## Plan {i}: {p.title}\n\n{p.text()}" for i, p in enumerate(plans))
    reference = prompts.reference_block(base_files, reference_files)
    return prompts.render("iteration", repo_root, base=selection.base[:10], reason=selection.reason, plans=listing,
                          base_code=prompts.code_block(base_files), reference=(selection.reference or "none")[:10],
                          reference_code=reference, targets=targets or "No build facts were recorded for this kernel.")


def first_prompt(repo_root, plan, number, base_files, editable) -> str:
    return prompts.render("write", repo_root, plan=plan.text(), number=number, editable=", ".join(editable),
                          regions=regions_note(base_files))


def fix_prompt(repo_root, plan, number, files, error, attempt, attempts, editable) -> str:
    return prompts.render("fix", repo_root, plan=plan.text(), number=number, code=prompts.code_block(files),
                          error=error, attempt=attempt, attempts=attempts, editable=", ".join(editable),
                          regions=regions_note(files))


def notes(answer: str) -> str:
    """The writer's prose as written, paragraphs kept: the answer without its edit blocks, its
    code and the file-name lines that introduce them. "speedup" is rewritten as in every
    quoted text (archive/trailers.py), so that `git log --grep speedup` stays exact."""
    lines = (answer or "").splitlines()
    is_code = [False] * len(lines)
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence.group(1))),
                       len(lines) - 1)
        elif lines[i].strip().startswith("<<<<<<<") and "SEARCH" in lines[i]:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(">>>>>>>")),
                       len(lines) - 1)
        else:
            i += 1
            continue
        is_code[i:end + 1] = [True] * (end + 1 - i)
        i = end + 1
    kept = []
    for i, line in enumerate(lines):
        if is_code[i]:
            kept.append("")
            continue
        after = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
        if after is not None and is_code[after] and edits._looks_like_file(edits._path_of(line)):
            continue  # the name of the file the next block edits
        kept.append(line.rstrip())
    text = tr.scrub(re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip())
    if len(text) > NOTES_CHARS:
        text = text[:NOTES_CHARS].rstrip() + f" [notes cut at {NOTES_CHARS} characters]"
    return text


CUT = ("Your answer was cut off at the output limit{size}, so its edits may be incomplete and none were "
       "applied. Send SEARCH/REPLACE blocks of only the lines that change rather than whole files, and keep "
       "the prose short.")


def implement(client, messages: list[dict], files: dict[str, str], editable: list[str]):
    """(new files or None, the edit error or None, reply).

    An answer is kept in the answer cache only when its edits apply and change the code:
    one that did not is discarded, so a later run asks again instead of replaying it. An
    answer cut at the output limit is never applied, even where its blocks look complete.
    """
    reply = client.ask("write", messages)
    if reply.truncated:
        client.discard(reply)
        size = f" ({reply.completion_tokens} tokens)" if reply.completion_tokens else ""
        return None, CUT.format(size=size), reply
    try:
        new_files = edits.apply(files, edits.parse(reply.text), editable)
    except edits.EditError as e:
        client.discard(reply)
        return None, str(e), reply
    (client.keep if new_files != files else client.discard)(reply)
    return new_files, None, reply
