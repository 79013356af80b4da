"""Static policy check of candidate sources, before any of their code runs.

It is a first line only: the sandbox and the runtime checks are what make cheating
pointless. A violation returns the rule's name, which becomes `rejected (<rule>)`.
"""

from __future__ import annotations

import ast

# Modules a kernel has no business importing: process spawning, networking, raw
# memory, introspection of the harness's objects, and the timing functions.
FORBIDDEN_MODULES = {
    "subprocess": "process spawning", "multiprocessing": "process spawning",
    "concurrent": "threads or processes", "threading": "threads", "_thread": "threads",
    "socket": "network access", "ssl": "network access", "http": "network access",
    "urllib": "network access", "requests": "network access", "asyncio": "network access",
    "ctypes": "raw memory access", "cffi": "raw memory access", "mmap": "raw memory access",
    "gc": "object hunting through gc", "inspect": "introspection", "sys": "interpreter access",
    "importlib": "dynamic imports", "builtins": "patching builtins", "pickle": "arbitrary code loading",
    "time": "timer access", "signal": "signal handling", "os": "operating-system access",
    "shutil": "file access", "pathlib": "file access", "io": "file access", "glob": "file access",
    "kgit": "harness access", "reference": "the reference", "problem": "the reference",
}
FORBIDDEN_CALLS = {
    "open": "file access", "exec": "dynamic code", "eval": "dynamic code", "compile": "dynamic code",
    "__import__": "dynamic imports", "globals": "introspection", "vars": "introspection",
    "setattr": "monkey-patching", "delattr": "monkey-patching", "breakpoint": "debugger",
}
# Attributes that reach the timing machinery or the harness's own state.
FORBIDDEN_ATTRS = {
    "synchronize": "patching synchronize", "Event": "patching timing events",
    "elapsed_time": "patching timing events", "record": None,  # reading record() is fine
    "__globals__": "introspection", "__code__": "introspection", "__builtins__": "introspection",
    "__subclasses__": "introspection", "f_back": "introspection", "f_globals": "introspection",
}


def check(sources: dict[str, str], forbidden: list[str]) -> tuple[str, str] | None:
    """Return (rule, detail) for the first violation in any source, else None."""
    for name, text in sources.items():
        try:
            tree = ast.parse(text, filename=name)
        except SyntaxError:
            return None  # reported as a compile error when the harness imports it
        violation = _check_tree(tree, forbidden)
        if violation:
            rule, node = violation
            return rule, f"{name}:{getattr(node, 'lineno', '?')}: {ast.unparse(node)[:160]}"
    return None


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _check_tree(tree, forbidden):
    aliases = {}  # local name -> full dotted module path, from imports
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in FORBIDDEN_MODULES:
                    return f"forbidden import: {alias.name} ({FORBIDDEN_MODULES[top]})", node
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            top = module.split(".")[0]
            if node.level or top in FORBIDDEN_MODULES:
                why = FORBIDDEN_MODULES.get(top, "relative import")
                return f"forbidden import: {'.' * node.level}{module} ({why})", node
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            return f"forbidden call: {node.func.id} ({FORBIDDEN_CALLS[node.func.id]})", node
        if isinstance(node, ast.Attribute) and FORBIDDEN_ATTRS.get(node.attr):
            return f"forbidden attribute: {node.attr} ({FORBIDDEN_ATTRS[node.attr]})", node
        if isinstance(node, (ast.Attribute, ast.Name)):
            dotted = _dotted(node)
            if dotted:
                head, _, rest = dotted.partition(".")
                full = aliases.get(head, head) + ("." + rest if rest else "")
                for banned in forbidden:
                    if full == banned or full.startswith(banned + "."):
                        return f"forbidden by the problem: {banned}", node
                if isinstance(node, ast.Attribute) and full.startswith("torch.") and isinstance(getattr(node, "ctx", None), ast.Store):
                    return "monkey-patching torch", node
        if isinstance(node, ast.Assign):
            for target in node.targets:
                dotted = _dotted(target) if isinstance(target, ast.Attribute) else None
                if dotted and aliases.get(dotted.split(".")[0], dotted.split(".")[0]) in ("torch", "triton"):
                    return "monkey-patching torch or triton", node
    return None
