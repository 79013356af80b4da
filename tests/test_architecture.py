"""The import rules of docs/architecture.md, checked on the source of every module.

Imports are read with `ast`, not by importing, so a rule breaks here the moment the
code breaks it, whether or not that code path runs in any other test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"kgit": ROOT / "kgit", "kgit_harness": ROOT / "harness"}

# part -> the parts of kgit it may never import (lazily inside a function included).
MAY_NOT_IMPORT = {
    "kgit.archive": ["kgit.scientist", "kgit.evaluation", "kgit.review", "kgit.workflow", "kgit.evolve",
                     "kgit.remeasure", "kgit.settings", "kgit.importers", "kgit.cli", "kgit.config"],
    # Build facts are read from the archive (kgit.archive.buildfacts); the machine's GPUs are
    # handed in by the loop (evolve) and the workflow: neither reaches into evaluation/.
    "kgit.scientist": ["kgit.review", "kgit.workflow", "kgit.evolve", "kgit.remeasure", "kgit.settings",
                       "kgit.cli", "kgit.evaluation"],
    "kgit.evaluation": ["kgit.scientist", "kgit.review", "kgit.workflow", "kgit.evolve", "kgit.remeasure",
                        "kgit.settings", "kgit.cli"],
    "kgit.review": ["kgit.evolve", "kgit.cli", "kgit.evaluation"],
    "kgit.errors": ["kgit."],
}
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


def _module_name(package: str, base: Path, path: Path) -> str:
    parts = [package, *path.relative_to(base).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _all_modules() -> dict[str, ast.Module]:
    found = {}
    for package, base in PACKAGES.items():
        for path in sorted(base.rglob("*.py")):
            found[_module_name(package, base, path)] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


MODULES = _all_modules()


def _is_package(name: str) -> bool:
    package, _, rest = name.partition(".")
    base = PACKAGES.get(package)
    return base is not None and (base.joinpath(*rest.split(".")) / "__init__.py").exists() if rest else True


class _Imports(ast.NodeVisitor):
    """(imported module, at import time?) for every import statement of one module."""

    def __init__(self, module: str):
        self.module = module
        self.package = module if _is_package(module) else module.rpartition(".")[0]
        self.found: list[tuple[str, bool]] = []
        self._depth = 0  # inside a function body: runs later, not at import time

    def _add(self, name: str):
        self.found.append((name, self._depth == 0))

    def visit_FunctionDef(self, node):
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_If(self, node):
        test = node.test
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            return  # imports for type checkers only
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node):
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        self._add(base)
        for alias in node.names:  # `from kgit.archive import repo` imports the module kgit.archive.repo
            candidate = f"{base}.{alias.name}"
            if candidate in MODULES:
                self._add(candidate)


def imports_of(module: str, tree: ast.Module) -> list[tuple[str, bool]]:
    visitor = _Imports(module)
    visitor.visit(tree)
    return visitor.found


def _within(name: str, part: str) -> bool:
    return name == part.rstrip(".") or name.startswith(part if part.endswith(".") else part + ".")


def git_runs(tree: ast.Module) -> list[int]:
    """Lines that start git outside GitPython: subprocess/os calls, or a command list that starts with "git"."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == "git":
                lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            called = (owner.id if isinstance(owner, ast.Name) else "", node.func.attr)
            if called[0] == "subprocess" and called[1] in SUBPROCESS_CALLS or called == ("os", "system"):
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("git"):
                    lines.append(node.lineno)
    return sorted(set(lines))


# -- the rules -------------------------------------------------------------------------------
def test_the_harness_imports_nothing_from_kgit():
    bad = [f"{m} imports {name}" for m, tree in MODULES.items() if m.startswith("kgit_harness")
           for name, _ in imports_of(m, tree) if _within(name, "kgit")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("part", sorted(MAY_NOT_IMPORT))
def test_each_part_keeps_to_its_imports(part):
    bad = [f"{m} imports {name}" for m, tree in MODULES.items() if _within(m, part)
           for name, _ in imports_of(m, tree)
           if any(_within(name, banned) for banned in MAY_NOT_IMPORT[part])]
    assert not bad, "\n".join(bad)


def test_only_the_cli_imports_click():
    bad = [f"{m} imports {name}" for m, tree in MODULES.items() if m != "kgit.cli"
           for name, _ in imports_of(m, tree) if _within(name, "click")]
    assert not bad, "\n".join(bad)


def test_only_the_archive_talks_to_git():
    bad = [f"{m} imports {name}" for m, tree in MODULES.items() if not _within(m, "kgit.archive")
           for name, _ in imports_of(m, tree) if _within(name, "git")]
    bad += [f"{m} runs git at line {line}" for m, tree in MODULES.items() if not _within(m, "kgit.archive")
            for line in git_runs(tree)]
    assert not bad, "\n".join(bad)


def test_no_import_cycles_at_import_time():
    graph = {m: sorted({name for name, now in imports_of(m, tree) if now and name in MODULES and name != m})
             for m, tree in MODULES.items()}
    cycles = _cycles(graph)
    assert not cycles, "\n".join(" -> ".join(c + c[:1]) for c in cycles)


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a cycle."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, []):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


# -- the checker finds what it is meant to find ---------------------------------------------------
def test_the_checks_see_violations():
    source = ast.parse(
        "import subprocess\nfrom kgit.archive import repo\nimport git\n"
        "def later():\n    from kgit import cli\n    subprocess.run(['git', 'log'])\n"
        "CMD = ('git', 'status')\n"
        "if TYPE_CHECKING:\n    import click\n")
    found = imports_of("kgit.review.example", source)
    assert ("kgit.archive.repo", True) in found and ("git", True) in found
    assert ("kgit.cli", False) in found  # a lazy import is seen, but not as an import-time edge
    assert not any(name == "click" for name, _ in found)
    assert git_runs(source) == [6, 7]
    relative = imports_of("kgit.review.pr", ast.parse("from . import campaign\nfrom ..archive import refs\n"))
    assert ("kgit.review", True) in relative and ("kgit.archive", True) in relative
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert _cycles({"a": ["b"], "b": []}) == []
