"""Prompt templates and knowledge documents.

Templates are `string.Template` files (`$name`), so the `{}` of code and JSON need no
escaping; a missing variable is an error that names it. A kernel repository overrides
any template with its own `prompts/<stage>.md`, and any knowledge document with
`prompts/knowledge/<name>.md`.
"""

from __future__ import annotations

import string
from pathlib import Path

from kgit import shipped
from kgit.errors import ConfigError

STAGES = ("select", "design", "write", "fix")
OVERRIDE_DIR = "prompts"


def _builtin(relative: str) -> Path:
    return shipped.prompts_dir() / relative


def template_path(stage: str, repo_root: Path | None) -> Path:
    if stage not in STAGES:
        raise ValueError(f"unknown prompt stage {stage!r}")
    if repo_root is not None:
        own = Path(repo_root) / OVERRIDE_DIR / f"{stage}.md"
        if own.exists():
            return own
    return _builtin(f"{stage}.md")


def render(stage: str, repo_root: Path | None, **values) -> str:
    path = template_path(stage, repo_root)
    text = path.read_text(encoding="utf-8")
    try:
        return string.Template(text).substitute({k: str(v) for k, v in values.items()})
    except KeyError as e:
        known = ", ".join(f"${k}" for k in sorted(values))
        raise ConfigError(f"the prompt template {path} uses ${e.args[0]}, which kgit does not provide for the "
                          f"{stage} stage. Use only {known} (write $$ for a literal dollar sign).") from None
    except ValueError as e:
        raise ConfigError(f"the prompt template {path} has a malformed placeholder ({e}); write $$ for a "
                          "literal dollar sign.") from None


def available_knowledge(repo_root: Path | None) -> list[str]:
    names = {p.stem for p in _builtin("knowledge").glob("*.md")}
    if repo_root is not None and (Path(repo_root) / OVERRIDE_DIR / "knowledge").is_dir():
        names |= {p.stem for p in (Path(repo_root) / OVERRIDE_DIR / "knowledge").glob("*.md")}
    return sorted(names)


def knowledge(names: list[str], repo_root: Path | None) -> str:
    """The documents `evolve.knowledge` lists, joined; a clear error for one that does not exist."""
    parts = []
    for name in names:
        candidates = [_builtin(f"knowledge/{name}.md")]
        if repo_root is not None:
            candidates.insert(0, Path(repo_root) / OVERRIDE_DIR / "knowledge" / f"{name}.md")
        found = next((p for p in candidates if p.exists()), None)
        if found is None:
            have = ", ".join(available_knowledge(repo_root)) or "none"
            raise ConfigError(f"evolve.knowledge lists {name!r}, but there is no knowledge document {name}.md "
                              f"(available: {have}). Remove it from .kgit.yaml, or add "
                              f"{OVERRIDE_DIR}/knowledge/{name}.md to the kernel repository.")
        parts.append(found.read_text(encoding="utf-8").strip())
    return "\n\n".join(parts) if parts else "(no knowledge documents selected in .kgit.yaml)"


def code_block(files: dict[str, str]) -> str:
    """Files as the writer is asked to answer them: the path on a line, then a fenced block."""
    out = []
    for path, text in files.items():
        fence = "````" if "```" in text else "```"
        out.append(f"{path}\n{fence}python\n{text.rstrip()}\n{fence}")
    return "\n\n".join(out)


def task_text(task) -> str:
    """The problem as the model sees it: description, files, shapes, tolerance, forbidden calls."""
    shapes = "\n".join(f"- {s}" for s in task.benchmarks)
    lines = [f"Problem: {task.name}. {task.summary}", task.description,
             f"Editable files: {', '.join(task.files)}. The kernel is `custom_kernel(data)`.",
             f"Benchmark shapes (ranked by the geometric mean of the {task.ranking} times):\n{shapes}",
             f"Tolerance: rtol={task.rtol:g}, atol={task.atol:g}. {task.tolerance_why}".strip()]
    if task.forbidden:
        lines.append(f"Forbidden calls (the attempt is rejected): {', '.join(task.forbidden)}.")
    return "\n\n".join(line for line in lines if line)
