"""What the runner reports, as data: fixed schemas the judge (and kgit, for results from
elsewhere) holds every runner-reported value to before it enters a result document.

The runner is the candidate's process, so anything it says may be forged or malformed.
Each `clean_*` function here keeps only the fields a schema names, each of its type and
within its bounds, and only the names the judge asked for; whatever else arrived is
dropped, and a short note saying so is kept beside what stays (`dropped`). Nothing here
raises on bad input: a malformed report costs the report, never the evaluation, and never
a commit on kgit's side. Free text is cut to one bounded line of printable characters.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from kgit_harness.targets import KNOWN as TARGET_NAMES

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_VERSION = re.compile(r"[0-9A-Za-z.+_-]{1,40}")
MAX_INT = 1 << 40
# A kernel's facts: each key the harness's compile reports and its kind (harness/targets.py).
_KERNEL_INTS = ("num_warps", "num_stages", "vgpr", "agpr", "sgpr", "lds_bytes", "lds_limit", "scratch_bytes",
                "vgpr_spill", "sgpr_spill", "occupancy", "compiler_occupancy", "registers", "shared_bytes",
                "shared_limit", "spill_bytes", "spill_stores", "spill_loads", "stack_bytes", "launches")
_UNITS = ("waves/SIMD", "blocks/SM")
MAX_KERNELS = 64
MAX_LIST = 32


def line(value, limit: int = 300) -> str | None:
    """A value as one line of printable text, at most `limit` characters; None stays None."""
    if value is None:
        return None
    text = " ".join(_CONTROL.sub(" ", str(value)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def integer(value, low: int = 0, high: int = MAX_INT):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def number(value, low: float = 0.0, high: float = 1e9):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        return None
    return float(value)


def defined_functions(sources: dict[str, str]) -> set[str]:
    """The function names the candidate's files define (the judge's own read of their text)."""
    names: set = set()
    for text in sources.values():
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        names.update(n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return names


class _Notes:
    def __init__(self):
        self.items: list[str] = []

    def add(self, text: str):
        if len(self.items) < 8 and text not in self.items:
            self.items.append(line(text, 200))


def _options(value, notes: _Notes) -> dict:
    out: dict = {}
    if not isinstance(value, dict):
        return out
    for key, v in list(value.items())[:MAX_LIST]:
        if not isinstance(key, str) or not _IDENT.fullmatch(key):
            notes.add("an option with a malformed name")
            continue
        if v is None or isinstance(v, bool) or integer(v, -MAX_INT) is not None or number(v, -1e18, 1e18) is not None:
            out[key] = v
        else:
            out[key] = line(v, 64)
    return out


def _kernel(raw, known: set[str] | None, notes: _Notes) -> dict | None:
    if not isinstance(raw, dict):
        notes.add("a kernel entry that is not an object")
        return None
    name = raw.get("kernel")
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        notes.add("a kernel with a malformed name")
        return None
    if known is not None and name not in known:
        notes.add(f"facts for {name}, which the candidate's source does not define")
        return None
    out: dict[str, Any] = {"kernel": name}
    for key in _KERNEL_INTS:
        if key in raw:
            out[key] = integer(raw[key])
    if "compile_s" in raw:
        out["compile_s"] = number(raw["compile_s"], 0, 1e5)
    if isinstance(raw.get("fits"), bool):
        out["fits"] = raw["fits"]
    if "why" in raw:
        out["why"] = line(raw["why"])
    if raw.get("occupancy_unit") in _UNITS:
        out["occupancy_unit"] = raw["occupancy_unit"]
    if "options" in raw:
        out["options"] = _options(raw["options"], notes)
    if isinstance(raw.get("signature"), dict):
        out["signature"] = {k: line(v, 64) for k, v in list(raw["signature"].items())[:MAX_LIST]
                            if isinstance(k, str) and _IDENT.fullmatch(k)}
    extra = set(raw) - set(out) - {"options", "signature"}
    if extra:
        notes.add(f"unknown kernel fields ({', '.join(sorted(map(str, extra))[:4])})")
    return out


def _failure(raw, known: set[str] | None, notes: _Notes) -> dict | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("kernel"), str) or not _IDENT.fullmatch(raw["kernel"]):
        notes.add("a malformed failure entry")
        return None
    if known is not None and raw["kernel"] not in known:
        notes.add(f"a failure of {raw['kernel']}, which the candidate's source does not define")
        return None
    return {"kernel": raw["kernel"], "error": line(raw.get("error")) or "unknown error",
            "options": _options(raw.get("options"), notes)}


def _target(raw, known: set[str] | None, notes: _Notes) -> dict:
    if not isinstance(raw, dict):
        notes.add("a target's facts that are not an object")
        return {"builds": None, "error": "the runner's report for this target was malformed", "kernels": [],
                "failures": [], "not_compiled": 0}
    kernels = [k for k in (_kernel(r, known, notes) for r in _items(raw.get("kernels"), MAX_KERNELS, notes)) if k]
    failures = [f for f in (_failure(r, known, notes) for r in _items(raw.get("failures"), MAX_KERNELS, notes)) if f]
    builds = raw.get("builds") if isinstance(raw.get("builds"), bool) else None
    if builds and not kernels:
        builds = None  # "builds" with no kernel the judge could keep says nothing
    if builds and failures:
        builds = False
    error = line(raw.get("error"))
    if builds is None and error is None:
        error = "no build facts the judge could keep"
    return {"builds": builds, "error": error, "kernels": kernels, "failures": failures,
            "not_compiled": integer(raw.get("not_compiled")) or 0}


def _items(value, limit: int, notes: _Notes) -> list:
    if not isinstance(value, list):
        if value is not None:
            notes.add("a list field that is not a list")
        return []
    if len(value) > limit:
        notes.add(f"a list of {len(value)} entries cut to {limit}")
    return value[:limit]


def _text_map(value, notes: _Notes) -> dict:
    if not isinstance(value, dict):
        return {}
    return {line(k, 120): line(v) for k, v in list(value.items())[:MAX_LIST]}


def clean_targets(raw, names=None, sources: dict[str, str] | None = None) -> dict | None:
    """Build facts (harness/targets.py's `targets` entry) as the judge keeps them.

    `names`: the targets the judge asked for (None: any known target, for documents read back
    by kgit); a name outside them is dropped. `sources`: the candidate's files as text; facts
    for a kernel its source defines no function of are dropped, as the judge never saw that
    kernel. Always labelled `reported_by: candidate`.
    """
    if raw is None:
        return None
    notes = _Notes()
    if not isinstance(raw, dict):
        return {"reported_by": "candidate", "results": {}, "dropped": ["the runner's build facts were not an object"]}
    allowed = list(names if names is not None else TARGET_NAMES)
    known = defined_functions(sources) if sources is not None else None
    results = {}
    raw_results = raw.get("results") if isinstance(raw.get("results"), dict) else {}
    for name, value in raw_results.items():
        if name not in allowed:
            notes.add(f"facts for a target that was not asked for ({line(name, 40)})")
            continue
        results[name] = _target(value, known, notes)
    if names is not None:
        for name in names:
            results.setdefault(name, {"builds": None, "error": "the runner reported no facts for this target",
                                      "kernels": [], "failures": [], "not_compiled": 0})
    version = raw.get("triton")
    out: dict[str, Any] = {"reported_by": "candidate",
           "triton": version if isinstance(version, str) and _VERSION.fullmatch(version) else "unknown",
           "launches": integer(raw.get("launches")) or 0, "variants": integer(raw.get("variants")) or 0,
           "unreadable": [line(u) for u in _items(raw.get("unreadable"), 16, notes)],
           "results": results,
           "compile_s": number(raw.get("compile_s"), 0, 1e6) or 0.0,
           "waited_s": number(raw.get("waited_s"), 0, 1e6) or 0.0}
    if raw.get("cached") is True:
        out["cached"] = True  # the judge's own mark on facts served from its cache (harness/factcache.py)
    dry = raw.get("dry")
    if isinstance(dry, dict):
        out["dry"] = {"captured": [line(c, 200) for c in _items(dry.get("captured"), 64, notes)],
                      "failed": _text_map(dry.get("failed"), notes), "skipped": _text_map(dry.get("skipped"), notes)}
        if dry.get("error") is not None:
            out["dry"]["error"] = line(dry["error"])
    kept = set(out) | {"dry", "cache_dir", "dropped", "cached"}
    unknown = [str(k) for k in raw if k not in kept]
    if unknown:
        notes.add(f"unknown fields ({', '.join(sorted(unknown)[:4])})")
    earlier = raw.get("dropped") if isinstance(raw.get("dropped"), list) else []
    for note in earlier[:8]:
        notes.add(str(note))
    if notes.items:
        out["dropped"] = notes.items
    return out


def clean_confine(raw) -> dict | None:
    """The confinement the runner says it applied to itself: two lists of short lines, informative."""
    if not isinstance(raw, dict):
        return None
    return {key: [line(v, 400) for v in raw.get(key)[:MAX_LIST]] if isinstance(raw.get(key), list) else []
            for key in ("applied", "missing")}



def clean_precompile(raw) -> dict | None:
    """The runner's report of its compiles ahead of the checks (harness/precompile.py): counts
    and seconds, and a reason as one line; informative."""
    if not isinstance(raw, dict):
        return None
    kept: dict[str, Any] = {k: number(raw.get(k)) for k in ("variants", "compiled", "launchers", "early_launchers",
                                                             "seconds", "fork_s", "dry_s", "slowest_compile_s",
                                                             "slowest_launcher_s")}
    kept = {k: v for k, v in kept.items() if v is not None}
    if isinstance(raw.get("error"), str):
        kept["error"] = line(raw["error"])
    return kept
