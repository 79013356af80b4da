"""What a run reports about itself: costs without a price say so, the writer's notes reach the
commit whole, and an offline run still says it used no model.
"""

from __future__ import annotations

import subprocess

import fake_llm
from conftest import fast_config_text
from kgit import evolve, workflow as experiments
from kgit.review import campaign as review
from kgit.review import html, pr
from kgit.review import text as report
from kgit import costs
from kgit.scientist import write

SLOW_BLOCK = "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096"
FAST_BLOCK = "BLOCK_SIZE = 2048  # kgit: tune 256 512 1024 2048 4096"


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


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


def test_an_unpriced_run_says_unpriced_everywhere(kernel_repo):
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1, "attempts": 1, "knowledge": []}))
    repo, config = experiments.load(kernel_repo)
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
    assert campaign.totals["unpriced_attempts"] == 1
    markdown = review.markdown(campaign, "vector_add")
    assert "LLM cost unpriced (1 attempt without a price)" in markdown and "$0.00" not in markdown
    assert review.experiment_rows(campaign)[0][5] == "unpriced (1 attempt without a price)"
    attempt = next(a for a in campaign.attempts if a.experiment == 1)
    assert "cost unpriced" in report.attempt_text(attempt, "", {}, "")
    assert "unpriced (1 attempt without a price)" in html._summary(campaign)
    body = pr.pr_body(campaign, campaign.experiments[1], {}, remote="origin", branch="kgit-review/1-x",
                      squashed="0" * 40, stack=[], base_branch="main")
    assert "LLM cost unpriced (1 attempt without a price)" in body and "$0.000" not in body


def test_an_offline_summary_still_says_offline():
    summary = evolve.Summary(models=["offline"], stop="ran 1 iteration(s)")
    assert "model use: none (offline)" in evolve.summary_text(summary)
    used = evolve.Summary(models=["manual"], calls=2, unpriced_calls=2, stop="ran 1 iteration(s)")
    assert "model use: 2 call(s) to manual, no tokens counted, unpriced (2 calls without a price)" in \
        evolve.summary_text(used)
