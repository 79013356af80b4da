"""The offline strategist: the scientist that needs no model.

It reads the kernel's tunable parameters, marked in the source as

    BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096

and proposes plans that change one of them at a time, starting from the best attempt,
with a rationale. The configurations already measured are read back from the archive
(the kernel files of every attempt), so a rerun never repeats one; when every
combination was measured it says the space is exhausted.
"""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass

from kgit.archive import figures, trees
from kgit.scientist.answers import Plan

_MARKER = re.compile(r"^(?P<lead>\s*)(?P<name>[A-Za-z_]\w*)(?P<eq>\s*=\s*)(?P<value>[^#\n]*?)"
                     r"(?P<gap>\s*)#\s*kgit:\s*tune\s+(?P<choices>.+?)\s*$")
# How to give the offline strategist something to tune: an attempt whose kernel marks its parameters.
MARK_HOW = ('Mark the parameters worth trying in an attempt: `kgit try "mark the tunables"`, add '
            "`# kgit: tune V1 V2 ...` to their assignment lines (`BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 "
            "2048`, docs/tunables.md), `kgit record`, then `kgit evolve` again")
# The product of all choices is walked only this far when no single change is left.
PRODUCT_LIMIT = 100_000

_RATIONALES = [
    (r"SPLIT", "Splitting the reduction adds parallelism when the output grid alone cannot fill the GPU, "
               "at the price of a final reduction across splits."),
    (r"GROUP", "Grouping the program order keeps tiles that share operands close in time, so they hit in L2."),
    (r"STAGE", "More software-pipeline stages overlap global loads with compute but take more shared memory; "
               "fewer stages leave room for larger tiles."),
    (r"WARP", "More warps per program keep more memory requests in flight to hide latency; fewer warps leave "
              "more registers per thread and suit small tiles."),
    (r"BLOCK|TILE", "A larger tile amortizes index arithmetic and launch overhead and raises data reuse; a smaller "
                    "one gives more programs for the GPU's cores and lowers register pressure."),
]


@dataclass
class Tunable:
    path: str
    name: str
    value: str
    choices: list

    @property
    def key(self) -> tuple[str, str]:
        return (self.path, self.name)


def tunables(path: str, source: str) -> list[Tunable]:
    found = []
    for line in source.splitlines():
        m = _MARKER.match(line)
        if m:
            found.append(Tunable(path, m["name"], _canon(m["value"]), [_canon(c) for c in m["choices"].split()]))
    return found


def _canon(token: str) -> str:
    """One spelling per value, so `4`, `4 ` and `0x4` compare equal; non-literals stay as written."""
    token = token.strip()
    try:
        return repr(ast.literal_eval(token))
    except (ValueError, SyntaxError):
        return token


def configuration(files: dict[str, str]) -> tuple:
    return tuple(sorted((t.key, t.value) for path, text in files.items() for t in tunables(path, text)))


def assign(files: dict[str, str], values: dict) -> dict[str, str]:
    """The files with the tunables in `values` ({(path, name): value}) rewritten, markers kept."""
    out = dict(files)
    for path, text in files.items():
        lines = text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            m = _MARKER.match(line.rstrip("\n"))
            if m and (path, m["name"]) in values:
                ending = line[len(line.rstrip("\n")):]
                gap = m["gap"] or "  "
                lines[i] = (f"{m['lead']}{m['name']}{m['eq']}{values[(path, m['name'])]}{gap}"
                            f"# kgit: tune {m['choices']}{ending}")
        out[path] = "".join(lines)
    return out


def rationale(name: str, old: str, new: str) -> str:
    why = next((text for pattern, text in _RATIONALES if re.search(pattern, name, re.I)),
               "A tunable parameter of the kernel; its best value depends on the device and the shapes.")
    direction = _direction(old, new)
    return f"{direction} {name} from {old} to {new}. {why}"


def _direction(old, new) -> str:
    try:
        return "Raise" if float(ast.literal_eval(new)) > float(ast.literal_eval(old)) else "Lower"
    except (ValueError, SyntaxError, TypeError):
        return "Change"


class Strategist:
    """Proposes plans from the archive; `measured` holds every configuration tried so far."""

    def __init__(self, repo, editable: list[str]):
        self.repo = repo
        self.editable = editable

    def files(self, shas: list[str]) -> dict[str, dict[str, str]]:
        """{sha: {path: text}} of the editable files of each commit, read with one git process."""
        got = trees.read_files(self.repo, [(sha, path) for sha in shas for path in self.editable])
        return {sha: {p: got[(sha, p)] for p in self.editable if got[(sha, p)] is not None} for sha in shas}

    def configurations(self, shas: list[str]) -> dict[str, tuple]:
        return {sha: configuration(files) for sha, files in self.files(shas).items()}

    def plans(self, attempts, best_sha: str, pick: int) -> list[Plan]:
        """Up to `pick` plans whose configuration was never measured; [] when the space is exhausted."""
        # kgit's one ranking rule: GPU timings when there are any, else the most recent first.
        ranked = [best_sha] + [a.sha for a in figures.ranked(attempts)[0] if a.sha != best_sha]
        files_of = self.files(list(dict.fromkeys([a.sha for a in attempts] + ranked)))
        measured = {configuration(files_of[a.sha]) for a in attempts}
        plans: list[Plan] = []
        # Neighbours of the best first, then of the next best lines, so `pick` is filled
        # from the most promising bases before any far-away combination.
        for sha in ranked:
            files = files_of[sha]
            for values, change in self._neighbours(files):
                config = configuration(assign(files, values))
                if config in measured:
                    continue
                measured.add(config)
                plans.append(self._plan(sha, values, change))
                if len(plans) >= pick:
                    return plans
        return plans + self._anywhere(best_sha, files_of[best_sha], measured, pick - len(plans))

    def why_no_plans(self, base_sha: str) -> str:
        """Why `plans` found nothing from `base_sha`: no marked tunable at all, or every configuration measured."""
        files = self.files([base_sha])[base_sha]
        if not any(tunables(path, text) for path, text in files.items()):
            return (f"the offline strategist has nothing it can tune: {', '.join(self.editable)} marks no tunable "
                    f"parameter. {MARK_HOW}; or use an LLM (--model)")
        return ("the offline strategist has measured every configuration of the marked tunables; mark more values "
                "(docs/tunables.md) or use an LLM (--model)")

    def _neighbours(self, files):
        """Single-parameter changes, nearest values first, round-robin over the parameters."""
        params = [t for path, text in files.items() for t in tunables(path, text)]
        widest = max((len(t.choices) for t in params), default=0)
        for distance in range(1, widest):
            for t in params:
                at = t.choices.index(t.value) if t.value in t.choices else None
                options = ([at + distance, at - distance] if at is not None
                           else range(len(t.choices)) if distance == 1 else [])
                for i in options:
                    if 0 <= i < len(t.choices) and t.choices[i] != t.value:
                        yield {t.key: t.choices[i]}, [(t.name, t.value, t.choices[i])]

    def _anywhere(self, best_sha, files, measured, pick) -> list[Plan]:
        params = [t for path, text in files.items() for t in tunables(path, text)]
        plans: list[Plan] = []
        if pick <= 0:
            return plans
        for combo in itertools.islice(itertools.product(*[t.choices for t in params]), PRODUCT_LIMIT):
            values = {t.key: v for t, v in zip(params, combo)}
            config = configuration(assign(files, values))
            if config in measured:
                continue
            measured.add(config)
            change = [(t.name, t.value, v) for t, v in zip(params, combo) if v != t.value]
            plans.append(self._plan(best_sha, values, change))
            if len(plans) >= pick:
                break
        return plans

    def _plan(self, base: str, values: dict, change: list) -> Plan:
        title = ", ".join(f"{name} {old} -> {new}" for name, old, new in change)
        description = " ".join(rationale(name, old, new) for name, old, new in change)
        rubric = "; ".join(f"set {name} = {new} in {path}" for (path, name), new in values.items()
                           if any(c[0] == name for c in change))
        return Plan(title=title, description=description, rubric=rubric, assignment=values, base=base)


def write(files: dict[str, str], plan: Plan) -> dict[str, str]:
    """The offline writer: the plan's parameter values written into the files."""
    return assign(files, plan.assignment)
