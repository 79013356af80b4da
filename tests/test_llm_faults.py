"""LLM faults from a real HTTP server on 127.0.0.1, through litellm's openai/ provider:
rate limits, server errors, timeouts, broken bodies, empty, enormous and garbage
answers, and answers that try to edit files outside the editable set or read the
environment. Each ends as a retry, a recorded attempt or one clear error; none leaks
the API key.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import fake_llm
from conftest import fast_config_text
from kgit.archive.repo import Repo
from kgit.config import LLMConfig
from kgit.errors import LLMError
from kgit.scientist import llm

SECRET = "sk-test-faults-0123456789abcdef"


class FaultServer(ThreadingHTTPServer):
    """Answers each request with the next step of a script: ("answer", text), ("status", code),
    ("sleep", seconds), ("raw", body bytes) or ("truncated", None). The last step repeats."""

    def __init__(self, script):
        super().__init__(("127.0.0.1", 0), FaultHandler)
        self.script = list(script)
        self.requests = 0
        self.closing = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.closing.set()
        self.shutdown()
        self.server_close()


class FaultHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        server.requests += 1
        kind, arg = server.script.pop(0) if len(server.script) > 1 else server.script[0]
        if kind == "sleep":
            server.closing.wait(arg)
            kind, arg = "answer", "too late"
        try:
            if kind == "truncated":
                self.send_response(200)
                self.send_header("Content-Length", "5000")
                self.end_headers()
                self.wfile.write(b'{"id": "x", "choi')
                return
            if kind == "status":
                self.send_response(arg)
                body = json.dumps({"error": {"message": f"injected {arg}", "type": "server_error"}}).encode()
            elif kind == "raw":
                self.send_response(200)
                body = arg
            else:
                self.send_response(200)
                body = json.dumps({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "test-model",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": arg},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout): that is the point of the step

    def log_message(self, *args):
        pass


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")


def _client(server, sleeps, **settings):
    config = LLMConfig(model="openai/test-model", api_base=server.url, cache=False, **settings)
    return llm.Client(config, None, sleep=sleeps.append)


def _ask(client):
    return client.ask("design", [{"role": "user", "content": "plans, please"}])


# -- the wrapper ------------------------------------------------------------------------
def test_rate_limit_and_unavailable_are_retried_with_growing_backoff(key):
    sleeps = []
    with FaultServer([("status", 429), ("status", 503), ("answer", "finally")]) as server:
        reply = _ask(_client(server, sleeps, retries=2))
    assert reply.text == "finally" and server.requests == 3
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] <= 1.5 and 1.0 <= sleeps[1] <= 3.0


@pytest.mark.parametrize("step", [("status", 500), ("status", 502), ("status", 503), ("sleep", 3.0),
                                  ("raw", b"<html>gateway</html>"), ("raw", b'{"unexpected": true}'),
                                  ("truncated", None)],
                         ids=["500", "502", "503", "timeout", "html", "no-choices", "truncated"])
def test_persistent_faults_end_in_one_llm_error(key, step):
    sleeps = []
    with FaultServer([step]) as server:
        with pytest.raises(LLMError) as err:
            _ask(_client(server, sleeps, retries=1, timeout_s=0.5))
    assert server.requests == 2  # the first try and one retry (llm.retries: 1), no hidden extra retries
    message = str(err.value)
    assert "openai/test-model" in message and "llm.retries" in message
    assert SECRET not in message


def _closed_port() -> int:
    """A local port where nothing listens (bound once to pick it, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_every_retry_says_so_on_the_progress_line(key):
    sleeps, lines = [], []
    with FaultServer([("status", 429), ("status", 503), ("answer", "finally")]) as server:
        config = LLMConfig(model="openai/test-model", api_base=server.url, cache=False, retries=2)
        reply = _ask(llm.Client(config, None, sleep=sleeps.append, progress=lines.append))
    assert reply.text == "finally" and len(lines) == 2
    assert "RateLimitError" in lines[0] and "try 2 of 3" in lines[0]
    assert "try 3 of 3" in lines[1] and all("retrying in" in line for line in lines)


def test_a_missing_key_is_fatal_at_once(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    sleeps = []
    with FaultServer([("answer", "never sent")]) as server:
        with pytest.raises(LLMError) as err:
            _ask(_client(server, sleeps, retries=4))
    assert type(err.value) is LLMError  # fatal: evolve stops instead of recording and going on
    assert server.requests == 0 and sleeps == []
    assert "has no API key" in str(err.value) and "\n" not in str(err.value)


def test_a_refused_connection_is_retried_twice_then_fatal(key):
    sleeps, lines = [], []
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    config = LLMConfig(model="openai/test-model", api_base=url, cache=False, retries=4)
    client = llm.Client(config, None, sleep=sleeps.append, progress=lines.append)
    with pytest.raises(LLMError) as err:
        _ask(client)
    assert type(err.value) is LLMError and "nothing accepts connections" in str(err.value)
    assert url in str(err.value) and "tried 3 time(s)" in str(err.value)
    assert len(sleeps) == 2 and len(lines) == 2 and all("retrying in" in line for line in lines)


def test_setup_problems_are_found_in_the_exception_chain():
    class Wrapped(Exception):
        pass

    try:
        try:
            raise ConnectionRefusedError(111, "refused")
        except ConnectionRefusedError as inner:
            raise Wrapped("Connection error.") from inner
    except Wrapped as outer:
        assert llm.setup_problem(outer) == "refused"
    assert llm.setup_problem(Wrapped("OpenAIException - Missing credentials. Please pass an `api_key`")) == "no key"
    assert llm.setup_problem(Wrapped("Missing Anthropic API Key - A call is being made")) == "no key"
    assert llm.setup_problem(Wrapped("Rate limit reached")) is None


def test_authentication_errors_are_not_retried(key):
    sleeps = []
    with FaultServer([("status", 401)]) as server:
        with pytest.raises(LLMError) as err:
            _ask(_client(server, sleeps, retries=3))
    assert server.requests == 1 and sleeps == []
    assert "API key" in str(err.value) and SECRET not in str(err.value)


def test_empty_and_enormous_answers_come_back_whole(key):
    huge = "y" * (8 << 20)
    with FaultServer([("answer", ""), ("answer", huge)]) as server:
        client = _client(server, [], retries=0)
        assert _ask(client).text == ""
        assert _ask(client).text == huge


# -- the run ---------------------------------------------------------------------------
def _evolve(repo, run_kgit, server, **evolve):
    settings = {"pick": 1, "attempts": 1, "knowledge": [], **evolve}
    (repo / ".kgit.yaml").write_text(fast_config_text(evolve=settings, llm={"retries": 1, "timeout_s": 5}))
    return run_kgit(repo, "evolve", "--model", "openai/test-model", "--api-base", server.url)


def _git(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_garbage_answers_never_stop_the_run(kernel_repo, run_kgit, key):
    with FaultServer([("answer", "I would rather not answer in JSON.")]) as server:
        result = _evolve(kernel_repo, run_kgit, server)
    assert result.exit_code == 0, result.output
    # no select call (only the baseline exists); design asked twice then skipped the iteration
    assert server.requests == 2
    assert "has no ```json block" in result.output and "skipped" in result.output
    assert SECRET not in result.output


def test_hostile_writer_answers_are_recorded_as_rejected_attempts(kernel_repo, run_kgit, key):
    reference = (kernel_repo / "problem" / "reference.py").read_text()
    outside = "problem/reference.py\n```python\ndef ref_kernel(data):\n    return data[2]\n```\n"
    snoop = fake_llm.search_replace(
        "kernel.py", "def custom_kernel(data):",
        "import os\n\nLEAK = os.environ.get('OPENAI_API_KEY')\n\n\ndef custom_kernel(data):")
    script = [("answer", fake_llm.design(["Try anything"])), ("answer", outside), ("answer", snoop)]
    with FaultServer(script) as server:
        result = _evolve(kernel_repo, run_kgit, server, attempts=2)
    assert result.exit_code == 0, result.output
    log = Repo(kernel_repo).read()
    mine = sorted((a for a in log if a.experiment == 1), key=lambda a: a.attempt)
    assert [a.status for a in mine] == ["rejected", "rejected"]
    first = _git(kernel_repo, "show", "-s", "--format=%B", mine[0].sha)
    assert "not an editable file" in first
    assert "forbidden import: os" in mine[1].trailers["Kgit-Reason"][0]
    for attempt in mine:  # nothing outside the editable set ever changed
        assert _git(kernel_repo, "show", f"{attempt.sha}:problem/reference.py") == reference
    assert (kernel_repo / "problem" / "reference.py").read_text() == reference
    assert SECRET not in _git(kernel_repo, "log", "--all", "--format=%B") + result.output


def test_a_dead_server_is_recorded_and_the_run_goes_on(kernel_repo, run_kgit, key):
    """Transient failures that outlast the retries never end the run: the writer's
    attempt is committed as rejected with the error, and the run exits 0."""
    script = [("answer", fake_llm.design(["Try anything"])), ("status", 503)]
    before = _git(kernel_repo, "rev-list", "--all")
    with FaultServer(script) as server:
        result = _evolve(kernel_repo, run_kgit, server, attempts=3)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and SECRET not in result.output
    mine = [a for a in Repo(kernel_repo).read() if a.experiment == 1]
    assert [a.status for a in mine] == ["rejected"]  # one record, then the hypothesis stops
    body = _git(kernel_repo, "show", "-s", "--format=%B", mine[0].sha)
    assert "the writer did not answer" in body and "503" in body and "speedup" not in body
    assert set(before.split()) <= set(_git(kernel_repo, "rev-list", "--all").split())
    with Repo(kernel_repo).lock("test"):
        pass
    assert not list((kernel_repo / ".git" / "kgit" / "worktrees").glob("*"))


def test_a_server_dead_from_the_start_fails_the_run_in_one_line(kernel_repo, run_kgit, key):
    """Every model call failed: the run exits non-zero with the cause, and never calls itself offline."""
    with FaultServer([("status", 503)]) as server:
        result = _evolve(kernel_repo, run_kgit, server, iterations=3)
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("kgit: ")]
    assert len(errors) == 1, result.stderr
    assert "every model call of this run failed" in errors[0] and "503" in errors[0]
    assert "the designer did not answer" in result.stderr
    assert "offline" not in result.output
    # Stopped after the first iteration instead of failing the same way twice more: the
    # design call's first try and one retry (the select call is skipped, its choice forced).
    assert server.requests == 2
    assert [a.experiment for a in Repo(kernel_repo).read()] == [0]
    retries = [line for line in result.stderr.splitlines() if "retrying in" in line]
    assert len(retries) == 1 and all("openai/test-model" in line and "503" in line for line in retries)


def test_a_run_without_a_key_fails_at_once_in_one_line(kernel_repo, run_kgit, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with FaultServer([("answer", "never sent")]) as server:
        result = _evolve(kernel_repo, run_kgit, server)
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("kgit: ")]
    assert len(errors) == 1 and "has no API key" in errors[0] and "OPENAI_API_KEY" in errors[0]
    assert server.requests == 0 and "retrying" not in result.stderr and "offline" not in result.output


def test_a_run_against_a_refused_port_fails_fast_in_one_line(kernel_repo, run_kgit, key):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "attempts": 1, "knowledge": []},
                                                             llm={"retries": 4, "timeout_s": 5}))
    result = run_kgit(kernel_repo, "evolve", "--model", "openai/test-model", "--api-base", url)
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("kgit: ")]
    assert len(errors) == 1 and "nothing accepts connections" in errors[0] and url in errors[0]
    # Two short retries, each announced, instead of llm.retries (4) silent ones.
    assert len([line for line in result.stderr.splitlines() if "retrying in" in line]) == 2
    assert "offline" not in result.output and [a.experiment for a in Repo(kernel_repo).read()] == [0]


def test_a_fatal_model_error_stops_with_one_line(kernel_repo, run_kgit, key):
    with FaultServer([("status", 401)]) as server:
        result = _evolve(kernel_repo, run_kgit, server)
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("kgit: ")]
    assert len(errors) == 1 and "401" in errors[0] and "Traceback" not in result.output
    assert SECRET not in result.output
