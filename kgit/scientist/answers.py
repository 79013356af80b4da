"""The selector's and designer's answers: one ```json block each, extracted and validated.

Every error message is meant for the model, which gets it back with the request to
answer again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_JSON_BLOCK = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.S)


class AnswerError(Exception):
    """The answer cannot be used; the message says what to send instead."""


def extract_json(text: str) -> dict:
    """The last fenced block that parses as a JSON object (or the whole answer, when it is one)."""
    candidates = _JSON_BLOCK.findall(text or "")
    if not candidates and (text or "").strip().startswith("{"):
        candidates = [text]
    errors = []
    for block in reversed(candidates):
        try:
            doc = json.loads(block)
        except json.JSONDecodeError as e:
            errors.append(f"{e.msg} at line {e.lineno} column {e.colno}")
            continue
        if isinstance(doc, dict):
            return doc
        errors.append(f"it is a JSON {type(doc).__name__}, not an object")
    if errors:
        raise AnswerError(f"the ```json block is not a valid JSON object ({errors[0]}). Send one ```json block "
                          "holding one object, with double-quoted keys and no comments or trailing commas.")
    raise AnswerError("the answer has no ```json block. End your answer with exactly one fenced ```json block "
                      "holding the object described in the instructions.")


@dataclass
class Selection:
    base: str
    reference: str | None
    reason: str


def selection(doc: dict, shas: list[str]) -> Selection:
    """Validate {"base", "reference", "reason"}; short shas are resolved against the archive."""
    base = _sha(doc.get("base"), shas, "base")
    if base is None:
        raise AnswerError('"base" is missing: give the sha of the attempt to build on, as listed in the archive table.')
    reference = _sha(doc.get("reference"), shas, "reference")
    reason = doc.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise AnswerError('"reason" is missing: say in a paragraph why this base (and reference).')
    return Selection(base, reference if reference != base else None, reason.strip())


def _sha(value, shas, key) -> str | None:
    if value in (None, "", "null"):
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{4,40}", value.strip()):
        raise AnswerError(f'"{key}" must be a commit sha from the archive table (hex digits), not {value!r}.')
    prefix = value.strip().lower()
    matches = [s for s in shas if s.startswith(prefix)]
    if len(matches) != 1:
        why = "is not in the archive" if not matches else "matches several commits; give more digits"
        raise AnswerError(f'"{key}": {value} {why}. Use a sha from the first column of the archive table.')
    return matches[0]


@dataclass
class Plan:
    title: str
    description: str
    rubric: str = ""
    gain_min: float | None = None
    gain_max: float | None = None
    innovation: float = 0.0
    assignment: dict = field(default_factory=dict)  # the offline strategist's parameter values
    base: str | None = None  # set when the plan must start from a commit other than the selection

    @property
    def expected_gain(self) -> str | None:
        if self.gain_min is None or self.gain_max is None:
            return None
        return f"{self.gain_min:.0%}..{self.gain_max:.0%}"

    def text(self) -> str:
        parts = [f"Plan: {self.title}", self.description]
        if self.rubric:
            parts.append(f"Rubric: {self.rubric}")
        return "\n\n".join(p for p in parts if p)


@dataclass
class Design:
    avenues: list
    plans: list
    chosen: list
    lessons: list | None = None  # the updated lab notebook; None when the answer has none
    fewer_because: str = ""  # why fewer than `pick` plans were chosen


def design(doc: dict, pick: int) -> Design:
    """Validate the designer's answer; choose by the paper's rule when `chosen` is absent."""
    avenues = doc.get("avenues", [])
    if not isinstance(avenues, list) or not all(isinstance(a, str) for a in avenues):
        raise AnswerError('"avenues" must be a list of strings.')
    raw = doc.get("plans")
    if not isinstance(raw, list) or not raw:
        raise AnswerError('"plans" must be a non-empty list of objects with title, description, rubric, '
                          "gain_min, gain_max and innovation.")
    plans = [_plan(p, i) for i, p in enumerate(raw)]
    chosen = doc.get("chosen")
    if chosen in (None, []):
        chosen = paper_pick(plans, pick)
    elif not isinstance(chosen, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in chosen):
        raise AnswerError('"chosen" must be a list of 0-based indices into "plans", such as [0, 3].')
    bad = [c for c in chosen if not 0 <= c < len(plans)]
    if bad:
        raise AnswerError(f'"chosen" holds {bad}, but "plans" has indices 0..{len(plans) - 1} (0-based).')
    lessons = doc.get("lessons")
    if lessons is not None and (not isinstance(lessons, list) or not all(isinstance(x, str) for x in lessons)):
        raise AnswerError('"lessons" must be a list of short strings: the lab notebook, updated.')
    fewer = doc.get("fewer_because")
    fewer = fewer.strip() if isinstance(fewer, str) and fewer.strip().lower() not in ("", "null", "none") else ""
    return Design(avenues, plans, list(dict.fromkeys(chosen))[:pick], lessons, fewer)


def _plan(p, i) -> Plan:
    if not isinstance(p, dict):
        raise AnswerError(f"plans[{i}] must be an object, not {type(p).__name__}.")
    title, description = p.get("title"), p.get("description")
    if not isinstance(title, str) or not title.strip() or not isinstance(description, str) or not description.strip():
        raise AnswerError(f'plans[{i}] needs a non-empty "title" and "description".')
    gains = []
    for key in ("gain_min", "gain_max"):
        value = p.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise AnswerError(f'plans[{i}].{key} must be a number: the expected gain as a fraction (0.10 = 10%).')
        gains.append(float(value))
    if gains[0] > gains[1]:
        raise AnswerError(f"plans[{i}]: gain_min ({gains[0]}) is above gain_max ({gains[1]}).")
    if max(abs(g) for g in gains) > 20:
        raise AnswerError(f"plans[{i}]: gains are fractions (0.10 = 10%), and {gains} looks like percentages.")
    innovation = p.get("innovation", 0)
    if not isinstance(innovation, (int, float)) or isinstance(innovation, bool):
        raise AnswerError(f"plans[{i}].innovation must be a number (a score, higher = more novel).")
    rubric = p.get("rubric", "")
    if isinstance(rubric, list):
        rubric = "; ".join(str(r) for r in rubric)
    return Plan(title.strip(), description.strip(), str(rubric).strip(), gains[0], gains[1], float(innovation))


def paper_pick(plans: list[Plan], pick: int) -> list[int]:
    """The paper's rule: the most innovative, the highest max gain, the highest min gain, then the rest."""
    keys = [lambda p: p.innovation, lambda p: p.gain_max or 0.0, lambda p: p.gain_min or 0.0]
    chosen: list[int] = []
    for key in keys:
        left = [i for i in range(len(plans)) if i not in chosen]
        if left and len(chosen) < pick:
            chosen.append(max(left, key=lambda i: key(plans[i])))
    for i in range(len(plans)):
        if len(chosen) >= pick:
            break
        if i not in chosen:
            chosen.append(i)
    return chosen


def ask_json(client, stage: str, messages: list[dict], validate, tries: int = 2):
    """Ask, validate, and re-ask with the error; returns (value or None, replies, last error).

    Only an answer that validates is kept in the answer cache (`client.keep`); the others are
    discarded, so a later run asks again instead of replaying them.
    """
    replies, error = [], None
    for _ in range(tries):
        reply = client.ask(stage, messages)
        replies.append(reply)
        try:
            value = validate(extract_json(reply.text))
        except AnswerError as e:
            client.discard(reply)
            error = cut_note(reply) + str(e)
            messages = messages + [{"role": "assistant", "content": reply.text},
                                   {"role": "user", "content": f"That answer could not be used: {error}\nAnswer again."}]
            continue
        client.keep(reply)
        return value, replies, None
    return None, replies, error


def cut_note(reply) -> str:
    """What to tell the model whose answer stopped at the output limit ("" otherwise)."""
    if not getattr(reply, "truncated", False):
        return ""
    size = f" ({reply.completion_tokens} tokens)" if getattr(reply, "completion_tokens", None) else ""
    return (f"the answer was cut off at the output limit{size} before it ended, so answer shorter: less prose, "
            "the required block first. In detail: ")
