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
    "shutil": "file access", "io": "file access", "glob": "file access",
    "kgit": "harness access", "kgit_harness": "harness access", "reference": "the reference", "problem": "the reference",
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
    "f_locals": "introspection", "tb_frame": "introspection", "gi_frame": "introspection",
    "__closure__": "introspection", "__dict__": "monkey-patching", "__setattr__": "monkey-patching",
    "DisableTorchFunction": "disabling the op guard", "DisableTorchFunctionSubclass": "disabling the op guard",
    "_pop_torch_function_stack": "disabling the op guard", "_push_on_torch_function_stack": "disabling the op guard",
    "_set_torch_function_mode": "disabling the op guard",
}
# Library entry points no kernel needs and every cheat of a family uses: work moved
# off the timed stream or thread, and switching off the runtime op guard.
FORBIDDEN_NAMES = {
    "torch.cuda.Stream": "side streams", "torch.cuda.stream": "side streams",
    "torch.cuda.set_stream": "side streams", "torch.cuda.ExternalStream": "side streams",
    "torch.jit.fork": "deferred work", "torch.futures": "deferred work",
    "torch.multiprocessing": "process spawning", "torch.overrides": "disabling the op guard",
    "torch.utils._python_dispatch": "disabling the op guard",
}
# Documented torch.backends switches a kernel may set, each to the values that only make
# its own math stricter or change which algorithm runs, never how exact the reference
# is: reduced precision switched off, cuDNN's autotuner or determinism chosen. The
# runner starts with the settings the reference ran under (torchflags.py), so a switch
# that lowered precision (allow_tf32 = True) would undo the reference's; those stay
# rejected as monkey-patching.
BACKEND_SWITCHES = {
    "torch.backends.cudnn.allow_tf32": (False,), "torch.backends.cuda.matmul.allow_tf32": (False,),
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": (False,),
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": (False,),
    "torch.backends.cudnn.benchmark": (True, False), "torch.backends.cudnn.deterministic": (True, False),
}
# A forbidden module reached as an attribute of an allowed one (torch.sys, torch.threading).
REACHED_MODULES = {"gc", "sys", "threading", "_thread", "importlib", "time", "os", "subprocess", "ctypes",
                   "inspect", "builtins", "multiprocessing", "concurrent", "socket", "pickle", "signal"}


def check(sources: dict[str, str], forbidden: list[str]) -> tuple[str, str] | None:
    """Return (rule, detail) for the first violation in any source, else None."""
    for name, text in sources.items():
        try:
            tree = ast.parse(text, filename=name)
        except SyntaxError:
            continue  # reported as a compile error when the harness imports it; check the rest
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


def _backend_switch(node, aliases) -> bool:
    """Whether an assignment sets one of BACKEND_SWITCHES to one of its allowed constants."""
    if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)):
        return False
    for target in node.targets:
        dotted = _dotted(target) if isinstance(target, ast.Attribute) else None
        if not dotted:
            return False
        head, _, rest = dotted.partition(".")
        full = aliases.get(head, head) + ("." + rest if rest else "")
        allowed = BACKEND_SWITCHES.get(full)
        if allowed is None or not any(node.value.value is v for v in allowed):
            return False
    return True


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
    allowed_stores = {id(t) for node in ast.walk(tree) if _backend_switch(node, aliases) for t in node.targets}
    for node in ast.walk(tree):
        if id(node) in allowed_stores or (isinstance(node, ast.Assign) and all(id(t) in allowed_stores for t in node.targets)):
            continue
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
                for banned, why in FORBIDDEN_NAMES.items():
                    if full == banned or full.startswith(banned + "."):
                        return f"forbidden call: {banned} ({why})", node
                hidden = [p for p in full.split(".")[1:] if p in REACHED_MODULES]
                if hidden and head in aliases:
                    return f"forbidden import: {hidden[0]} ({FORBIDDEN_MODULES[hidden[0]]}, reached through {head})", node
                if isinstance(node, ast.Attribute) and full.startswith("torch.") and isinstance(getattr(node, "ctx", None), ast.Store):
                    return "monkey-patching torch", node
        if isinstance(node, ast.Assign):
            for target in node.targets:
                dotted = _dotted(target) if isinstance(target, ast.Attribute) else None
                if dotted and aliases.get(dotted.split(".")[0], dotted.split(".")[0]) in ("torch", "triton"):
                    return "monkey-patching torch or triton", node
    return None
