"""What long work tells the person waiting: lines that stay, and, on a terminal, one live line
with the stage, the time so far and the limit of each evaluation in flight.

The live line is rewritten in place ("\\r" and erase-to-end) about once a second and erased
before a lasting line is written, so the two never interleave. Anywhere but a terminal (a
pipe, a file, `--json` runs) there is no live line at all: the output is exactly the lasting
lines. Library code receives a `Progress` as its `progress` callable and asks for a watch with
`evaluation(progress, label, limit_s)`, which is a no-op for a plain callable.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from dataclasses import dataclass

TICK_S = 1.0


@dataclass
class _Running:
    label: str
    limit_s: float | None
    started: float
    stage: str = "running"  # until the evaluator names a stage (a remote one never does)

    def text(self, now: float) -> str:
        limit = f" of the {self.limit_s:g} s limit" if self.limit_s else ""
        return f"{self.label}: {self.stage}, {now - self.started:.0f} s{limit}"


class Progress:
    """A `progress(line)` callable that also keeps the live line (`evaluation`)."""

    def __init__(self, stream=None, live: bool | None = None, clock=time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.live = _is_terminal(self.stream) if live is None else live
        self.clock = clock
        self._lock = threading.Lock()
        self._running: list[_Running] = []
        self._shown = False
        self._ticker: threading.Thread | None = None

    def __call__(self, line: str):
        with self._lock:
            self._erase()
            self.stream.write(line + "\n")
            self._draw()
            self.stream.flush()

    @contextlib.contextmanager
    def evaluation(self, label: str, limit_s: float | None):
        """A watch for one evaluation: call it with each stage; the live line shows it until the block ends."""
        if not self.live:
            yield None
            return
        running = _Running(label, limit_s, self.clock())

        def watch(stage: str):
            with self._lock:
                running.stage = stage
                self._draw()

        with self._lock:
            self._running.append(running)
            self._draw()
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, name="kgit-progress", daemon=True)
                self._ticker.start()
        try:
            yield watch
        finally:
            with self._lock:
                self._running.remove(running)
                self._erase()
                self._draw()
                self.stream.flush()

    def line_text(self) -> str:
        """The live line as it would be drawn now ("" when nothing is in flight)."""
        now = self.clock()
        text = " | ".join(r.text(now) for r in self._running)
        width = shutil.get_terminal_size().columns - 1
        return text if len(text) <= width else text[: max(width - 1, 0)] + "…"

    def _tick(self):
        while True:
            time.sleep(TICK_S)
            with self._lock:
                if not self._running:
                    self._ticker = None
                    return
                self._draw()
                self.stream.flush()

    def _draw(self):
        text = self.line_text() if self._running else ""
        if text:
            self.stream.write("\r" + text + "\x1b[K")
            self._shown = True

    def _erase(self):
        if self._shown:
            self.stream.write("\r\x1b[K")
            self._shown = False


def evaluation(progress, label: str, limit_s: float | None):
    """`progress.evaluation(...)` where progress is a `Progress`; for anything else (a plain
    callable, None) a watch that shows nothing."""
    start = getattr(progress, "evaluation", None)
    return start(label, limit_s) if start is not None else contextlib.nullcontext(None)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
