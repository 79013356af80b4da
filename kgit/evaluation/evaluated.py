"""One evaluation as kgit holds it: the harness's validated `Result` and what kgit adds.

The harness's result travels as a kgit.result/1 JSON document (the judge's result pipe,
a command evaluator's output, a Ray task's return), and an evaluator hands kgit that
document. `Evaluation.of` validates it once, at that boundary; past it the workflow,
evolve, remeasure, the review views and the CLI read typed fields, never string keys,
and the archive maps the `Result` to trailers and notes (kgit/archive/trailers.py,
measure.py). `to_document` is the document again, for JSON output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kgit.archive.measure import evaluator_of
from kgit_harness import result as result_mod
from kgit_harness.result import Result

# The keys kgit's evaluators add to the harness's document (kgit/evaluation/child.py, backends.py).
KGIT_KEYS = ("stdout", "stderr", "sandbox", "worker")


@dataclass
class Evaluation:
    """The harness's `Result` of one candidate, with where and how kgit ran it.

    `result.eval_s` is kgit's own clock around the whole evaluation for a local one (the
    child writes it over the judge's), the evaluator's figure otherwise.
    """

    result: Result
    stdout: str | None = None  # the judge's and runner's output, bounded (evaluator.max_output_bytes)
    stderr: str | None = None
    sandbox: dict[str, Any] | None = None  # the runner's confinement: namespaces, applied, missing
    worker: dict[str, Any] | None = None  # where it ran: backend, host, device (the slot's tag), env

    @classmethod
    def of(cls, evaluated: Evaluation | Result | dict[str, Any]) -> Evaluation:
        """An evaluator's answer (a result document, a Result, or an Evaluation) as an Evaluation.

        Raises ValueError for a document that is not a kgit.result/1 result.
        """
        if isinstance(evaluated, Evaluation):
            return evaluated
        if isinstance(evaluated, Result):
            return cls(evaluated)
        result = Result.from_dict(evaluated)
        added = {key: result.extra.pop(key) for key in KGIT_KEYS if key in result.extra}
        return cls(result, **added)

    @classmethod
    def new(cls, status: str, **fields: Any) -> Evaluation:
        """A result kgit makes itself (a rejected edit, a timeout), stamped with this harness."""
        return cls.of(result_mod.new(status, **fields))

    def to_document(self) -> dict[str, Any]:
        doc = self.result.to_dict()
        doc.update({key: getattr(self, key) for key in KGIT_KEYS if getattr(self, key) is not None})
        return doc

    @property
    def ok(self) -> bool:
        return self.result.status == "ok"

    # What kgit reads most, by name, read through to the harness's result.
    @property
    def status(self) -> str:
        return self.result.status

    @property
    def geomean_us(self) -> float | None:
        return self.result.geomean_us

    @property
    def device(self) -> str | None:
        return self.result.device

    @property
    def harness(self) -> str | None:
        return self.result.harness

    @property
    def timing(self) -> str | None:
        return self.result.timing

    @property
    def reason(self) -> str | None:
        return self.result.reason

    @property
    def error(self) -> str | None:
        return self.result.error

    @property
    def race(self) -> dict[str, Any] | None:
        """A stopped result's race (harness/racing.py): incumbent, shapes timed of how many, how much slower."""
        return self.result.extra.get("race")

    @property
    def evaluator(self) -> str | None:
        """The backend and host that took its figures ("command@mi300-box"), part of what
        makes two figures comparable (kgit/archive/measure.py); None when nobody said."""
        return evaluator_of(self.worker)

    @property
    def slot(self) -> str | None:
        """The device tag of the slot it ran in (a GPU index, "cpu"), when the evaluator said."""
        return (self.worker or {}).get("device")

