"""Where an evaluation's wall time goes: named moments on the system-wide monotonic clock.

The judge marks its own start-up, the moment the candidate arrived and each stage after
it; the runner reports its start-up marks in its `ready` message (informative only: the
runner is the untrusted side and nothing is decided on them). CLOCK_MONOTONIC is one
clock for every process of the host, namespaces included, so kgit's spawn time, the
judge's marks and the runner's line up. The result carries them as `phases`
(seconds after kgit started the judge); benchmarks/eval_breakdown.py prints the table.
"""

from __future__ import annotations

import contextlib
import math
import time

clock = time.monotonic


class Phases:
    def __init__(self, origin: float | None = None):
        self.origin = clock() if origin is None else float(origin)
        self.marks: dict[str, float] = {}
        self.spans: dict[str, float] = {}
        self.runner: dict[str, float] = {}
        self.listener = None  # called with each mark's name (the judge tells kgit of its timed loop)

    def mark(self, name: str):
        self.marks[name] = clock()
        if self.listener is not None:
            self.listener(name)

    def tell(self, name: str):
        """Pass `name` to the listener without keeping it as a mark (a stage met many times,
        such as each timed shape, that the breakdown does not list)."""
        if self.listener is not None:
            self.listener(name)

    @contextlib.contextmanager
    def span(self, name: str):
        """Adds the block's duration to `name` (a stage met several times, such as input generation)."""
        start = clock()
        try:
            yield
        finally:
            self.spans[name] = self.spans.get(name, 0.0) + clock() - start

    def runner_marks(self, reported) -> None:
        """The runner's own marks, kept only where they are plain finite numbers."""
        if isinstance(reported, dict):
            self.runner = {str(k)[:40]: float(v) for k, v in list(reported.items())[:16]
                           if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}

    def to_dict(self) -> dict:
        rel = lambda marks: {k: round(v - self.origin, 4) for k, v in marks.items()}  # noqa: E731
        return {"judge": rel(self.marks), "runner": rel(self.runner),
                "spans": {k: round(v, 4) for k, v in self.spans.items()}}


# One evaluation per judge process, so one record of where its time went: the judge marks
# its stages, timing.measure its parts (spans).
PHASES = Phases()
