"""What a run reports about itself: costs without a price say so, the writer's notes reach the
commit whole, and an offline run still says it used no model.
"""

from __future__ import annotations

from types import SimpleNamespace

import fake_llm
import pytest
from conftest import fast_config_text, git

from kgit import costs, evolve, workflow
from kgit.archive import costlog
from kgit.review import campaign as review
from kgit.review import html, pr, spending
from kgit.review import text as report
from kgit.scientist import write

SLOW_BLOCK = "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096"
FAST_BLOCK = "BLOCK_SIZE = 2048  # kgit: tune 256 512 1024 2048 4096"



def test_writer_notes_keep_their_paragraphs_without_the_edit_blocks():
    answer = ("I load both vectors directly.\n\nkernel.py\n```python\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
              "```\n\nkernel.py\n<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE\n\n**kernel.py**\n```python\nx = 1\n"
              "```\n\nNotes: the mask stays, so no speedup on the tail.\n- first point\n- second point\n")
    assert write.notes(answer) == ("I load both vectors directly.\n\nNotes: the mask stays, so no speed-up on the "
                                   "tail.\n- first point\n- second point")
    # A line naming a file that is not followed by code is prose, and stays.
    assert write.notes("I kept kernel.py as it was.\n") == "I kept kernel.py as it was."
    long = write.notes("word " * 2000)
    assert long.endswith(f"[notes cut at {write.NOTES_CHARS} characters]") and len(long) < write.NOTES_CHARS + 40


def test_cost_text_never_shows_an_unpriced_call_as_free():
    assert costs.cost_text(0.0123) == "$0.0123"
    assert costs.cost_text(0.0, 0) == "$0.0000"  # priced and free (answers from the cache)
    assert costs.cost_text(0.0, 3) == "unpriced (3 calls without a price)"
    assert costs.cost_text(None, 1) == "unpriced (1 call without a price)"
    assert costs.cost_text(0.5, 2, 2, "attempt") == "$0.50 + 2 attempts unpriced"


def test_a_cent_scale_cost_keeps_two_significant_digits():
    assert [costs.usd(v, 2) for v in (0.0046, 0.00072, 0.000012, 12.3456, 0.5, 0.0)] == \
        ["$0.0046", "$0.00072", "$0.000012", "$12.35", "$0.50", "$0.00"]


def _attempt(run, cost, tokens=100):
    return SimpleNamespace(is_baseline=False, run=run, cost=cost, tokens=tokens,
                           trailers={"Kgit-Cost-USD": ["unknown" if cost is None else str(cost)]})


def test_every_call_is_counted_once():
    """The cost log counts the runs it holds; commits of other runs (older ones, or a clone without
    the notes) count by their own Kgit-Cost-USD; what the log holds beyond its commits was spent
    on no attempt."""
    records = [{"run": "A", "stage": "design", "cost_usd": 0.003, "tokens": 900},
               {"run": "A", "stage": "write", "cost_usd": 0.002, "tokens": 400},
               {"run": "A", "stage": "design", "cost_usd": 0.004, "tokens": 950},  # a skipped iteration
               {"run": "B", "stage": "write", "cost_usd": None, "tokens": None}]
    attempts = [SimpleNamespace(is_baseline=True, run=None, cost=None, tokens=None, trailers={}),
                _attempt("A", 0.005), _attempt(None, 0.010), _attempt("old", None)]
    spent = spending.of(records, attempts)
    assert spent.cost == pytest.approx(0.009 + 0.010)
    assert (spent.calls, spent.unpriced_calls, spent.unpriced_attempts) == (4, 1, 1)
    assert spent.off_attempts == pytest.approx(0.004)
    assert spent.short() == "$0.019 + 1 call and 1 attempt unpriced"
    assert "4 model calls; $0.0040 of it on no attempt" in spent.text()
    # Without a cost log: the commits, as before there was one.
    assert spending.of([], attempts).cost == pytest.approx(0.015)


def test_max_cost_refuses_a_call_that_could_pass_it_and_keeps_the_plans(kernel_repo):
    """Each call is checked before it is made at its bound; the plan a refused writer leaves is
    carried out by the next run with no new design, its commit carrying its part of the design."""
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 2, "attempts": 1, "knowledge": [],
                                                                     "max_cost_usd": 0.005}))
    repo, config = workflow.load(kernel_repo)
    unusable = fake_llm.search_replace("kernel.py", "NO SUCH LINE", "x = 1")
    fake = fake_llm.FakeLLM([("design", fake_llm.design(["Larger blocks", "Smaller blocks"], chosen=[0, 1])),
                             ("write", unusable)], cost=0.002, bound=0.003)
    summary = evolve.evolve(repo, config, client=fake)
    # design: 0 + 0.003 fits; writer 1: 0.002 + 0.003 fits; writer 2: 0.004 + 0.003 would not.
    assert not fake.answers and [r.status for r in summary.rows] == ["rejected"]
    assert "--max-cost $0.0050: the next write call" in summary.stop and summary.cost == pytest.approx(0.004)
    assert summary.kept == 1 and "kept for the next run: 1 plan(s)" in evolve.summary_text(summary)
    assert [r["stage"] for r in costlog.read(repo)] == ["design", "write"]

    config = evolve.with_overrides(config, max_cost=1.0)
    again = fake_llm.FakeLLM([("write", unusable)], cost=0.002, bound=0.003)
    second = evolve.evolve(repo, config, client=again)
    assert second.resumed == 1 and [r.status for r in second.rows] == ["rejected"]
    assert [stage for stage, _ in again.history] == ["write"]
    assert "Smaller blocks" in again.prompts("write")[0]
    later = next(a for a in repo.read() if a.sha == second.rows[0].sha)
    assert later.hypothesis == "Smaller blocks" and later.run == second.run != summary.run
    assert later.cost == pytest.approx(0.002 + 0.001) and later.tokens == 120 + 60  # its half of the design
    campaign = review.load(repo)
    assert campaign.totals["cost_usd"] == pytest.approx(3 * 0.002) and campaign.totals["model_calls"] == 3
    assert campaign.totals["cost_on_no_attempt_usd"] == 0.0


def test_a_call_without_a_known_bound_stops_only_once_the_budget_is_spent(kernel_repo):
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"iterations": 5, "knowledge": [],
                                                                     "max_cost_usd": 0.001}))
    repo, config = workflow.load(kernel_repo)
    fake = fake_llm.FakeLLM([("design", fake_llm.design(["Bigger blocks"]))], cost=0.002)
    summary = evolve.evolve(repo, config, client=fake)
    assert not fake.answers and summary.rows == [] and summary.cost == pytest.approx(0.002)
    assert "spent $0.0020 of --max-cost $0.0010" in summary.stop and summary.kept == 1


@pytest.mark.slow
def test_an_unpriced_run_says_unpriced_everywhere(kernel_repo):
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "attempts": 1, "knowledge": []}))
    repo, config = workflow.load(kernel_repo)
    notes = "Twice the elements per program.\n\nA speedup is likely on the large shapes."
    fake = fake_llm.FakeLLM([
        ("design", fake_llm.design(["Larger blocks per program"])),
        ("write", fake_llm.search_replace("kernel.py", SLOW_BLOCK, FAST_BLOCK, note=notes)),
    ], model="openai/local-model", cost=None)
    lines = []
    summary = evolve.evolve(repo, config, client=fake, progress=lines.append)
    assert [r.status for r in summary.rows] == ["ok"] and summary.unpriced_calls == 2
    assert all("$0" not in line for line in lines) and any("unpriced" in line for line in lines), lines
    text = evolve.summary_text(summary)
    assert "2 call(s) to openai/local-model, 240 tokens counted, unpriced (2 calls without a price)" in text
    assert "$0.0" not in text and "offline" not in text

    body = git(kernel_repo, "log", "-1", "--format=%B", "--branches=kgit/*")
    assert "Notes: Twice the elements per program.\n\nA speed-up is likely on the large shapes." in body
    assert "Kgit-Cost-USD: unknown" in body

    campaign = review.load(repo)
    # The run's two calls are in the cost log, unpriced; the commit carries the same.
    assert (campaign.totals["unpriced_calls"], campaign.totals["model_calls"]) == (2, 2)
    assert campaign.totals["unpriced_attempts"] == 0
    markdown = review.markdown(campaign, "vector_add")
    assert "LLM cost unpriced (2 calls without a price)" in markdown and "$0.00" not in markdown
    assert review.experiment_rows(campaign)[0][5] == "unpriced (1 attempt without a price)"
    attempt = next(a for a in campaign.attempts if a.experiment == 1)
    assert "cost unpriced" in report.attempt_text(attempt, "", {}, "")
    assert "unpriced (2 calls without a price)" in html._summary(campaign)
    body = pr.pr_body(campaign, campaign.experiments[1], {}, remote="origin", branch="kgit-review/1-x",
                      squashed="0" * 40, stack=[], base_branch="main")
    assert "LLM cost unpriced (1 attempt without a price)" in body and "$0.000" not in body


def test_an_offline_summary_still_says_offline():
    summary = evolve.Summary(models=["offline"], stop="ran 1 iteration(s)")
    assert "model use: none (offline)" in evolve.summary_text(summary)
    used = evolve.Summary(models=["manual"], calls=2, unpriced_calls=2, stop="ran 1 iteration(s)")
    assert "model use: 2 call(s) to manual, no tokens counted, unpriced (2 calls without a price)" in \
        evolve.summary_text(used)
