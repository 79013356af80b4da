"""Static policy check of candidate sources, before any of their code runs.

It is a first line only: the sandbox and the runtime checks are what make cheating
pointless. A violation returns the rule's name, which becomes `rejected (<rule>)`.
"""

from __future__ import annotations

import ast
import re

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
    "__getattribute__": "dynamic attribute access", "attrgetter": "dynamic attribute access",
    "methodcaller": "dynamic attribute access", "load_library": "loading native code",
}
# Attribute names that reach the dispatcher's per-thread state, its registrations or its mode
# stacks: the routes by which code in the runner could take the op trap off a call
# (harness/guards.py). No kernel needs them; torch's own code that uses them is not the
# candidate's source and is not read here.
DISPATCH_STATE = re.compile(r"(?i)dispatch|_pop_mode|_push_mode|autocast_enabled|_DisableTorch|_unset_\w*mode|"
                            r"_set_\w*mode|_torch_function_stack")
# Library entry points no kernel needs and every cheat of a family uses: work moved
# off the timed stream or thread, and switching off the runtime op guard.
FORBIDDEN_NAMES = {
    "torch.cuda.Stream": "side streams", "torch.cuda.stream": "side streams",
    "torch.cuda.set_stream": "side streams", "torch.cuda.ExternalStream": "side streams",
    "torch.jit.fork": "deferred work", "torch.futures": "deferred work",
    "torch.multiprocessing": "process spawning", "torch.overrides": "disabling the op guard",
    "torch.utils._python_dispatch": "disabling the op guard",
    "torch.library": "registering kernels", "torch._library": "registering kernels",
    "torch._ops": "registering kernels", "torch._C._dispatch_library": "registering kernels",
    "torch.utils.cpp_extension": "native code",
}
# Native code runs where neither the op trap nor this policy can see what it calls: refused
# for problems that forbid library ops, allowed for the rest (KernelBench's CUDA extensions).
NATIVE_CODE = ("torch.utils.cpp_extension",)
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


def check(sources: dict[str, str], forbidden: list[str], computed_names: bool = False) -> tuple[str, str] | None:
    """Return (rule, detail) for the first violation in any source, else None.

    A problem that forbids library ops (`forbidden`) also refuses native code and every
    route to the dispatcher's state; the others only the routes that undo a guard.
    `computed_names`: let attribute names built at run time through (only the harness's own
    tests of the defences behind this policy ask for it, through the judge's spec)."""
    for name, text in sources.items():
        try:
            tree = ast.parse(text, filename=name)
        except SyntaxError:
            continue  # reported as a compile error when the harness imports it; check the rest
        violation = _check_tree(tree, forbidden, computed_names)
        if violation:
            rule, node = violation
            return rule, f"{name}:{getattr(node, 'lineno', '?')}: {ast.unparse(node)[:160]}"
    return None


def _dynamic_getattr(node, parents) -> ast.AST | None:
    """`getattr` reached other than as a call with a literal name: the node, else None.

    A name built at run time (`getattr(torch, "_" + "C")`) is the one way past a read of
    the source, so it is refused outright: `getattr(obj, "name")` and `getattr(obj, "name",
    default)` stay allowed, as does hasattr."""
    if not (isinstance(node, ast.Name) and node.id == "getattr"):
        return None
    call = parents.get(id(node))
    if isinstance(call, ast.Call) and call.func is node and len(call.args) >= 2 \
            and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
        return None
    return call if isinstance(call, ast.Call) else node


def _banned_name(full: str, forbidden) -> str | None:
    """The rule a dotted name (an import's, or a use's) breaks among FORBIDDEN_NAMES, or None."""
    for banned, why in FORBIDDEN_NAMES.items():
        if banned in NATIVE_CODE and not forbidden:
            continue
        if full == banned or full.startswith(banned + "."):
            return f"forbidden call: {banned} ({why})"
    return None


def _names_torch(text: str) -> bool:
    """A string that spells a torch name (`"_dispatch_tls_..."`, `"torch._C..."`), not prose."""
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", text))


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


def _check_tree(tree, forbidden, computed_names=False):
    aliases = {}  # local name -> full dotted module path, from imports
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in FORBIDDEN_MODULES:
                    return f"forbidden import: {alias.name} ({FORBIDDEN_MODULES[top]})", node
                aliases[alias.asname or top] = alias.name if alias.asname else top
                banned = _banned_name(alias.name, forbidden)
                if banned:
                    return banned, node
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            top = module.split(".")[0]
            if node.level or top in FORBIDDEN_MODULES:
                why = FORBIDDEN_MODULES.get(top, "relative import")
                return f"forbidden import: {'.' * node.level}{module} ({why})", node
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
                banned = _banned_name(f"{module}.{alias.name}", forbidden)
                if banned:
                    return banned, node
    allowed_stores = {id(t) for node in ast.walk(tree) if _backend_switch(node, aliases) for t in node.targets}
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if id(node) in allowed_stores or (isinstance(node, ast.Assign) and all(id(t) in allowed_stores for t in node.targets)):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            return f"forbidden call: {node.func.id} ({FORBIDDEN_CALLS[node.func.id]})", node
        dynamic = None if computed_names else _dynamic_getattr(node, parents)
        if dynamic is not None:
            return "forbidden call: getattr with a computed name (dynamic attribute access)", dynamic
        if isinstance(node, ast.Name) and node.id == "__builtins__" and not computed_names:
            return "forbidden name: __builtins__ (dynamic attribute access)", node
        if isinstance(node, ast.Attribute) and DISPATCH_STATE.search(node.attr):
            return f"forbidden attribute: {node.attr} (the dispatcher's state, which holds the op guard)", node
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and DISPATCH_STATE.search(node.value) \
                and forbidden and _names_torch(node.value):
            return f"forbidden name: {node.value[:60]!r} (the dispatcher's state, which holds the op guard)", node
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
                banned = _banned_name(full, forbidden)
                if banned:
                    return banned, node
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
