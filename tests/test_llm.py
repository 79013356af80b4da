"""The litellm wrapper: retries, fatal errors, unknown prices, the cache, secrets; and an
end-to-end run through litellm's openai/ provider against a local HTTP server.
"""

from __future__ import annotations

import inspect
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import endpoint
import fake_llm
import pytest
from conftest import fast_config_text, git

from kgit.config import LLMConfig
from kgit.errors import LLMError, LLMUnavailable
from kgit.scientist import llm, manual

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


@pytest.mark.slow
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


def test_unpriced_model_has_unknown_cost_and_only_used_answers_are_cached(litellm, tmp_path):
    calls = []
    real = mocked(litellm, "cached answer")

    def counting(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    config = LLMConfig(model="openai/my-local-model", api_base="http://127.0.0.1:9/v1")
    client = llm.Client(config, tmp_path / "cache", completion=counting)
    messages = [{"role": "user", "content": "same question"}]
    first = client.ask("design", messages)
    assert first.cost is None and not first.cached and first.key
    # Not used yet: asked again, not replayed.
    assert not client.ask("design", messages).cached and len(calls) == 2
    client.keep(first)
    second = client.ask("design", messages)
    assert second.text == "cached answer" and second.cached and second.cost == 0.0 and len(calls) == 2
    assert client.bound("design", messages) == 0.0  # a cached answer costs nothing
    other = client.ask("design", [{"role": "user", "content": "another question"}])
    client.discard(other)
    assert len(calls) == 3 and len(list((tmp_path / "cache").glob("*.json"))) == 1
    # An answer that turns out unusable later is dropped from the cache too.
    client.discard(second)
    assert not list((tmp_path / "cache").glob("*.json"))


def test_a_changed_setting_is_a_new_cache_key(litellm, tmp_path):
    messages = [{"role": "user", "content": "q"}]
    clients = [llm.Client(LLMConfig(model="openai/gpt-4o-mini", **settings), None)
               for settings in ({}, {"temperature": 0.2}, {"max_tokens": 100}, {"api_base": "http://h:1/v1"})]
    keys = {llm.Client.key(client.request("write", messages)) for client in clients}
    assert len(keys) == 4


# -- what a request sends besides its messages --------------------------------------------
@pytest.mark.parametrize("model, settings, sent, said", [
    # A reasoning model takes no temperature: left out, said once; its limit becomes max_completion_tokens.
    ("openai/o3-mini", {}, {"max_completion_tokens": 16384}, True),
    ("openai/gpt-4o-mini", {}, {"temperature": 0.7, "max_tokens": 16384}, False),
    ("openai/gpt-4o-mini", {"temperature": None, "max_tokens": 999}, {"max_tokens": 999}, False),
    # A model litellm's table lacks gets no answer limit unless one is configured.
    ("openai/test-model", {}, {"temperature": 0.7}, False),
    ("openai/test-model", {"max_tokens": 2048}, {"temperature": 0.7, "max_tokens": 2048}, False),
], ids=["o3-mini", "gpt-4o-mini", "no-temperature", "unknown-model", "unknown-model-limit"])
def test_requests_send_only_what_the_model_takes(litellm, monkeypatch, model, settings, sent, said):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    lines = []
    with endpoint.Endpoint([endpoint.answer("one"), endpoint.answer("two")]) as server:
        client = llm.Client(LLMConfig(model=model, api_base=server.url, cache=False, **settings), None,
                            progress=lines.append)
        for _ in range(2):
            client.ask("design", [{"role": "user", "content": "plans"}])
    for entry in server.log:
        body = entry["body"]
        assert {k: body[k] for k in ("temperature", "max_tokens", "max_completion_tokens") if k in body} == sent
    assert len(lines) == int(said)  # once per model, not per call
    if said:
        assert f"{model} takes no temperature" in lines[0] and "llm.temperature: null" in lines[0]


def test_a_call_is_bounded_by_its_prompt_and_its_answer_limit(litellm):
    messages = [{"role": "system", "content": "You optimize kernels. " * 50}, {"role": "user", "content": "plans"}]
    priced = llm.Client(LLMConfig(model="openai/gpt-4o-mini", max_tokens=1000), None)
    prompt = litellm.token_counter(model="openai/gpt-4o-mini", messages=messages)
    assert prompt > 100
    price_in, price_out = (litellm.get_model_info("openai/gpt-4o-mini")[k] for k in
                           ("input_cost_per_token", "output_cost_per_token"))
    assert priced.bound("design", messages) == pytest.approx(prompt * price_in + 1000 * price_out)
    # No price known: no bound (the manual model, a model litellm's table lacks).
    assert llm.Client(LLMConfig(model="openai/test-model", max_tokens=1000), None).bound("design", messages) is None
    assert llm.Client(LLMConfig(model="manual"), None).bound("design", messages) is None


def test_an_error_is_named_once(litellm):
    error = litellm.InternalServerError("litellm.InternalServerError: InternalServerError: OpenAIException - "
                                        "injected 500", llm_provider="openai", model="x")
    assert llm.describe(error) == "InternalServerError: injected 500"
    refused = litellm.APIConnectionError("Connection error.", llm_provider="openai", model="x")
    assert llm.describe(refused) == "APIConnectionError: Connection error."


# -- end to end through litellm's openai/ provider -------------------------------------
def evolve_through(server, kernel_repo, run_kgit):
    """`kgit evolve` against the scripted endpoint, served from a thread for the run's length."""
    with server:
        return run_kgit(kernel_repo, "evolve", "--model", "openai/test-model", "--api-base", server.url)


@pytest.mark.slow
def test_evolve_through_a_local_openai_compatible_server(kernel_repo, run_kgit, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "attempts": 1, "knowledge": []}))
    server = endpoint.Endpoint([
        # No select request: only the baseline exists, so the choice is forced.
        endpoint.answer(fake_llm.design(["Larger blocks per program"]), stage="design",
                        usage={"prompt_tokens": 50, "completion_tokens": 25, "total_tokens": 75}),
        endpoint.answer(fake_llm.search_replace("kernel.py", "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096",
                                                "BLOCK_SIZE = 2048  # kgit: tune 256 512 1024 2048 4096"),
                        stage="write", usage={"prompt_tokens": 50, "completion_tokens": 25, "total_tokens": 75}),
    ])
    result = evolve_through(server, kernel_repo, run_kgit)
    assert result.exit_code == 0, result.output
    assert [r["path"] for r in server.log] == ["/v1/chat/completions"] * 2
    assert server.log[0]["body"]["model"] == "test-model"
    # The model has no price: every figure says unpriced, none says $0.
    assert "2 call(s) to openai/test-model, 150 tokens counted, unpriced (2 calls without a price)" in result.stdout
    assert "unpriced (1 call without a price) so far" in result.stderr
    assert "$0.0" not in result.output and "offline" not in result.output

    message = git(kernel_repo, "log", "-1", "--format=%B", "--branches=kgit/*")
    assert "Kgit-Status: ok" in message and "Kgit-Model: openai/test-model" in message
    assert "Kgit-Cost-USD: unknown" in message and "Kgit-Tokens: 150" in message
    # The key went to the server (that is its job) and nowhere else.
    assert server.log[0]["auth"] == f"Bearer {SECRET}"
    assert SECRET not in git(kernel_repo, "log", "--all", "--format=%B") + result.output
    cache = list((kernel_repo / ".git" / "kgit" / "cache" / "llm").rglob("*.json"))
    assert len(cache) == 2 and all(SECRET not in p.read_text() for p in cache)


# -- the manual model: requests and answers as files ------------------------------------
def _manual_client(tmp_path, sleep, **settings):
    lines = []
    config = LLMConfig(model="manual", **settings)
    client = llm.Client(config, tmp_path / "cache", sleep=sleep, manual_dir=tmp_path / "manual",
                        progress=lines.append)
    return client, lines


def _newest(folder):
    return max(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns)


def test_manual_answer_is_read_only_once_its_marker_exists(tmp_path):
    folder = tmp_path / "manual"
    full = "The plan, at length.\n\n```json\n{\"base\": \"abc\"}\n```\n"
    polls = []

    def answer_in_steps(seconds):
        # Each poll of kgit's wait is one step of a slow writer; only the marker finishes it.
        polls.append(seconds)
        request = folder / "0001-design.request.md"
        answer, done = folder / "0001-design.answer.md", folder / "0001-design.done"
        if len(polls) == 1:
            assert _newest(folder) == request  # the request to answer is the newest file
            answer.write_text(full[:10])
        elif len(polls) == 2:
            answer.write_text(full)
        else:
            done.touch()

    client, lines = _manual_client(tmp_path, answer_in_steps)
    messages = [{"role": "user", "content": "Design plans.\n\n## Task\nadd two vectors"},
                {"role": "assistant", "content": "no json here"},
                {"role": "user", "content": "That answer could not be used. Answer again."}]
    reply = client.ask("design", messages)
    assert reply.text == full and len(polls) == 3  # the partial answer of poll 1 was never read
    assert (reply.model, reply.cost, reply.tokens, reply.cached) == ("manual", None, None, False)
    request = folder / "0001-design.request.md"
    assert str((folder / "0001-design.answer.md").resolve()) in lines[-1]
    assert str((folder / "0001-design.done").resolve()) in lines[-1]
    text = request.read_text()
    assert "```json" in text and "Stage: design" in text
    assert manual.parse_request(text) == messages
    # Once used, the same request again is answered from the cache; the transcript files stay.
    client.keep(reply)
    again = client.ask("design", messages)
    assert again.text == full and again.cached and len(polls) == 3
    assert sorted(p.name for p in folder.iterdir()) == ["0001-design.answer.md", "0001-design.done",
                                                       "0001-design.request.md"]


def test_manual_requests_are_numbered_and_say_what_to_answer(tmp_path):
    folder = tmp_path / "manual"

    def answer(seconds):
        pending = _newest(folder)
        stem = pending.name[: -len(".request.md")]
        (folder / f"{stem}.answer.md").write_text(f"answer to {stem}")
        (folder / f"{stem}.done").touch()

    client, lines = _manual_client(tmp_path, answer)
    assert client.ask("select", [{"role": "user", "content": "pick a base"}]).text == "answer to 0001-select"
    assert client.ask("write", [{"role": "user", "content": "the edits"}]).text == "answer to 0002-write"
    write_request = (folder / "0002-write.request.md").read_text()
    assert "SEARCH" in write_request and "REPLACE" in write_request
    assert "```json" in (folder / "0001-select.request.md").read_text()
    assert sum("write the answer to" in line for line in lines) == 2


def test_manual_wait_interrupted_leaves_the_request_for_the_next_run(tmp_path):
    folder = tmp_path / "manual"

    def ctrl_c(seconds):
        raise KeyboardInterrupt

    messages = [{"role": "user", "content": "pick a base"}]
    client, _ = _manual_client(tmp_path, ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        client.ask("select", messages)
    # Answered while no run waits; the next run asks the same question and takes that answer.
    (folder / "0001-select.answer.md").write_text("late answer")
    (folder / "0001-select.done").touch()
    client, lines = _manual_client(tmp_path, ctrl_c)
    assert client.ask("select", messages).text == "late answer"
    assert sorted(p.name for p in folder.iterdir()) == ["0001-select.answer.md", "0001-select.done",
                                                       "0001-select.request.md"]


def test_manual_wait_ends_on_the_timeout_or_when_the_run_stops(tmp_path):
    client, _ = _manual_client(tmp_path, lambda s: time.sleep(0.01), manual_timeout_s=0.05)
    with pytest.raises(LLMUnavailable, match="llm.manual_timeout_s"):
        client.ask("design", [{"role": "user", "content": "plans"}])
    stopping = threading.Event()
    stopping.set()
    channel = manual.Channel(tmp_path / "other", stopping=stopping, sleep=lambda s: None)
    with pytest.raises(KeyboardInterrupt):
        channel.ask("write", [{"role": "user", "content": "edits"}], "0" * 64)


def test_an_unusable_manual_answer_is_asked_anew(tmp_path):
    """An answer kgit could not use is marked `.unused` and never read again: the same request,
    in this run or the next, is written under a new number."""
    folder = tmp_path / "manual"
    answers = iter(["no json at all", "```json\n{\"base\": \"abc\"}\n```"])

    def answer(seconds):
        request = _newest(folder)
        stem = request.name[: -len(".request.md")]
        (folder / f"{stem}.answer.md").write_text(next(answers))
        (folder / f"{stem}.done").touch()

    messages = [{"role": "user", "content": "pick a base"}]
    client, _ = _manual_client(tmp_path, answer)
    bad = client.ask("select", messages)
    client.discard(bad)
    assert (folder / "0001-select.unused").exists()
    client, _ = _manual_client(tmp_path, answer)  # the next run
    good = client.ask("select", messages)
    assert good.text.startswith("```json") and (folder / "0002-select.request.md").exists()
    client.keep(good)
    assert client.ask("select", messages).cached


def test_manual_marker_without_an_answer_is_an_empty_answer(tmp_path):
    folder = tmp_path / "manual"
    client, _ = _manual_client(tmp_path, lambda s: (folder / "0001-write.done").touch(), cache=False)
    assert client.ask("write", [{"role": "user", "content": "edits"}]).text == ""


def test_manual_model_needs_a_repository_folder(tmp_path):
    client = llm.Client(LLMConfig(model="manual"), None)
    with pytest.raises(LLMError, match="kgit evolve --model manual"):
        client.ask("select", [{"role": "user", "content": "hi"}])


def _drive_manual_run(proc, state, answers, seen, failures):
    """Answer each request `kgit evolve --model manual` announces on stderr, as an agent would."""
    announce = re.compile(r"manual model: (\w+) request (\S+)$")
    handin = re.compile(r"write the answer to (\S+), then create (\S+)$")
    try:
        request = None
        for line in proc.stderr:
            seen.append(line.rstrip("\n"))
            if found := announce.search(seen[-1]):
                request = Path(found.group(2))
                continue
            if not (found := handin.search(seen[-1])):
                continue
            answer, done = Path(found.group(1)), Path(found.group(2))
            assert request is not None and _newest(state) == request  # the request is the newest file
            assert answer.parent == state and answer.is_absolute()
            stage = request.name.split("-", 1)[1].split(".")[0]
            messages = manual.parse_request(request.read_text())
            assert messages and messages[-1]["role"] == "user"
            answer.write_text(answers[stage][:20])  # a slow writer: half an answer first
            answer.write_text(answers[stage])
            done.touch()
    except BaseException as e:  # noqa: BLE001 - reported by the test, and the run must not wait forever
        failures.append(repr(e))
        proc.kill()


@pytest.mark.slow
def test_evolve_with_the_manual_model_end_to_end(kernel_repo, tmp_path):
    """`kgit evolve --model manual -n 1` in a subprocess, answered from a thread through the files."""
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "attempts": 1, "knowledge": []}))
    baseline = subprocess.run(["git", "rev-parse", "kgit/baseline"], cwd=kernel_repo, capture_output=True,
                              text=True, check=True).stdout.strip()
    notes = "Doubling the block halves the programs launched.\n\nNo speedup is claimed before it is measured."
    answers = {
        "select": fake_llm.selection(baseline[:10]),
        "design": fake_llm.design(["Larger blocks per program"]),
        "write": fake_llm.search_replace("kernel.py", "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096",
                                         "BLOCK_SIZE = 2048  # kgit: tune 256 512 1024 2048 4096", note=notes),
    }
    state = (kernel_repo / ".git" / "kgit" / "manual").resolve()
    seen, failures = [], []
    with open(tmp_path / "stdout.txt", "w") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "kgit", "evolve", "--model", "manual", "-n", "1"],
                                cwd=kernel_repo, stdout=stdout, stderr=subprocess.PIPE, text=True)
        driver = threading.Thread(target=_drive_manual_run, args=(proc, state, answers, seen, failures), daemon=True)
        driver.start()
        try:
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
    driver.join(timeout=60)
    out = (tmp_path / "stdout.txt").read_text()
    stderr = "\n".join(seen)
    assert not failures and proc.returncode == 0, (failures, out + stderr)

    message = git(kernel_repo, "log", "-1", "--format=%B", "--branches=kgit/*")
    assert "Kgit-Status: ok" in message and "Kgit-Model: manual" in message and "Kgit-Cost-USD: unknown" in message
    assert "Doubling the block halves the programs launched.\n\nNo speed-up is claimed" in message
    assert "kernel.py kernel.py" not in message
    asked = sorted(p.name for p in state.iterdir() if p.name.endswith(".request.md"))
    stages = [name.split("-", 1)[1].split(".")[0] for name in asked]
    assert stages[-2:] == ["design", "write"] and set(stages) <= {"select", "design", "write"}
    for name in asked:  # the transcript: every request with its answer and marker, kept after the run
        stem = name[: -len(".request.md")]
        assert (state / f"{stem}.answer.md").exists() and (state / f"{stem}.done").exists()
    assert "unpriced" in out and "$0.0000" not in out and "offline" not in out
    assert "$0.0000" not in stderr


@pytest.mark.slow
def test_manual_run_interrupted_while_waiting_resumes_on_the_same_request(kernel_repo):
    from kgit import evolve, workflow

    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "attempts": 1, "knowledge": []}))
    repo, config = workflow.load(kernel_repo)
    config = evolve.with_overrides(config, model="manual")
    folder = repo.state / "manual"
    answers = {
        "select": fake_llm.selection(repo.rev("kgit/baseline")[:10]),
        "design": fake_llm.design(["Larger blocks per program"]),
        "write": fake_llm.search_replace("kernel.py", "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096",
                                         "BLOCK_SIZE = 2048  # kgit: tune 256 512 1024 2048 4096"),
    }

    def driver(interrupt_at):
        def poll(seconds):
            request = _newest(folder)
            stage = request.name.split("-", 1)[1].split(".")[0]
            if stage == interrupt_at:
                raise KeyboardInterrupt  # Ctrl-C while kgit waits for this answer
            stem = request.name[: -len(".request.md")]
            (folder / f"{stem}.answer.md").write_text(answers[stage])
            (folder / f"{stem}.done").touch()
        return poll

    refs_before = subprocess.run(["git", "for-each-ref"], cwd=kernel_repo, capture_output=True, text=True).stdout
    client = llm.Client(config.llm, repo.state / "cache" / "llm", sleep=driver("design"), manual_dir=folder,
                        progress=lambda line: None)
    first = evolve.evolve(repo, config, client=client)
    assert first.interrupted and first.rows == []
    assert subprocess.run(["git", "for-each-ref"], cwd=kernel_repo, capture_output=True,
                          text=True).stdout == refs_before  # no branch, no commit, nothing half made
    with repo.lock("test"):
        pass  # the lock was released

    client = llm.Client(config.llm, repo.state / "cache" / "llm", sleep=driver(None), manual_dir=folder,
                        progress=lambda line: None)
    second = evolve.evolve(repo, config, client=client)
    assert [r.status for r in second.rows] == ["ok"] and second.rows[0].model == "manual"
    # Earlier answers came from the cache, and the design request was the one left waiting:
    # one request per stage in all (select may be skipped when only the baseline exists).
    stages = [p.name.split("-", 1)[1] for p in sorted(folder.glob("*.request.md"))]
    assert stages[-2:] == ["design.request.md", "write.request.md"] and len(stages) == len(set(stages))


def test_manual_ctrl_c_stops_every_hypothesis_waiting(kernel_repo):
    """With evolve.jobs = 2 both writers wait in threads; Ctrl-C reaches the main thread, and the
    run's stop event ends both waits, so the run ends instead of hanging on them."""
    from kgit import evolve, workflow

    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 2, "attempts": 1, "jobs": 2,
                                                                     "knowledge": []}))
    repo, config = workflow.load(kernel_repo)
    config = evolve.with_overrides(config, model="manual")
    folder = repo.state / "manual"
    answers = {"select": fake_llm.selection(repo.rev("kgit/baseline")[:10]),
               "design": fake_llm.design(["Larger blocks", "Smaller blocks"], chosen=[0, 1])}
    sent, polls_after = [], []

    def poll(seconds):
        pending = [p for p in folder.glob("*.request.md") if not p.with_name(
            p.name.replace(".request.md", ".done")).exists()]
        for request in pending:
            stage = request.name.split("-", 1)[1].split(".")[0]
            if stage in answers:
                stem = request.name[: -len(".request.md")]
                (folder / f"{stem}.answer.md").write_text(answers[stage])
                (folder / f"{stem}.done").touch()
                return
        if len(pending) == 2 and not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does: the main thread gets KeyboardInterrupt
        elif sent:
            polls_after.append(1)
            if len(polls_after) > 2000:
                raise AssertionError("a writer kept waiting after Ctrl-C")
        time.sleep(0.005)

    run = evolve.Run(repo, config, progress=lambda line: None)
    run.client.manual._sleep = poll  # the driver answers between polls; the rest is the run's own client
    # Ctrl-C as a terminal delivers it: a shell's background job (a suite started with `&`)
    # inherits SIGINT ignored, and Python then keeps it ignored.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        summary = run.run()
    finally:
        signal.signal(signal.SIGINT, before)
    assert summary.interrupted and sent and summary.rows == []
    assert len(polls_after) <= 2000
    stages = [p.name.split("-", 1)[1] for p in sorted(folder.glob("*.request.md"))]
    assert stages[-3:] == ["design.request.md", "write.request.md", "write.request.md"]
