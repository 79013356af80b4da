"""The litellm wrapper: retries, fatal errors, unknown prices, the cache, secrets; and an
end-to-end run through litellm's openai/ provider against a local HTTP server.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import fake_llm
from conftest import fast_config_text
from kgit.config import LLMConfig
from kgit.errors import LLMError
from kgit.scientist import llm

SECRET = "sk-test-0123456789abcdef"


@pytest.fixture(scope="module")
def litellm():
    return llm.litellm_module()


def mocked(litellm, text="hello", model=None):
    """A real litellm completion with a canned answer (no network)."""
    def completion(**kwargs):
        kwargs.pop("api_base", None)
        return litellm.completion(**kwargs, mock_response=text)
    return completion


def test_every_litellm_exception_is_classified(litellm):
    import litellm.exceptions as le

    names = {n for n, c in vars(le).items() if inspect.isclass(c) and issubclass(c, BaseException)
             and c.__module__.startswith("litellm")}
    unknown = names - llm.RETRYABLE - llm.FATAL
    assert not unknown, f"litellm has new exception classes; add them to RETRYABLE or FATAL in llm.py: {unknown}"
    assert not llm.RETRYABLE & llm.FATAL


def test_retryable_errors_are_retried_with_backoff_then_answered(litellm, tmp_path):
    calls, sleeps = [], []
    real = mocked(litellm, "the answer")

    def flaky(**kwargs):
        calls.append(kwargs)
        if len(calls) < 3:
            raise litellm.RateLimitError("slow down", llm_provider="openai", model="gpt-4o-mini")
        return real(**kwargs)

    client = llm.Client(LLMConfig(model="gpt-4o-mini", retries=4, cache=False), None, completion=flaky,
                        sleep=sleeps.append)
    reply = client.ask("write", [{"role": "user", "content": "hi"}])
    assert reply.text == "the answer" and len(calls) == 3
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0] * 0.5
    assert calls[0]["num_retries"] == 0 and calls[0]["timeout"] == 300
    assert reply.cost is not None and reply.cost > 0 and reply.tokens > 0


def test_fatal_errors_stop_at_once_and_never_show_the_key(litellm, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    calls = []

    def refuse(**kwargs):
        calls.append(kwargs)
        raise litellm.AuthenticationError(f"invalid key {SECRET}", llm_provider="openai", model="gpt-4o")

    client = llm.Client(LLMConfig(model="gpt-4o", cache=False), None, completion=refuse, sleep=lambda s: None)
    with pytest.raises(LLMError) as e:
        client.ask("select", [{"role": "user", "content": "hi"}])
    assert len(calls) == 1
    assert SECRET not in str(e.value) and "[redacted]" in str(e.value)
    assert "api_key" not in calls[0]


def test_other_exceptions_are_not_swallowed(litellm):
    def bug(**kwargs):
        raise ZeroDivisionError("a bug")

    client = llm.Client(LLMConfig(model="gpt-4o", cache=False), None, completion=bug)
    with pytest.raises(ZeroDivisionError):
        client.ask("select", [{"role": "user", "content": "hi"}])


def test_unpriced_model_has_unknown_cost_and_answers_are_cached(litellm, tmp_path):
    calls = []
    real = mocked(litellm, "cached answer")

    def counting(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    config = LLMConfig(model="openai/my-local-model", api_base="http://127.0.0.1:9/v1")
    client = llm.Client(config, tmp_path / "cache", completion=counting)
    messages = [{"role": "user", "content": "same question"}]
    first = client.ask("design", messages)
    assert first.cost is None and not first.cached
    second = client.ask("design", messages)
    assert second.text == "cached answer" and second.cached and second.cost == 0.0 and len(calls) == 1
    client.ask("design", [{"role": "user", "content": "another question"}])
    assert len(calls) == 2
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2


# -- end to end through litellm's openai/ provider -------------------------------------
class ScriptedServer(ThreadingHTTPServer):
    def __init__(self, answers):
        super().__init__(("127.0.0.1", 0), Handler)
        self.answers = list(answers)
        self.requests = []


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        text = self.server.answers.pop(0) if self.server.answers else "no more answers"
        doc = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 50, "completion_tokens": 25, "total_tokens": 75}}
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_evolve_through_a_local_openai_compatible_server(kernel_repo, run_kgit, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "attempts": 1, "knowledge": []}))
    baseline = subprocess.run(["git", "rev-parse", "kgit/baseline"], cwd=kernel_repo, capture_output=True,
                              text=True, check=True).stdout.strip()
    server = ScriptedServer([
        # No select request: only the baseline exists, so the choice is forced.
        fake_llm.design(["Larger blocks per program"]),
        fake_llm.search_replace("kernel.py", "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096",
                                "BLOCK_SIZE = 2048  # kgit: tune 256 512 1024 2048 4096"),
    ])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        result = run_kgit(kernel_repo, "evolve", "--model", "openai/test-model", "--api-base", url)
    finally:
        server.shutdown()
    assert result.exit_code == 0, result.output
    assert [r["path"] for r in server.requests] == ["/v1/chat/completions"] * 2
    assert server.requests[0]["body"]["model"] == "test-model"
    assert "had no price" in result.output

    def git(*args):
        return subprocess.run(["git", *args], cwd=kernel_repo, capture_output=True, text=True, check=True).stdout

    message = git("log", "-1", "--format=%B", "--branches=kgit/*")
    assert "Kgit-Status: ok" in message and "Kgit-Model: openai/test-model" in message
    assert "Kgit-Cost-USD: unknown" in message and "Kgit-Tokens: 150" in message
    # The key went to the server (that is its job) and nowhere else.
    assert server.requests[0]["auth"] == f"Bearer {SECRET}"
    assert SECRET not in git("log", "--all", "--format=%B") + result.output
    cache = list((kernel_repo / ".git" / "kgit" / "cache" / "llm").rglob("*.json"))
    assert len(cache) == 2 and all(SECRET not in p.read_text() for p in cache)
