"""Attempt commit messages: subject, body and git trailers, written and parsed.

`SCHEMA` is the one table of kgit's trailers: each key, the attribute it becomes on an
`Attempt`, how its value is written and read, and which field of a harness result it
carries. Writing (`lines`, `from_result`), reading (`kgit.archive.attempt`) and turning
an attempt back into a result (`to_result`) all come from it, so a new trailer is one
row here. A family row (kind "family") stands for one trailer per name: its key is a
prefix, `Kgit-Target-<name>` for each build target (docs/targets.md).

The lowercase word "speedup" appears only in messages of timed, correct attempts, so
`git log --all --grep speedup` lists exactly those; everything else kgit quotes
(hypotheses, notes, errors) is scrubbed of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kgit.archive import cause, figures
from kgit.archive.measure import result_times
from kgit_harness import targets as harness_targets
from kgit_harness.result import Result

_SPEEDUP = re.compile(r"speedup", re.I)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
FAILED_SUBJECT = {
    "incorrect": "incorrect", "compile-error": "compile error", "runtime-error": "runtime error",
    "timeout": "timeout", "crash": "crash", "rejected": "rejected", "unsupported": "unsupported here",
}


def scrub(text: str) -> str:
    """Text safe to quote in any attempt: no "speedup" in any case, no control characters."""
    return _CONTROL.sub(" ", _SPEEDUP.sub("speed-up", text or ""))


def one_line(text: str, limit: int = 2000) -> str:
    """A trailer value: one line, no control characters, bounded length."""
    flat = " ".join(_CONTROL.sub(" ", str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# Words a branch name can do without: dropping them leaves room for the ones that say what changed.
STOP_WORDS = frozenset(
    "a an the and or but of to in on at by for from into onto with without via that which this these those "
    "it its is are be been being as so than then instead use using uses make makes".split())


def slugify(text: str, words: int = 6, limit: int = 40) -> str:
    """A short branch slug of `text`'s content words: "K-major split-K that builds on gfx942"
    -> "k-major-split-k-builds-gfx942". Stop words go first; a slug never ends mid-word."""
    parts = re.findall(r"[a-z0-9]+", (text or "").lower())
    content = [p for p in parts if p not in STOP_WORDS] or parts
    slug = ""
    for word in content[:words]:
        longer = f"{slug}-{word}" if slug else word
        if len(longer) > limit:
            break
        slug = longer
    return scrub(slug or (content[0][:limit] if content else "")) or "experiment"


def subject(slug: str, status: str, speedup: float | None, geomean_us: float | None, reason: str | None = None) -> str:
    if status == "ok":
        ratio = f"{speedup:.2f}x" if speedup else "n/a"
        return f"{slug}: speedup {ratio} vs base (geomean {geomean_us:.1f} us)"
    word = FAILED_SUBJECT.get(status, status)
    if status in ("rejected", "unsupported") and reason:
        word = f"{word} ({one_line(reason, 120)})"
    return scrub(f"{slug}: {word}")


@dataclass
class Message:
    subject: str
    paragraphs: list = field(default_factory=list)
    trailers: list = field(default_factory=list)  # [(key, value)], keys may repeat

    def render(self, ok: bool) -> str:
        # Control characters go in every case: git refuses a NUL in a message outright.
        clean = (lambda t: _CONTROL.sub(" ", t)) if ok else scrub
        # git stops looking for trailers at a line starting with "---" (a patch separator),
        # so quoted diffs and tracebacks get those lines indented.
        body = [_quote_trailer_lines(re.sub(r"(?m)^---", " ---", clean(p).strip()))
                for p in self.paragraphs if p and p.strip()]
        lines = [f"{k}: {one_line(clean(str(v)))}" for k, v in self.trailers]
        parts = [clean(self.subject).strip()] + body + ["\n".join(lines)] if lines else [clean(self.subject)] + body
        return "\n\n".join(parts).rstrip() + "\n"


# A line that reads as one of kgit's trailers. kgit writes such lines only in its own trailer
# block: quoted text (a hypothesis, a model's notes, an error excerpt) gets them indented, and
# the reader refuses a commit whose body holds one (kgit.archive.attempt).
TRAILER_LIKE = re.compile(r"(?im)^kgit-[a-z0-9-]*\s*:")


def _quote_trailer_lines(text: str) -> str:
    return TRAILER_LIKE.sub(lambda m: "  " + m.group(0), text)


def parse(block: str) -> dict[str, list[str]]:
    """Parse `%(trailers:only,unfold)` output (or the trailer paragraph itself)."""
    found: dict[str, list[str]] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and " " not in key.strip():
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def strip_trailers(body: str) -> list[str]:
    """The paragraphs of a commit body without kgit's trailer block."""
    paragraphs = body.rstrip().split("\n\n")
    if paragraphs and parse(paragraphs[-1]).get("Kgit-Experiment"):
        paragraphs = paragraphs[:-1]
    return paragraphs


# -- the schema -------------------------------------------------------------------------
@dataclass(frozen=True)
class Trailer:
    """One trailer key of kgit's attempt commits."""

    key: str  # for a family: the prefix, the name follows it
    attr: str  # the Attempt attribute that reads it
    # text | int | float | times ("<shape> <us>", one line per shape) | family ({name: text},
    # one trailer per name, the name written as `encode` says and read back with `decode`)
    kind: str = "text"
    default: object = None  # what the attribute is when the commit has no such trailer
    fmt: str = "{}"  # how a number is written; strings are written as they are
    result: str | None = None  # the harness result field it carries (from_result, to_result)
    result_default: object = None  # written when the result leaves that field empty
    ok_only: bool = False  # carried only by a correct, timed result
    json: str | None = None  # its key in `Attempt.to_json()` (`kgit log --json`)
    # a family's name -> the key's tail (git trailer keys allow letters, digits, "-"), and back
    encode: Callable[[str], str] = str
    decode: Callable[[str], str] = str
    names: tuple = ()  # a family's names: the only ones it writes or reads


# In the order kgit writes them.
SCHEMA = (
    Trailer("Kgit-Experiment", "experiment", "int", json="experiment"),
    Trailer("Kgit-Attempt", "attempt", "int", json="attempt"),
    Trailer("Kgit-Branch", "branch", default="", json="branch"),
    Trailer("Kgit-Base", "base", json="base"),
    Trailer("Kgit-Reference", "reference", json="reference"),
    Trailer("Kgit-Hypothesis", "hypothesis", default="", json="hypothesis"),
    Trailer("Kgit-Expected-Gain", "expected_gain"),
    Trailer("Kgit-Status", "status", default="unknown", result="status", json="status"),
    Trailer("Kgit-Reason", "reason", result="reason"),
    Trailer("Kgit-Device", "device", default="", result="device", result_default="unknown", json="device"),
    Trailer("Kgit-Timing", "timing", default="", result="timing", result_default="none", json="timing"),
    Trailer("Kgit-Protocol", "protocol", default="", result="protocol", json="protocol"),
    Trailer("Kgit-Geomean-us", "geomean_us", "float", fmt="{:.3f}", result="geomean_us", ok_only=True,
            json="geomean_us"),
    Trailer("Kgit-Noise", "noise"),  # "<relative standard error>%", from the result's spreads (figures.py)
    Trailer("Kgit-Time-us", "times", "times", fmt="{:.3f}", result="shapes", ok_only=True, json="times_us"),
    Trailer("Kgit-Cause", "cause"),  # a failure's one-line cause (cause.py)
    Trailer("Kgit-Harness", "harness", default="", result="harness", result_default=""),
    # The backend and host that measured it ("command@mi300-box"; measure.evaluator_of).
    Trailer("Kgit-Evaluator", "evaluator", default="", json="evaluator"),
    Trailer("Kgit-Eval-s", "eval_s", "float", fmt="{:.1f}", result="eval_s", result_default=0, json="eval_s"),
    Trailer("Kgit-Speedup", "speedup", "float", fmt="{:.3f}", json="speedup"),
    Trailer("Kgit-Speedup-Baseline", "speedup_baseline", "float", fmt="{:.3f}", json="speedup_baseline"),
    Trailer("Kgit-Model", "model", default="", json="model"),
    Trailer("Kgit-Cost-USD", "cost", "float", fmt="{:.6f}", json="cost_usd"),
    Trailer("Kgit-Tokens", "tokens", "float", fmt="{:d}", json="tokens"),
    Trailer("Kgit-Run", "run", json="run"),  # the `kgit evolve` run whose model calls the cost log holds
    Trailer("Kgit-Squash-Of", "squash_of"),
    # Build facts (docs/targets.md): one trailer per declared target, then which Triton made them.
    Trailer("Kgit-Target-", "targets", "family", default={}, json="targets",
            encode=harness_targets.key_of_name, decode=harness_targets.name_of_key, names=harness_targets.KNOWN),
    Trailer("Kgit-Targets-Compiler", "targets_compiler"),
)
BY_ATTR = {t.attr: t for t in SCHEMA}
BY_KEY = {t.key: t for t in SCHEMA if t.kind != "family"}
FAMILIES = tuple(t for t in SCHEMA if t.kind == "family")
_FAMILY_TAIL = re.compile(r"[A-Za-z0-9-]+")


def family_of(key: str) -> tuple[Trailer, str] | None:
    """(the family row, the name) of a trailer key such as `Kgit-Target-sm-90a`, or None."""
    for t in FAMILIES:
        if key.startswith(t.key) and _FAMILY_TAIL.fullmatch(key, len(t.key)):
            name = t.decode(key[len(t.key):])
            return (t, name) if name in t.names else None
    return None


def lines(values: dict) -> list[tuple[str, str]]:
    """[(key, value)] for the attributes in `values`, in schema order; None leaves a trailer out."""
    unknown = set(values) - set(BY_ATTR)
    if unknown:
        raise ValueError(f"no trailer for {sorted(unknown)}")  # a programming error: add a SCHEMA row
    out = []
    for t in SCHEMA:
        value = values.get(t.attr)
        if value is None:
            continue
        if t.kind == "times":
            out += [(t.key, f"{shape} {t.fmt.format(us)}") for shape, us in value.items()]
        elif t.kind == "family":
            # Keys come from kgit's fixed table of names, never from reported text.
            out += [(t.key + t.encode(name), text) for name, text in value.items() if name in t.names]
        elif isinstance(value, str):
            out.append((t.key, value))
        else:
            out.append((t.key, t.fmt.format(int(value) if t.fmt == "{:d}" else value)))
    return out


def from_result(result: Result) -> dict:
    """The trailer values (by attribute) that carry a harness result."""
    ok = result.status == "ok"
    values = {}
    for t in SCHEMA:
        if t.result is None or (t.ok_only and not ok):
            continue
        if t.kind == "times":
            values[t.attr] = result_times(result)
            continue
        value = getattr(result, t.result)
        if value is None or value == "":
            value = t.result_default
        values[t.attr] = value
    # The rest are derived from the result rather than copied from a field.
    for key, value in (figures.noise_trailer(result) if ok else []) + cause.trailer(result):
        values[BY_KEY[key].attr] = value
    values.update(target_values(result))
    return values


def target_values(result: Result) -> dict:
    """The build-facts trailers' values of a result: {name: its line} per target, and the compiler."""
    facts = result.targets or {}
    results = facts.get("results") or {}
    if not results:
        return {}
    return {"targets": {name: harness_targets.trailer_value(res) for name, res in results.items()},
            "targets_compiler": f"triton {facts.get('triton') or 'unknown'}, candidate-reported"}


def to_result(attempt) -> dict:
    """The result fields an attempt's trailers carry (`from_result` read backwards)."""
    doc = {}
    for t in SCHEMA:
        if t.result is None or (t.ok_only and not attempt.ok):
            continue
        value = getattr(attempt, t.attr)
        doc[t.result] = [{"key": k, "mean_us": v} for k, v in value.items()] if t.kind == "times" else value
    return doc
