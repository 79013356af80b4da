"""LLM faults from a real HTTP server on 127.0.0.1, through litellm's openai/ provider:
rate limits, server errors, timeouts, broken bodies, empty, enormous and garbage
answers, and answers that try to edit files outside the editable set or read the
environment. Each ends as a retry, a recorded attempt or one clear error; none leaks
the API key.
"""

from __future__ import annotations

import socket

import endpoint
import fake_llm
import pytest
from conftest import fast_config_text, git

from kgit.archive import costlog
from kgit.archive.repo import Repo
from kgit.config import LLMConfig
from kgit.errors import LLMError, LLMRateLimited, LLMUnavailable
from kgit.scientist import llm, ratelimits

SECRET = "sk-test-faults-0123456789abcdef"


def FaultServer(script):
    """The test endpoint (tests/endpoint.py) playing `script`, its last step again and again."""
    return endpoint.Endpoint(script, repeat_last=True)


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
@pytest.mark.slow
def test_rate_limit_and_unavailable_are_retried_with_growing_backoff(key):
    sleeps = []
    with FaultServer([endpoint.status(429), endpoint.status(503), endpoint.answer("finally")]) as server:
        reply = _ask(_client(server, sleeps, retries=2))
    assert reply.text == "finally" and server.requests == 3
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] <= 1.5 and 1.0 <= sleeps[1] <= 3.0


@pytest.mark.parametrize("step", [endpoint.status(500), endpoint.status(502), endpoint.status(503),
                                  endpoint.sleep(3.0), endpoint.raw(b"<html>gateway</html>"),
                                  endpoint.raw(b'{"unexpected": true}'), endpoint.broken()],
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


# -- rate limits: the provider says when to come back ----------------------------------------
@pytest.mark.parametrize("headers, seconds, source", [
    ({"retry-after": "2"}, 2.0, "Retry-After"),
    ({"retry-after": "1.5", "retry-after-ms": "700"}, 0.7, "retry-after-ms"),
    ({"retry-after": "Wed, 02 Dec 2026 06:00:30 GMT"}, 30.0, "Retry-After"),
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s",
      "x-ratelimit-remaining-tokens": "900", "x-ratelimit-reset-tokens": "20ms"}, 360.0, "x-ratelimit-reset-requests"),
    ({"x-ratelimit-reset-tokens": "1h2m3.5s"}, 3723.5, "x-ratelimit-reset-tokens"),
    ({"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": "2026-12-02T06:01:00Z"},
     60.0, "anthropic-ratelimit-tokens-reset"),
    ({"retry-after": "soon"}, None, None),
    ({"x-ratelimit-reset-requests": "6 minutes"}, None, None),
    ({}, None, None),
])
def test_the_wait_a_provider_asks_for_is_read_from_its_headers(headers, seconds, source):
    now = 1796191200.0  # 2026-12-02 06:00:00 UTC
    found = ratelimits.hint(headers, now=now)
    if seconds is None:
        assert found is None
    else:
        assert found == ratelimits.Hint(pytest.approx(seconds), source)


def test_a_rate_limit_with_retry_after_is_waited_out_without_using_a_retry(key):
    """llm.retries: 0, yet a 429 that says `Retry-After: 2` is waited out and answered, on a line
    that says how long; litellm's headers arrive prefixed or not."""
    sleeps, lines = [], []
    with FaultServer([endpoint.status(429, after=2), endpoint.answer("at last")]) as server:
        config = LLMConfig(model="openai/test-model", api_base=server.url, cache=False, retries=0)
        reply = _ask(llm.Client(config, None, sleep=sleeps.append, progress=lines.append))
    assert reply.text == "at last" and server.requests == 2
    assert sleeps == [2.0]
    assert len(lines) == 1 and "the provider asks to wait 2.0 s (Retry-After): waiting, 2 s left" in lines[0]
    assert "RateLimitError (HTTP 429): Rate limit reached for requests" in lines[0] and "litellm." not in lines[0]


def test_a_long_rate_limit_wait_counts_down(key):
    sleeps, lines = [], []
    with FaultServer([endpoint.status(429, after=40), endpoint.answer("at last")]) as server:
        config = LLMConfig(model="openai/test-model", api_base=server.url, cache=False, max_wait_s=60)
        assert _ask(llm.Client(config, None, sleep=sleeps.append, progress=lines.append)).text == "at last"
    assert sum(sleeps) == 40 and max(sleeps) <= llm.WAIT_LINE_S
    assert [line.rsplit(", ", 1)[-1] for line in lines] == ["40 s left", "25 s left", "10 s left"]


def test_a_rate_limit_beyond_max_wait_is_not_waited_for(key):
    sleeps = []
    with FaultServer([endpoint.status(429, after=3600)]) as server:
        with pytest.raises(LLMRateLimited) as err:
            _ask(_client(server, sleeps, retries=4, max_wait_s=300))
    assert server.requests == 1 and sleeps == []
    message = str(err.value)
    assert "asks to wait 3600 s (Retry-After), more than llm.max_wait_s (300 s)" in message
    assert "Check the model string" not in message and message.count("RateLimitError") == 1


def test_a_rate_limit_without_a_time_that_outlasts_the_retries_is_a_rate_limit(key):
    sleeps = []
    with FaultServer([endpoint.status(429)]) as server:
        with pytest.raises(LLMRateLimited, match="stayed rate limited through 2 tries"):
            _ask(_client(server, sleeps, retries=1))
    assert server.requests == 2 and len(sleeps) == 1


def test_a_server_error_with_retry_after_waits_that_long_and_uses_a_retry(key):
    sleeps = []
    with FaultServer([endpoint.status(503, after=3), endpoint.status(503, after=3)]) as server:
        with pytest.raises(LLMUnavailable) as err:
            _ask(_client(server, sleeps, retries=1))
    assert server.requests == 2 and sleeps == [3.0]
    message = str(err.value)
    assert type(err.value) is LLMUnavailable and "worth retrying" in message and "2 tries" in message
    assert "llm.retries: 1" in message and "Check the model string" not in message
    assert message.count("ServiceUnavailableError") == 1 and "(HTTP 503)" in message


def test_an_answer_cut_at_the_output_limit_is_marked(key):
    with FaultServer([endpoint.cut("half an ans")]) as server:
        reply = _ask(_client(server, [], retries=0))
    assert reply.text == "half an ans" and reply.truncated
    assert reply.completion_tokens == 3 and reply.prompt_tokens == 2


def test_every_retry_says_so_on_the_progress_line(key):
    sleeps, lines = [], []
    with FaultServer([endpoint.status(429), endpoint.status(503), endpoint.answer("finally")]) as server:
        config = LLMConfig(model="openai/test-model", api_base=server.url, cache=False, retries=2)
        reply = _ask(llm.Client(config, None, sleep=sleeps.append, progress=lines.append))
    assert reply.text == "finally" and len(lines) == 2
    assert "RateLimitError" in lines[0] and "try 2 of 3" in lines[0]
    assert "try 3 of 3" in lines[1] and all("retrying in" in line for line in lines)


def test_a_missing_key_is_fatal_at_once(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    sleeps = []
    with FaultServer([endpoint.answer("never sent")]) as server:
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
    with FaultServer([endpoint.status(401)]) as server:
        with pytest.raises(LLMError) as err:
            _ask(_client(server, sleeps, retries=3))
    assert server.requests == 1 and sleeps == []
    assert "API key" in str(err.value) and SECRET not in str(err.value)


def test_empty_and_enormous_answers_come_back_whole(key):
    huge = "y" * (8 << 20)
    with FaultServer([endpoint.answer(""), endpoint.answer(huge)]) as server:
        client = _client(server, [], retries=0)
        assert _ask(client).text == ""
        assert _ask(client).text == huge


# -- the run ---------------------------------------------------------------------------
def _evolve(repo, run_kgit, server, **evolve):
    settings = {"pick": 1, "attempts": 1, "knowledge": [], **evolve}
    (repo / ".kgit.yaml").write_text(fast_config_text(evolve=settings, llm={"retries": 1, "timeout_s": 5}))
    return run_kgit(repo, "evolve", "--model", "openai/test-model", "--api-base", server.url)



def test_garbage_answers_never_stop_the_run(kernel_repo, run_kgit, key):
    with FaultServer([endpoint.answer("I would rather not answer in JSON.")]) as server:
        result = _evolve(kernel_repo, run_kgit, server)
    assert result.exit_code == 0, result.output
    # no select call (only the baseline exists); design asked twice then skipped the iteration
    assert server.requests == 2
    assert "has no ```json block" in result.output and "skipped" in result.output
    assert SECRET not in result.output


@pytest.mark.slow
def test_hostile_writer_answers_are_recorded_as_rejected_attempts(kernel_repo, run_kgit, key):
    reference = (kernel_repo / "problem" / "reference.py").read_text()
    outside = "problem/reference.py\n```python\ndef ref_kernel(data):\n    return data[2]\n```\n"
    snoop = fake_llm.search_replace(
        "kernel.py", "def custom_kernel(data):",
        "import os\n\nLEAK = os.environ.get('OPENAI_API_KEY')\n\n\ndef custom_kernel(data):")
    script = [endpoint.answer(fake_llm.design(["Try anything"])), endpoint.answer(outside), endpoint.answer(snoop)]
    with FaultServer(script) as server:
        result = _evolve(kernel_repo, run_kgit, server, attempts=2)
    assert result.exit_code == 0, result.output
    log = Repo(kernel_repo).read()
    mine = sorted((a for a in log if a.experiment == 1), key=lambda a: a.attempt)
    assert [a.status for a in mine] == ["rejected", "rejected"]
    first = git(kernel_repo, "show", "-s", "--format=%B", mine[0].sha)
    assert "not an editable file" in first
    assert "forbidden import: os" in mine[1].trailers["Kgit-Reason"][0]
    for attempt in mine:  # nothing outside the editable set ever changed
        assert git(kernel_repo, "show", f"{attempt.sha}:problem/reference.py") == reference
    assert (kernel_repo / "problem" / "reference.py").read_text() == reference
    assert SECRET not in git(kernel_repo, "log", "--all", "--format=%B") + result.output


def test_a_writer_without_an_answer_commits_nothing_and_its_plan_waits(kernel_repo, run_kgit, key):
    """Transient failures that outlast the retries never end the run, and a writer that got no
    answer is no experiment: nothing is committed, the summary says `no answer`, the plan is
    kept, and the next run carries it out without designing anything."""
    script = [endpoint.answer(fake_llm.design(["Try anything"])), endpoint.status(503)]
    before = git(kernel_repo, "rev-list", "--branches", "--tags")
    with FaultServer(script) as server:
        result = _evolve(kernel_repo, run_kgit, server, attempts=3)
        assert server.stages() == ["design", "write", "write"]  # the writer's try and one retry
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and SECRET not in result.output
    assert [a.experiment for a in Repo(kernel_repo).read()] == [0]
    assert "no answer (kept for the next run)" in result.stdout
    assert "kept for the next run: 1 plan(s)" in result.stdout
    line = next(ln for ln in result.stderr.splitlines() if "no answer" in ln)
    assert "503" in line and "worth retrying" in line and "Check the model string" not in line
    assert "kept for the next run" in line
    assert git(kernel_repo, "rev-list", "--branches", "--tags") == before
    # The design call, answered, is in the cost log although no commit carries it.
    assert [r["stage"] for r in costlog.read(Repo(kernel_repo))] == ["design"]
    with Repo(kernel_repo).lock("test"):
        pass
    assert not list((kernel_repo / ".git" / "kgit" / "worktrees").glob("*"))

    # The next run: the same plan, from its first attempt, and no select or design call.
    with FaultServer([endpoint.answer(fake_llm.search_replace("kernel.py", "NO SUCH LINE", "x = 1"))]) as server:
        again = _evolve(kernel_repo, run_kgit, server, attempts=1)
        assert server.stages() == ["write"]
    assert again.exit_code == 0, again.output
    assert "took up 1 plan(s)" in again.stdout
    mine = [a for a in Repo(kernel_repo).read() if a.experiment == 1]
    assert [(a.status, a.hypothesis) for a in mine] == [("rejected", "Try anything")]
    assert not (kernel_repo / ".git" / "kgit" / "pending-plans.json").exists()


def test_a_server_dead_from_the_start_fails_the_run_in_one_line(kernel_repo, run_kgit, key):
    """Every model call failed: the run exits non-zero with the cause, and never calls itself offline."""
    with FaultServer([endpoint.status(503)]) as server:
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
    with FaultServer([endpoint.answer("never sent")]) as server:
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
    with FaultServer([endpoint.status(401)]) as server:
        result = _evolve(kernel_repo, run_kgit, server)
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("kgit: ")]
    assert len(errors) == 1 and "401" in errors[0] and "Traceback" not in result.output
    assert SECRET not in result.output
