"""Write: one plan turned into edits of the editable files, and the fix loop's prompts."""

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


def first_prompt(repo_root, task_text, plan, base_files, reference_files, editable, targets: str = "") -> str:
    reference = prompts.code_block(reference_files) if reference_files else "(none)"
    return prompts.render("write", repo_root, task=task_text, plan=plan.text(), base_code=prompts.code_block(base_files),
                          reference_code=reference, editable=", ".join(editable), regions=regions_note(base_files),
                          targets=targets or "No build facts were recorded for this kernel.")


def fix_prompt(repo_root, task_text, plan, files, error, attempt, attempts, editable, targets: str = "") -> str:
    return prompts.render("fix", repo_root, task=task_text, plan=plan.text(), code=prompts.code_block(files),
                          error=error, attempt=attempt, attempts=attempts, editable=", ".join(editable),
                          regions=regions_note(files), targets=targets or "No build facts were recorded for it.")


def notes(answer: str) -> str:
    """The writer's prose: the answer without its edit blocks and code."""
    text = " ".join(_BLOCKS.sub(" ", answer).split())
    return text[:NOTES_CHARS]


def implement(client, prompt_text: str, files: dict[str, str], editable: list[str]):
    """(new files or None, the edit error or None, reply)."""
    reply = client.ask("write", [{"role": "user", "content": prompt_text}])
    try:
        return edits.apply(files, edits.parse(reply.text), editable), None, reply
    except edits.EditError as e:
        return None, str(e), reply
