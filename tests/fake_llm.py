"""A scripted stand-in for the model: a queue of canned answers in the real formats and
a history of every prompt it was sent. It has the interface of kgit.scientist.llm.Client.
"""

from __future__ import annotations

import json

from kgit.scientist.llm import Reply


def flatten(content) -> str:
    """A message's content as one string: a plain string, or text parts joined (kgit's prompts.flatten)."""
    return content if isinstance(content, str) else "\n\n".join(p["text"] for p in content)


class FakeLLM:
    def __init__(self, answers, model="fake/scripted", tokens=120, cost=0.002, bound=None):
        # answers: [(stage, text)] or [(stage, text, {Reply fields})], consumed in order; a stage
        # mismatch fails the test at once
        self.answers = list(answers)
        self.model_name = model
        self.tokens, self.cost = tokens, cost
        self.bound_usd = bound  # what `bound` says a call may cost (None: not known, as for an unpriced model)
        self.history: list[tuple[str, list[dict]]] = []
        self.kept: list[Reply] = []  # answers the scientist used (the real client caches these)
        self.discarded: list[Reply] = []

    def model(self, stage: str) -> str:
        return self.model_name

    def bound(self, stage: str, messages: list[dict]) -> float | None:
        return self.bound_usd

    def ask(self, stage: str, messages: list[dict]) -> Reply:
        self.history.append((stage, messages))
        if not self.answers:
            raise AssertionError(f"the fake model was asked a {stage} question it has no answer for")
        want, text, *fields = self.answers.pop(0)
        assert want == stage, f"the loop asked for {stage}, the script expected {want}"
        return Reply(text, self.model_name, self.tokens, self.cost, **(fields[0] if fields else {}))

    def keep(self, reply: Reply):
        self.kept.append(reply)

    def discard(self, reply: Reply):
        self.discarded.append(reply)

    def prompts(self, stage: str) -> list[str]:
        """The last user message of every call to `stage`, its parts joined."""
        return [flatten(messages[-1]["content"]) for s, messages in self.history if s == stage]

    def requests(self, stage: str) -> list[str]:
        """Every call to `stage` as the whole text sent, messages in order."""
        return ["\n\n".join(flatten(m["content"]) for m in messages) for s, messages in self.history if s == stage]


def selection(base, reference=None, reason="the best line so far") -> str:
    doc = {"base": base, "reference": reference, "reason": reason}
    return f"Looking at the archive, the base is clear.\n\n```json\n{json.dumps(doc)}\n```\n"


def design(titles, chosen=None, gains=(0.05, 0.3), lessons=None, fewer_because=None) -> str:
    plans = [{"title": t, "description": f"{t}, to cut time on the large shapes.", "rubric": f"change the kernel: {t}",
              "gain_min": gains[0], "gain_max": gains[1], "innovation": 5 + i} for i, t in enumerate(titles)]
    doc = {"avenues": [f"avenue {i}" for i in range(10)], "plans": plans, "chosen": chosen or [0]}
    if lessons is not None:
        doc["lessons"] = lessons
    if fewer_because is not None:
        doc["fewer_because"] = fewer_because
    return f"Here are the plans.\n\n```json\n{json.dumps(doc, indent=1)}\n```\n"


def search_replace(path, search, replace, note="I changed the block size.") -> str:
    return f"{note}\n\n{path}\n```python\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"


def whole_file(path, text, note="Here is the whole file.") -> str:
    return f"{note}\n\n{path}\n```python\n{text.rstrip()}\n```\n"
