"""A run's model calls: what each may cost before it is made, what it cost once answered.

`kgit evolve` hands the scientist a Ledger in place of its client. Before a call, the
ledger asks the client for the call's bound (kgit/scientist/params.py: the prompt, and
`max_tokens` of answer, at the model's prices) and refuses the call with BudgetReached
when what was spent, the bounds of the calls still in flight and this bound could
together pass `--max-cost`: so a run never starts a call it may not pay for, hypotheses
in threads included. A call without a known price (the manual model, a model litellm's
table lacks) is refused only once the priced calls have reached the budget. Once a call
is answered, the ledger adds what it really cost and appends it to the archive's cost
log (kgit/archive/costlog.py), whatever becomes of the answer.

Any client works: `model(stage)` and `ask(stage, messages)` are all it needs; `bound`,
`keep` and `discard` (kgit.scientist.llm.Client's) are used where it has them.
"""

from __future__ import annotations

import threading

from kgit.costs import usd


class BudgetReached(Exception):
    """A model call was not made: it could have passed `--max-cost`."""


class Ledger:
    def __init__(self, client, log=None, max_cost: float | None = None, on_call=None):
        self.client = client
        self.log = log  # a kgit.archive.costlog.Log, or None: nothing recorded
        self.max_cost = max_cost
        self.on_call = on_call or (lambda reply: None)
        self._lock = threading.Lock()
        self.spent = 0.0  # priced calls answered so far
        self.held = 0.0  # the bounds of priced calls in flight

    def model(self, stage: str) -> str:
        return self.client.model(stage)

    def ask(self, stage: str, messages: list[dict]):
        bound = self._reserve(stage, messages)
        try:
            reply = self.client.ask(stage, messages)
        finally:
            with self._lock:
                self.held -= bound or 0.0
        with self._lock:
            self.spent += reply.cost or 0.0
        self.on_call(reply)
        if self.log is not None and not reply.cached:
            self.log.append(record(stage, reply))
        return reply

    def keep(self, reply):
        keep = getattr(self.client, "keep", None)
        if keep is not None:
            keep(reply)

    def discard(self, reply):
        discard = getattr(self.client, "discard", None)
        if discard is not None:
            discard(reply)

    def _reserve(self, stage: str, messages: list[dict]) -> float | None:
        """The call's bound, held against the budget until it is answered; BudgetReached when it may not be made."""
        if self.max_cost is None:
            return None
        estimate = getattr(self.client, "bound", None)
        bound = estimate(stage, messages) if estimate is not None else None
        with self._lock:
            if bound is None:
                if self.spent >= self.max_cost:
                    raise BudgetReached(f"spent {usd(self.spent)} of --max-cost {usd(self.max_cost)}")
                return None
            if self.spent + self.held + bound > self.max_cost:
                held = f" and {usd(self.held)} held for calls in flight" if self.held else ""
                raise BudgetReached(
                    f"--max-cost {usd(self.max_cost)}: the next {stage} call to {self.model(stage)} may cost up "
                    f"to {usd(bound)} (its prompt and up to llm.max_tokens of answer at the model's prices), and "
                    f"with {usd(self.spent)} spent{held} that could pass the budget")
            self.held += bound
        return bound


def record(stage: str, reply) -> dict:
    """The cost log's line for one answered call."""
    doc = {"stage": stage, "model": reply.model, "tokens": reply.tokens, "cost_usd": reply.cost,
           "prompt_tokens": getattr(reply, "prompt_tokens", None),
           "completion_tokens": getattr(reply, "completion_tokens", None)}
    if getattr(reply, "truncated", False):
        doc["cut"] = True
    return doc
