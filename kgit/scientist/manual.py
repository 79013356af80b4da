"""The `manual` model: each request is a file, each answer a file written by a person or an agent.

The folder is `.git/kgit/manual/`. A request is `NNNN-<stage>.request.md`; its answer goes
into `NNNN-<stage>.answer.md`, and is read only once the marker `NNNN-<stage>.done` exists,
so an answer written in several steps (an editor, an agent's file tool) is never read half
done. The files are never deleted: together they are the transcript of the run.

A request identical to one already in the folder is not written again under a new number:
while that one is unanswered (a run stopped by Ctrl-C or a timeout) the next run waits on
the same files, and once it is answered its answer is used, as the answer cache would.
An answer kgit could not use (no ```json block, edits that do not apply) gets an empty
`NNNN-<stage>.unused` marker and is never used again: the same request is then written
anew under the next number.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from kgit.errors import LLMError, LLMUnavailable

POLL_S = 0.5
_NAME = re.compile(r"^(\d{4,})-([a-z]+)\.request\.md$")
_KEY_LINE = re.compile(r"^<!-- kgit-request-key: ([0-9a-f]{64}) -->$", re.M)

# What each stage must answer with; the prompt's last message spells it out in full.
FORMATS = {
    "select": "one fenced ```json block holding {\"base\": sha, \"reference\": sha or null, \"reason\": text}, "
              "as the prompt's instructions describe",
    "design": "one fenced ```json block holding {\"avenues\": [...], \"plans\": [...], \"chosen\": [...]}, "
              "as the prompt's instructions describe",
    "write": "edits of the editable files: the file name alone on a line, then <<<<<<< SEARCH / ======= / "
             ">>>>>>> REPLACE blocks, or the file name followed by one fenced block with the whole new file; "
             "any prose around them becomes the attempt's notes",
}


class Channel:
    """Hands requests to whoever drives the run through files, and waits for the answers."""

    def __init__(self, folder: Path, *, timeout_s: float | None = None, notify=None, sleep=time.sleep,
                 clock=time.monotonic, stopping: threading.Event | None = None):
        self.folder = Path(folder)
        self.timeout_s = timeout_s
        self.notify = notify or (lambda line: None)
        self._sleep, self._clock = sleep, clock
        self.stopping = stopping
        self._lock = threading.Lock()  # numbering, when hypotheses run in threads

    def ask(self, stage: str, messages: list[dict], key: str) -> str:
        """The answer text to `messages`; `key` identifies the request (the cache key)."""
        request = self._request_file(stage, messages, key)
        answer, done, _ = answer_paths(request)
        self.notify(f"manual model: {stage} request {request}")
        self.notify(f"manual model: write the answer to {answer.resolve()}, then create {done.resolve()}")
        started = self._clock()
        while not done.exists():
            if self.stopping is not None and self.stopping.is_set():
                # The run is stopping (Ctrl-C in another thread, an error): leave without an answer
                # and without a commit; the request stays for the next run.
                raise KeyboardInterrupt(f"the run stopped while waiting for {answer}")
            if self.timeout_s is not None and self._clock() - started >= self.timeout_s:
                raise LLMUnavailable(f"no answer to {request} within llm.manual_timeout_s = {self.timeout_s:g} s; "
                                     f"the request stays: answer it ({answer.name}, then {done.name}) and run "
                                     "kgit evolve again, or raise llm.manual_timeout_s.")
            self._sleep(POLL_S)
        try:
            return answer.read_text(encoding="utf-8")
        except FileNotFoundError:
            # A marker without an answer is an empty answer: kgit re-asks with the error, as for any bad answer.
            return ""
        except (OSError, UnicodeDecodeError) as e:
            raise LLMError(f"cannot read the answer {answer}: {e}. Write it again as UTF-8 text and run "
                           "kgit evolve again: the request stays, and its answer is read then.") from None

    def _request_file(self, stage: str, messages: list[dict], key: str) -> Path:
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            waiting = self._earlier(key)
            if waiting is not None:
                if not answer_paths(waiting)[1].exists():
                    self._make_newest(waiting)  # it is the request to answer now
                return waiting.resolve()
            number = max((int(m.group(1)) for p in self.folder.iterdir() if (m := _NAME.match(p.name))),
                         default=0) + 1
            path = self.folder / f"{number:04d}-{stage}.request.md"
            tmp = self.folder / f".{path.name}.tmp"
            tmp.write_text(render(stage, messages, key, path), encoding="utf-8")
            os.replace(tmp, path)  # a reader never sees half a request
            self._make_newest(path)
            return path.resolve()

    def retire(self, key: str):
        """The answer to `key` could not be used: mark it, so the same request is asked anew."""
        with self._lock:
            if not self.folder.exists():
                return
            for request in self._requests(key):
                _, done, unused = answer_paths(request)
                if done.exists():
                    unused.touch()

    def _make_newest(self, path: Path):
        """Give `path` a modification time later than every other file's in the folder.

        File times come from a coarse kernel clock, so a request written right after the
        previous answer's marker can carry the very same time; `ls -t` would then tie.
        """
        others = [p.stat().st_mtime_ns for p in self.folder.iterdir() if p != path and p.is_file()]
        now = max(time.time_ns(), max(others, default=0) + 1)
        os.utime(path, ns=(now, now))

    def _earlier(self, key: str) -> Path | None:
        """The request file already written for `key` whose answer is still to be used, if any."""
        return next((path for path in self._requests(key) if not answer_paths(path)[2].exists()), None)

    def _requests(self, key: str) -> list[Path]:
        """Every request file written for `key`, oldest first."""
        found = []
        for path in sorted(self.folder.glob("*.request.md")):
            if not _NAME.match(path.name):
                continue
            try:
                line = _KEY_LINE.search(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                continue
            if line and line.group(1) == key:
                found.append(path)
        return found


def answer_paths(request: Path) -> tuple[Path, Path, Path]:
    """(answer file, done marker, unused marker) of a request file."""
    stem = request.name[: -len(".request.md")]
    return (request.with_name(f"{stem}.answer.md"), request.with_name(f"{stem}.done"),
            request.with_name(f"{stem}.unused"))


def render(stage: str, messages: list[dict], key: str, path: Path) -> str:
    answer, done, _ = answer_paths(path)
    lines = [
        f"# kgit request {path.name}",
        "",
        f"Stage: {stage}. Answer the conversation below as its assistant would, in "
        f"{FORMATS.get(stage, 'the format the last message asks for')}.",
        "",
        f"Write the answer to `{answer.name}` in this folder, then create the empty file `{done.name}`: "
        "kgit reads the answer only once that marker exists.",
        "",
        f"<!-- kgit-request-key: {key} -->",
    ]
    for i, message in enumerate(messages, 1):
        lines += ["", f"<!-- kgit message {i} of {len(messages)}: {message['role']} -->", "",
                  str(message.get("content") or "")]
    return "\n".join(lines).rstrip() + "\n"


def parse_request(text: str) -> list[dict]:
    """The messages of a request file (for drivers written in Python, and the tests)."""
    parts = re.split(r"^<!-- kgit message \d+ of \d+: (\w+) -->$", text, flags=re.M)
    return [{"role": role, "content": body.strip("\n")} for role, body in zip(parts[1::2], parts[2::2])]
