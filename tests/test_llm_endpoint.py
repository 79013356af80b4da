"""`kgit evolve` against a real HTTP endpoint (tests/endpoint.py on 127.0.0.1), through the real
litellm client, as a user pointing kgit at a server would: unusable answers asked again rather
than replayed, a rate limit waited out and one too long kept for the next run, a priced run whose
every call is counted against the endpoint's own token counts, and a server that dies mid-run.

One endpoint serves the module; each test plays its own script. Writers here answer with edits
that change nothing, so no candidate is evaluated: the model path is what is tested.
"""

from __future__ import annotations

import json

import endpoint
import fake_llm
import pytest
from conftest import fast_config_text, git

from kgit.archive import costlog
from kgit.archive.repo import Repo
from kgit.scientist import pending

SECRET = "sk-test-endpoint-0123456789abcdef"
PROSE = "I would rather describe the plans in words."
# o3-mini's prices per token in litellm's bundled table (checked below against litellm itself).
O3_IN, O3_OUT = 1.1e-06, 4.4e-06


@pytest.fixture(scope="module")
def server():
    with endpoint.Endpoint() as found:
        yield found


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")


def configure(repo, **llm):
    (repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "attempts": 1, "knowledge": []},
                                                      llm={"retries": 1, "timeout_s": 10, **llm}))


def evolve(run_kgit, repo, url, *args, model="openai/test-model"):
    return run_kgit(repo, "evolve", "--model", model, "--api-base", url, *args)


def unchanged(repo) -> str:
    """A writer's answer whose edits apply and change nothing: rejected, never evaluated."""
    return fake_llm.whole_file("kernel.py", (repo / "kernel.py").read_text())



def test_unusable_answers_are_asked_again_not_replayed(kernel_repo, run_kgit, server, key):
    configure(kernel_repo)
    cache = kernel_repo / ".git" / "kgit" / "cache" / "llm"
    server.play([endpoint.answer(PROSE, stage="design"), endpoint.answer(PROSE, stage="design")])
    first = evolve(run_kgit, kernel_repo, server.url)
    assert first.exit_code == 0, first.output
    assert server.stages() == ["design", "design"] and "skipped iteration 1" in first.stdout
    assert not list(cache.glob("*.json"))

    # The same endpoint, healthy now: the design is asked again (a cut answer re-asked as cut).
    server.play([endpoint.cut(PROSE, stage="design"),
                 endpoint.answer(fake_llm.design(["Larger blocks per program"]), stage="design"),
                 endpoint.answer(unchanged(kernel_repo), stage="write")])
    second = evolve(run_kgit, kernel_repo, server.url)
    assert second.exit_code == 0, second.output
    assert server.stages() == ["design", "design", "write"]
    reask = server.log[1]["body"]["messages"][-1]["content"]
    assert "cut off at the output limit" in reask
    rows = [a for a in Repo(kernel_repo).read() if a.experiment == 1]
    assert [(a.status, a.reason) for a in rows] == [("rejected", "no change")]
    assert len(list(cache.glob("*.json"))) == 1  # the design that was used; not the cut one, not the writer's
    assert "6 call(s)" not in second.stdout and "3 call(s) to openai/test-model" in second.stdout


def test_a_rate_limit_is_waited_out_and_one_too_long_keeps_the_plan(kernel_repo, run_kgit, server, key):
    configure(kernel_repo, max_wait_s=30)
    server.play([endpoint.status(429, after=1, stage="design"),
                 endpoint.answer(fake_llm.design(["Larger blocks per program"]), stage="design"),
                 endpoint.status(429, after=3600, stage="write")])
    first = evolve(run_kgit, kernel_repo, server.url)
    assert first.exit_code == 0, first.output
    assert server.stages() == ["design", "design", "write"]
    assert server.log[1]["time"] - server.log[0]["time"] >= 1.0  # Retry-After: 1, honoured
    waiting = [line for line in first.stderr.splitlines() if "waiting" in line]
    assert len(waiting) == 1 and "asks to wait 1.0 s (Retry-After): waiting, 1 s left" in waiting[0]
    assert "RateLimitError (HTTP 429)" in waiting[0] and "litellm.RateLimitError" not in first.output
    # The writer's 3600 s is past llm.max_wait_s: no commit, the plan kept, the run stopped cleanly.
    assert [a.experiment for a in Repo(kernel_repo).read()] == [0]
    assert "asks to wait 3600 s (Retry-After), more than llm.max_wait_s (30 s)" in first.stdout
    assert "kept for the next run: 1 plan(s)" in first.stdout

    server.play([endpoint.answer(unchanged(kernel_repo), stage="write")])
    second = evolve(run_kgit, kernel_repo, server.url)
    assert second.exit_code == 0, second.output
    assert server.stages() == ["write"] and "took up 1 plan(s)" in second.stdout
    assert [a.hypothesis for a in Repo(kernel_repo).read() if a.experiment == 1] == ["Larger blocks per program"]


def test_a_priced_run_counts_every_dollar_against_the_endpoint(kernel_repo, run_kgit, server, key):
    """openai/o3-mini: no temperature sent, the answer limit sent as max_completion_tokens;
    --max-cost checked before each call (the design fits, design + writer could not); the design's
    cost recorded with no commit, shown by log, report and --json; the plan carried out by the
    next run; every figure equal to the endpoint's own token counts at litellm's prices."""
    import litellm

    info = litellm.get_model_info("openai/o3-mini")
    assert (info["input_cost_per_token"], info["output_cost_per_token"]) == (O3_IN, O3_OUT)
    configure(kernel_repo, max_tokens=4000)
    design_usage = {"prompt_tokens": 2000, "completion_tokens": 3000, "total_tokens": 5000}
    server.play([endpoint.answer(fake_llm.design(["Larger blocks per program"]), stage="design",
                                 usage=design_usage)])
    first = evolve(run_kgit, kernel_repo, server.url, "--max-cost", "0.03", model="openai/o3-mini")
    assert first.exit_code == 0, first.output
    assert server.stages() == ["design"]
    body = server.log[0]["body"]
    assert "temperature" not in body and body["max_completion_tokens"] == 4000
    assert "openai/o3-mini takes no temperature" in first.stderr
    design_cost = 2000 * O3_IN + 3000 * O3_OUT
    assert "Stopped: --max-cost $0.0300: the next write call to openai/o3-mini may cost up to" in first.stdout
    assert "kept for the next run: 1 plan(s)" in first.stdout
    [record] = costlog.read(Repo(kernel_repo))
    assert record["stage"] == "design" and record["cost_usd"] == pytest.approx(design_cost)
    markdown = run_kgit(kernel_repo, "report", "--markdown").stdout
    assert "LLM cost $0.015 (1 model call; $0.015 of it on no attempt" in markdown
    last = run_kgit(kernel_repo, "log").stdout.rstrip().splitlines()[-1]
    assert last.startswith("LLM cost: $0.0154 (1 model call; $0.0154 of it on no attempt")

    writer_usage = {"prompt_tokens": 1500, "completion_tokens": 500, "total_tokens": 2000}
    server.play([endpoint.answer(unchanged(kernel_repo), stage="write", usage=writer_usage)])
    second = evolve(run_kgit, kernel_repo, server.url, model="openai/o3-mini")
    assert second.exit_code == 0, second.output
    assert server.stages() == ["write"] and "took up 1 plan(s)" in second.stdout
    total = design_cost + 1500 * O3_IN + 500 * O3_OUT
    assert server.billed(O3_IN, O3_OUT) == pytest.approx(total - design_cost)  # this run's call
    totals = json.loads(run_kgit(kernel_repo, "report", "--json").stdout)
    assert totals["cost_usd"] == pytest.approx(total) and totals["model_calls"] == 2
    assert totals["cost_on_no_attempt_usd"] == 0.0  # the design's cost is now on the plan's commit
    [attempt] = [a for a in Repo(kernel_repo).read() if a.experiment == 1]
    trailer = git(kernel_repo, "show", "-s", "--format=%(trailers:key=Kgit-Cost-USD,valueonly)",
                  attempt.sha).strip()
    assert trailer == f"{total:.6f}"
    assert f"cost ${total:.6f}" in run_kgit(kernel_repo, "show", attempt.sha).stdout


def test_a_server_that_dies_mid_run_still_gets_its_summary(kernel_repo, run_kgit, key):
    configure(kernel_repo)
    with endpoint.Endpoint([endpoint.answer(fake_llm.design(["Larger blocks per program"]), stage="design"),
                            endpoint.die()]) as dying:
        result = evolve(run_kgit, kernel_repo, dying.url)
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("kgit: ")]
    assert len(errors) == 1 and "nothing accepts connections" in errors[0]
    assert "Stopped: stopped by an error (below)" in result.stdout
    assert "kept for the next run: 1 plan(s)" in result.stdout
    assert "(HTTP 500)" not in result.output  # a refused connection had no status
    batches, _ = pending.take(Repo(kernel_repo).state)
    assert [h.plan.title for b in batches for h in b.open] == ["Larger blocks per program"]
