"""Prompt templates and knowledge documents.

Templates are `string.Template` files (`$name`), so the `{}` of code and JSON need no
escaping; a missing variable is an error that names it. A kernel repository overrides
any template with its own `prompts/<stage>.md`, and any knowledge document with
`prompts/knowledge/<name>.md`.
"""

from __future__ import annotations

import difflib
import string
from pathlib import Path

from kgit import problems as problem_mod
from kgit import shipped
from kgit.errors import ConfigError
from kgit.scientist import knowledge as knowledge_mod

# "system" is the stable prefix every stage shares; "iteration" the writers' shared context.
STAGES = ("system", "select", "design", "iteration", "write", "fix")
# Marks the end of a stable part of a message (kgit/scientist/caching.py turns it into
# the provider's cache breakpoint, or drops it).
STABLE = "kgit_stable"
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


def knowledge(names, repo_root: Path | None, traits: set[str] | None = None) -> str:
    """The knowledge documents for the designer, joined; a clear error for one that does not exist.

    `names` is `evolve.knowledge`: "auto" (or a list holding it) stands for the built-in documents
    chosen by the problem's `traits` (kgit/scientist/knowledge.py), section by section; every other
    name is one document, shown whole. A repository's own prompts/knowledge/<name>.md replaces the
    built-in of that name.
    """
    names = [names] if isinstance(names, str) else list(names)
    parts = []
    for name in names:
        chosen = name == knowledge_mod.AUTO
        for doc in (knowledge_mod.BUILTIN if chosen else [name]):
            text = _knowledge_file(doc, repo_root).read_text(encoding="utf-8")
            shown = knowledge_mod.select(text, traits if chosen else None)
            if shown and shown not in parts:
                parts.append(shown)
    if parts:
        return "\n\n".join(parts)
    return ("(no knowledge documents fit this problem)" if knowledge_mod.AUTO in names
            else "(no knowledge documents selected in .kgit.yaml)")


def _knowledge_file(name: str, repo_root: Path | None) -> Path:
    candidates = [_builtin(f"knowledge/{name}.md")]
    if repo_root is not None:
        candidates.insert(0, Path(repo_root) / OVERRIDE_DIR / "knowledge" / f"{name}.md")
    found = next((p for p in candidates if p.exists()), None)
    if found is None:
        have = ", ".join(available_knowledge(repo_root)) or "none"
        raise ConfigError(f"evolve.knowledge lists {name!r}, but there is no knowledge document {name}.md "
                          f"(available: {have}; or auto, the ones that fit the problem). Remove it from "
                          f".kgit.yaml, or add {OVERRIDE_DIR}/knowledge/{name}.md to the kernel repository.")
    return found


def code_block(files: dict[str, str]) -> str:
    """Files as the writer is asked to answer them: the path on a line, then a fenced block."""
    out = []
    for path, text in files.items():
        fence = "````" if "```" in text else "```"
        out.append(f"{path}\n{fence}python\n{text.rstrip()}\n{fence}")
    return "\n\n".join(out)


# A reference file is shown as its diff from the base when the diff is at most this share of
# the file: two nearly identical 600-line sources cost a design request 111 KB whole.
DIFF_SHARE = 0.6


def reference_block(base_files: dict[str, str], reference_files: dict[str, str]) -> str:
    """The reference's files for a request that shows the base above: each as a unified diff
    from the base's file of the same name where that is much shorter, whole otherwise.
    The diff holds every line that differs, so the reference can be rebuilt from it."""
    if not reference_files:
        return "(none chosen)"
    out = []
    for path, text in reference_files.items():
        base = base_files.get(path)
        if base is not None:
            if base == text:
                out.append(f"{path}: the same as the base's")
                continue
            diff = "".join(difflib.unified_diff(base.splitlines(keepends=True), text.splitlines(keepends=True),
                                                f"base/{path}", f"reference/{path}", n=3))
            if len(diff) <= DIFF_SHARE * len(text):
                fence = "````" if "```" in diff else "```"
                out.append(f"{path}, as a unified diff from the base's {path} above (the lines that differ, "
                           f"3 of context)\n{fence}diff\n{diff.rstrip()}\n{fence}")
                continue
        out.append(code_block({path: text}))
    return "\n\n".join(out)


def task_text(task, on_gpu: bool = True, check: str = "") -> str:
    """The problem as the model sees it: description, files, the shapes the evaluation really
    uses (the CPU section's when it runs on the CPU), the check as applied, forbidden calls."""
    def listing(shapes):
        return "\n".join(f"- {problem_mod.shape_key(s)}" for s in shapes)

    where = "" if on_gpu else " (the CPU set: the evaluation runs in the Triton interpreter)"
    lines = [f"Problem: {task.name}. {task.summary}", task.description,
             f"Editable files: {', '.join(task.files)}. The kernel is `custom_kernel(data)`.",
             f"Test shapes{where}, each checked for correctness:\n{listing(task.shapes('tests', on_gpu))}",
             f"Benchmark shapes{where}, timed and ranked by the geometric mean of the {task.ranking} times "
             f"(their timed repetitions are checked too):\n{listing(task.shapes('benchmarks', on_gpu))}",
             "" if on_gpu or task.shapes("benchmarks", True) == task.shapes("benchmarks", False) else
             ("Benchmark shapes on a GPU (the problem's benchmark set: what attempts are ranked on once `kgit "
              f"remeasure` times them on a GPU; size tiles, split-K and per-shape tables for these):\n"
              f"{listing(task.shapes('benchmarks', True))}"),
             check or f"Correctness check: torch.allclose(output, reference, rtol={task.rtol:g}, atol={task.atol:g})."]
    if task.forbidden:
        lines.append(f"Forbidden calls (the attempt is rejected): {', '.join(task.forbidden)}.")
    lines.append(policy_text())
    return "\n\n".join(line for line in lines if line)


def policy_text() -> str:
    """The harness's static policy in one paragraph, from its own tables (harness/policy.py).

    The fp8 campaign's writer had a CUDA-graph attempt rejected for `torch.cuda.synchronize`,
    which no request had named: the model cannot keep to rules it is never shown.
    """
    from kgit_harness import policy

    attrs = sorted(a for a, why in policy.FORBIDDEN_ATTRS.items() if why)
    return ("The harness also rejects, before running it, source that imports "
            f"{', '.join(sorted(policy.FORBIDDEN_MODULES))}; calls {', '.join(sorted(policy.FORBIDDEN_CALLS))}; "
            f"uses the attributes {', '.join(attrs)} (so no `torch.cuda.synchronize()`: the harness synchronizes "
            f"around each call itself); or reaches {', '.join(sorted(policy.FORBIDDEN_NAMES))}.")


def part(text: str, stable: bool = False) -> dict:
    """One text part of a message; a stable one ends a prefix that repeats across calls."""
    out: dict[str, object] = {"type": "text", "text": text}
    if stable:
        out[STABLE] = True
    return out


def message(role: str, *parts: dict) -> dict:
    return {"role": role, "content": [p for p in parts if p["text"]]}


def flatten(content) -> str:
    """A message's content as one string (parts joined as caching.prepare joins them)."""
    if isinstance(content, str):
        return content
    return "\n\n".join(p["text"] for p in content)
