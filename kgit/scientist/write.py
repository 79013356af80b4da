"""Write: one plan turned into edits of the editable files, and the fix loop's prompts.

The writers of one iteration share a stable part (prompts/iteration.md: the base, the
reference and every chosen plan), sent once per call as a cacheable prefix; only the
plan's own instruction, or the fix request, follows it.
"""

from __future__ import annotations

import re

from kgit.scientist import edits, prompts

NOTES_CHARS = 1500
_BLOCKS = re.compile(r"<<<<<<< SEARCH.*?>>>>>>> REPLACE|```.*?```", re.S)


def regions_note(files: dict[str, str]) -> str:
    marked = [p for p, text in files.items() if edits.regions(text) is not None]
    if not marked:
        return ""
    return (f"In {', '.join(marked)} change only the lines between {edits.BLOCK_START} and {edits.BLOCK_END}; "
            "keep the marker lines.")


def iteration_text(repo_root, selection, plans, base_files, reference_files) -> str:
    listing = "\n\n".join(f"## Plan {i}: {p.title}\n\n{p.text()}" for i, p in enumerate(plans))
    reference = prompts.code_block(reference_files) if reference_files else "(none chosen)"
    return prompts.render("iteration", repo_root, base=selection.base[:10], reason=selection.reason, plans=listing,
                          base_code=prompts.code_block(base_files), reference=(selection.reference or "none")[:10],
                          reference_code=reference)


def first_prompt(repo_root, plan, number, base_files, editable) -> str:
    return prompts.render("write", repo_root, plan=plan.text(), number=number, editable=", ".join(editable),
                          regions=regions_note(base_files))


def fix_prompt(repo_root, plan, number, files, error, attempt, attempts, editable) -> str:
    return prompts.render("fix", repo_root, plan=plan.text(), number=number, code=prompts.code_block(files),
                          error=error, attempt=attempt, attempts=attempts, editable=", ".join(editable),
                          regions=regions_note(files))


def notes(answer: str) -> str:
    """The writer's prose: the answer without its edit blocks and code."""
    text = " ".join(_BLOCKS.sub(" ", answer).split())
    return text[:NOTES_CHARS]


def implement(client, messages: list[dict], files: dict[str, str], editable: list[str]):
    """(new files or None, the edit error or None, reply)."""
    reply = client.ask("write", messages)
    try:
        return edits.apply(files, edits.parse(reply.text), editable), None, reply
    except edits.EditError as e:
        return None, str(e), reply
