"""A small OpenAI-compatible chat-completions endpoint on 127.0.0.1, standard library only.

The tests and benchmarks/llm_faults.py point the real litellm client at it (`--model
openai/<name> --api-base <url>`). Every request is answered by the next step of a
script the caller plays, and logged with the stage it was for and the token counts the
endpoint reported, so a test can compare what kgit recorded with what the "provider"
billed.

Steps (the helpers below build them):

    answer(text)             200, finish_reason "stop"
    cut(text)                200, finish_reason "length": the answer stopped at the output limit
    status(code, after)      an error status with an OpenAI-style error body; `after` sets Retry-After
    limited(seconds, after)  429 with Retry-After until `seconds` after the step was first reached,
                             then the next step: a rate-limit window
    sleep(seconds)           an answer that comes too late (the client's timeout)
    raw(body), broken()      a malformed body, a body cut mid-way
    die()                    the connection closed unanswered, and nothing listens any more

A step given a `stage` ("select", "design", "write" or "fix") answers only that stage's
request; any other gets a 500 that names the mismatch, so a test fails on the first
request kgit did not make in the order the script expected.

Token counts are words (whitespace-separated) of the messages sent and of the answer,
unless a step says otherwise; a system message the endpoint saw before is reported as
cached prompt tokens, as a provider with prompt caching would.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# How each stage's request can be told apart: the opening of its template (prompts/*.md).
STAGE_MARKS = (("select", "You are the selector."), ("design", "You are the designer."),
               ("fix", "Your last attempt at it did not"), ("write", "You are the writer of plan"))


@dataclass
class Step:
    kind: str
    text: str = ""
    code: int = 200
    seconds: float = 0.0
    headers: dict = field(default_factory=dict)
    stage: str | None = None
    usage: dict | None = None  # token counts to report instead of the word counts
    body: bytes = b""


def answer(text: str, stage: str | None = None, usage: dict | None = None) -> Step:
    return Step("answer", text, stage=stage, usage=usage)


def cut(text: str, stage: str | None = None) -> Step:
    return Step("cut", text, stage=stage)


def status(code: int, after: float | None = None, stage: str | None = None, headers: dict | None = None) -> Step:
    extra = dict(headers or {})
    if after is not None:
        extra["Retry-After"] = f"{after:g}"
    return Step("status", code=code, headers=extra, stage=stage)


def limited(seconds: float, after: float, stage: str | None = None) -> Step:
    return Step("limited", seconds=seconds, headers={"Retry-After": f"{after:g}"}, stage=stage)


def sleep(seconds: float) -> Step:
    return Step("sleep", seconds=seconds)


def raw(body: bytes) -> Step:
    return Step("raw", body=body)


def broken() -> Step:
    return Step("broken")


def die() -> Step:
    return Step("die")


def stage_of(body: dict) -> str:
    """The kgit stage a request is for, from its user messages ("?" if none matches). litellm sends
    the system message of some models (OpenAI's o-series) as a user message: all are read."""
    text = "\n".join(_text(m.get("content")) for m in body.get("messages", []) if m.get("role") == "user")
    return next((stage for stage, mark in STAGE_MARKS if mark in text), "?")


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "\n\n".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def words(text: str) -> int:
    return len(text.split())


class Endpoint(ThreadingHTTPServer):
    """The server; `play(script)` sets what the next requests get; `log` is every request so far."""

    daemon_threads = True

    def __init__(self, script=(), repeat_last: bool = False, port: int = 0):
        # port: 0 for a free one; an earlier endpoint's to stand in for it (the same --api-base).
        super().__init__(("127.0.0.1", port), _Handler)
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.dead = False
        self.play(script, repeat_last)
        self._thread = None

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def play(self, script, repeat_last: bool = False):
        """Answer the next requests with `script`: steps in order (the last one again and again when
        `repeat_last`), or a dict of one step per stage, each answering every request of its stage."""
        with self.lock:
            self.script = dict(script) if isinstance(script, dict) else list(script)
            self.repeat_last = repeat_last
            self.log: list[dict] = []
            self.seen_systems: set[str] = set()
            self.window_started: dict[int, float] = {}
        return self

    def start(self):
        # A short poll: a step that kills the server must stop it listening before kgit's retry.
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                                        name="test-endpoint")
        self._thread.start()
        return self

    def stop(self):
        self.closing.set()
        with self.lock:
            dying, self.dead = self.dead, True
        if dying:
            self._killer.join()
        else:
            self.shutdown()
            self.server_close()

    def kill(self):
        """Stop listening now, from a request's own thread: later connections are refused."""
        with self.lock:
            if self.dead:
                return
            self.dead = True

        def die():
            self.shutdown()
            self.server_close()

        self._killer = threading.Thread(target=die, daemon=True)
        self._killer.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- what the tests read -----------------------------------------------------------
    @property
    def requests(self) -> int:
        return len(self.log)

    def stages(self) -> list[str]:
        return [entry["stage"] for entry in self.log]

    def billed(self, price_in: float, price_out: float, price_cached: float | None = None) -> float:
        """What the logged answers cost at these per-token prices, by the endpoint's own counts."""
        total = 0.0
        for entry in self.log:
            usage = entry.get("usage")
            if not usage:
                continue
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            fresh = usage["prompt_tokens"] - cached
            total += fresh * price_in + cached * (price_in if price_cached is None else price_cached)
            total += usage["completion_tokens"] * price_out
        return total

    # -- answering ---------------------------------------------------------------------
    def next_step(self, stage: str) -> tuple[int, Step]:
        with self.lock:
            index = len(self.log)
            if isinstance(self.script, dict):
                found = self.script.get(stage) or self.script.get("write" if stage == "fix" else stage)
                return index, found or Step("status", code=500, text=f"the test script answers no {stage} request")
            if not self.script:
                return index, Step("status", code=500, text="the test script has no step left")
            step = self.script[0]
            if step.kind == "limited":
                started = self.window_started.setdefault(id(step), time.monotonic())
                if time.monotonic() - started >= step.seconds:
                    self.script.pop(0)  # the window is over: the next step answers
                    return self.next_step_locked(stage, index)
                return index, step
            return self.next_step_locked(stage, index)

    def next_step_locked(self, stage: str, index: int) -> tuple[int, Step]:
        if not self.script:
            return index, Step("status", code=500, text="the test script has no step left")
        step = self.script[0]
        if step.stage is not None and step.stage != stage and not (step.stage == "write" and stage == "fix"):
            return index, Step("status", code=500, text=f"the test script expected a {step.stage} request, "
                                                        f"not {stage}")
        if len(self.script) > 1 or not self.repeat_last:
            self.script.pop(0)
        return index, step

    def usage(self, body: dict, text: str, step: Step) -> dict:
        if step.usage is not None:
            return dict(step.usage)
        messages = body.get("messages", [])
        prompt = sum(words(_text(m.get("content"))) for m in messages)
        systems = [_text(m.get("content")) for m in messages if m.get("role") == "system"]
        cached = sum(words(s) for s in systems if s in self.seen_systems)
        self.seen_systems.update(systems)
        completion = words(text)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return usage


class _Handler(BaseHTTPRequestHandler):
    server: Endpoint

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        stage = stage_of(body)
        index, step = self.server.next_step(stage)
        entry = {"time": time.monotonic(), "path": self.path, "auth": self.headers.get("Authorization"),
                 "body": body, "stage": stage, "step": step.kind, "status": step.code}
        with self.server.lock:
            self.server.log.append(entry)
        try:
            self._answer(step, body, entry)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): that is what the step was for

    def _answer(self, step: Step, body: dict, entry: dict):
        kind = step.kind
        if kind == "die":
            # Nothing listens from now on: later calls are refused, as by a server that crashed.
            self.close_connection = True
            self.server.kill()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if kind == "sleep":
            self.server.closing.wait(step.seconds)
            kind, step = "answer", Step("answer", "too late")
        if kind == "broken":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "5000")
            self.end_headers()
            self.wfile.write(b'{"id": "x", "choi')
            return
        if kind in ("status", "limited"):
            code = 429 if kind == "limited" else step.code
            entry["status"] = code
            message = step.text or ("Rate limit reached for requests" if code == 429 else f"injected {code}")
            data = json.dumps({"error": {"message": message, "type": "requests" if code == 429 else "server_error",
                                         "code": "rate_limit_exceeded" if code == 429 else None}}).encode()
            self._send(code, data, step.headers)
            return
        if kind == "raw":
            self._send(200, step.body, step.headers)
            return
        text = step.text
        usage = self.server.usage(body, text, step)
        entry["usage"] = usage
        doc = {"id": f"chatcmpl-{entry['time']:.6f}", "object": "chat.completion", "created": int(time.time()),
               "model": body.get("model", "?"),
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                            "finish_reason": "length" if kind == "cut" else "stop"}],
               "usage": usage}
        self._send(200, json.dumps(doc).encode(), step.headers)

    def _send(self, code: int, data: bytes, headers: dict):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass
