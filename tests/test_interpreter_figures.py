"""One rule for an archive timed only in Triton's interpreter, in every view (log, show, best,
lineage, diff, report, pr, the evolve summary): its timings are shown with their meaning and
never as a ratio, an "improved" label, a speedup colour, a best-so-far line or a PR title."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import review_archive as ra

from kgit import evolve
from kgit.archive.repo import Repo
from kgit.review import campaign as review
from kgit.review import html as report_html
from kgit.review import plots
from kgit.review import pr as pr_mod

RATIO = re.compile(r"\d\.\d\dx")


@pytest.fixture(scope="module")
def built(vector_add_template, tmp_path_factory):
    root = tmp_path_factory.mktemp("interpreter") / "repo"
    shutil.copytree(vector_add_template, root, symlinks=True)
    return root, ra.build_interpreter(root)


def _text_of(html: str) -> str:
    """The HTML without its embedded images (base64 may hold anything)."""
    return re.sub(r'src="data:image/png;base64,[^"]*"', "", html)


def test_the_fabricated_archive_stores_interpreter_ratios(built):
    """The premise: the trailers hold ratios (1.03x, 0.88x) that every view below must keep to itself."""
    root, shas = built
    attempts = {a.sha: a for a in Repo(root).read()}
    assert attempts[shas["e1"]].speedup == pytest.approx(1.03, abs=0.01)
    assert attempts[shas["e2"]].speedup_baseline == pytest.approx(0.88, abs=0.01)


def test_report_leads_with_correctness_and_lineage_and_says_what_a_gpu_adds(built):
    root, shas = built
    campaign = review.load(Repo(root))
    assert not campaign.timed and campaign.best.sha == shas["e2"]  # the latest correct, slower than the baseline
    html = _text_of(report_html.render(campaign, "vector_add"))
    order = [html.index(f'<section id="{name}"') for name in ("summary", "lineage", "hypotheses", "progress")]
    assert order == sorted(order)
    assert "best vs baseline" not in html and "best geomean" not in html and not RATIO.search(html)
    assert "2 of 3</b><span>attempts correct" in html and "Latest correct attempt" in html
    assert "What a GPU would add" in html and "kgit remeasure --all" in html
    assert "improved" not in html and "not-faster" not in html and "best so far" not in html
    assert plots.STATUS_COLOURS["improved"] not in html
    assert [e.status for e in campaign.experiments.values()] == ["correct", "correct", "compile-error"]


def test_markdown_and_json_reports_claim_no_speed(built):
    root, _ = built
    campaign = review.load(Repo(root))
    text = review.markdown(campaign, "vector_add")
    assert not RATIO.search(text) and "best:" not in text and "improved" not in text
    assert "latest correct attempt" in text and "## What a GPU would add" in text
    assert "interpreter us" in text  # the timings are there, named for what they are
    totals = review.to_json(campaign)
    assert totals["timed"] is False and totals["best_speedup"] is None


def test_show_best_lineage_and_diff_give_timings_without_ratios(built, run_kgit):
    root, shas = built
    for args in (["show", shas["e1"]], ["best"], ["lineage", shas["e2"]], ["diff", shas["e1"], shas["e2"]],
                 ["log"], ["log", "--wide"]):
        result = run_kgit(root, *args)
        assert result.exit_code == 0, result.output
        assert not RATIO.search(result.output), (args, result.output)
        assert "improved" not in result.output and "speedup " not in result.output
    shown = run_kgit(root, "show", shas["e1"]).output
    assert "from Triton's interpreter on the CPU" in shown and "base us" in shown
    diff = run_kgit(root, "diff", shas["e1"], shas["e2"]).output
    assert "the times are shown, not compared" in diff
    best = run_kgit(root, "best").output
    assert best.startswith(shas["e2"]) and "latest correct attempt" in best


def test_a_pull_request_of_an_interpreter_attempt_has_no_ratio_in_title_or_body(built, tmp_path):
    root, shas = built
    work = tmp_path / "repo"
    shutil.copytree(root, work, symlinks=True)
    remote = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "remote", "add", "origin", str(remote)], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "main"], cwd=work, check=True)
    proposal = pr_mod.propose(Repo(work), None, "1", gh="kgit-test-no-gh")
    assert proposal.title == "kgit #1: BLOCK_SIZE 1024 -> 2048"
    assert not RATIO.search(proposal.body) and "claims no speedup" in proposal.body
    assert "## Correctness on cpu" in proposal.body


def test_evolve_summary_names_the_latest_correct_attempt_not_a_best(built):
    root, shas = built
    attempts = Repo(root).read()
    after = next(a for a in attempts if a.sha == shas["e2"])
    row = evolve.Row(after.sha, after.branch, after.experiment, after.attempt, "ok", after.geomean_us, after.speedup,
                     "offline", None, None)
    summary = evolve.Summary(rows=[row], correctness_only=True, best_after=after, rule="the most recent correct attempt")
    text = evolve.summary_text(summary)
    assert f"latest correct attempt: {shas['e2'][:10]}" in text and "best:" not in text
    assert "geomean us" in text and "vs base" not in text and not RATIO.search(text)
    row_line = next(line for line in text.splitlines() if after.sha[:10] in line and "correct" not in line)
    assert float(row_line.split()[5]) == round(after.geomean_us, 1)  # the timing itself is shown
