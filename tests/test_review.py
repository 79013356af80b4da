"""kgit lineage, kgit diff, and the campaign model behind the report and the PR body."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import review_archive as ra

from kgit import config as config_mod
from kgit import problems as problem_mod
from kgit import workflow
from kgit.archive.repo import Repo
from kgit.errors import ConfigError
from kgit.review import campaign as review
from kgit.review import html as report_html
from kgit.review import plots
from kgit_harness.result import geomean


@pytest.fixture(scope="module")
def built(vector_add_template, tmp_path_factory):
    """One fabricated campaign shared by this module's read-only tests."""
    root = tmp_path_factory.mktemp("review") / "repo"
    shas = ra.copy_built(vector_add_template, root)
    return root, shas


def test_experiments_carry_parent_status_and_outcome(built):
    root, shas = built
    campaign = review.load(Repo(root))
    e = campaign.experiments
    assert sorted(e) == [1, 2, 3, 4]
    assert {n: x.parent for n, x in e.items()} == {1: 0, 2: 1, 3: 0, 4: 1}
    assert {n: x.status for n, x in e.items()} == {1: "improved", 2: "improved", 3: "timeout", 4: "not-faster"}
    assert e[1].best.sha == shas["e1.2"] and e[3].best is None
    assert e[3].outcome == "failed (timeout)"
    assert campaign.best.sha == shas["e2.2"]
    assert [a.sha for a in campaign.best_path] == [shas["baseline"], shas["e1.2"], shas["e2.2"]]
    # The baseline was measured on the CPU by kgit init; its H200 figures come from the note.
    assert campaign.baseline_times == ra.BASELINE_US
    assert [round(s, 3) for *_, s in campaign.shape_speedups()] == [1.6, 1.6]


def test_totals_count_attempts_cost_and_evaluation_time(built):
    root, _ = built
    campaign = review.load(Repo(root))
    t = campaign.totals
    assert (t["experiments"], t["attempts"], t["correct"]) == (4, 6, 3)
    assert t["success_rate"] == pytest.approx(0.5)
    assert t["cost_usd"] == pytest.approx(0.10)
    # Six fabricated attempts at 10 s each, plus whatever the real baseline evaluation took.
    assert t["gpu_s"] == pytest.approx(60 + campaign.baseline.eval_s, abs=0.01)
    assert t["best_speedup"] == pytest.approx(1.6)


def test_lineage_command_lists_the_chain_one_line_each(built, run_kgit):
    root, shas = built
    result = run_kgit(root, "lineage", shas["e2"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 6  # header, its rule, baseline, #1, #2, what an interpreter timing is
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert [line.split()[2] for line in lines[2:5]] == [shas[k][:10] for k in ("baseline", "e1.2", "e2.2")]
    # The baseline's commit was timed in the interpreter: its timing is named so and gets no ratio.
    assert "cpu (interpreter)" in lines[2] and "1.00x" not in lines[2]
    assert lines[5].startswith("(interpreter: ") and "1.60x" in lines[4]
    dead_end = run_kgit(root, "lineage", "--json", shas["e3"])
    assert [a["sha"] for a in json.loads(dead_end.output)] == [shas["baseline"], shas["e3.1"]]


def test_experiment_numbers_name_the_best_correct_or_the_last_attempt(built, run_kgit):
    root, shas = built
    repo = Repo(root)
    # #1: attempt 1 incorrect, attempt 2 ok -> attempt 2; #3 has only a timeout -> that one.
    assert workflow.resolve(repo, "1") == shas["e1.2"] and workflow.resolve(repo, "#2") == shas["e2.2"]
    assert workflow.resolve(repo, "3") == shas["e3.1"] and workflow.resolve(repo, "0") == shas["baseline"]
    assert workflow.resolve(repo, shas["e1.1"][:12]) == shas["e1.1"]  # shas and branches still work
    shown = json.loads(run_kgit(root, "show", "2", "--json").output)
    assert shown["sha"] == shas["e2.2"]
    lineage = json.loads(run_kgit(root, "lineage", "2", "--json").output)
    assert [a["sha"] for a in lineage] == [shas["baseline"], shas["e1.2"], shas["e2.2"]]
    compared = json.loads(run_kgit(root, "diff", "1", "2", "--json").output)
    assert (compared["a"]["sha"], compared["b"]["sha"]) == (shas["e1.2"], shas["e2.2"])
    from kgit import remeasure

    assert remeasure.targets(repo, repo.read(), ["1", "kgit/baseline"], False) == [shas["e1.2"], shas["baseline"]]
    missing = run_kgit(root, "show", "9")
    assert missing.exit_code == 1 and "there is no experiment 9" in missing.stderr


def test_every_json_option_has_help_text():
    from kgit.cli import cli

    for name, command in cli.commands.items():
        for param in command.params:
            if "--json" in getattr(param, "opts", []):
                assert param.help, f"kgit {name} --json has no help text"


def test_lineage_of_something_that_is_not_an_attempt_says_what_to_do(built, run_kgit, tmp_path):
    root, _ = built
    result = run_kgit(root, "lineage", "no-such-rev")
    assert result.exit_code == 1
    assert "kgit log" in result.stderr


def test_diff_compares_shapes_and_shows_the_code(built, run_kgit):
    root, shas = built
    result = run_kgit(root, "diff", shas["e1.2"], shas["e2.2"])
    assert result.exit_code == 0, result.output
    assert "1.28x" in result.output
    assert "+# e2 attempt 2: vectorize loads" in result.output
    assert "-# e1 attempt 2: use BLOCK_SIZE 2048" in result.output
    doc = json.loads(run_kgit(root, "diff", "--json", shas["e1.2"], shas["e2.2"]).output)
    assert [(r["shape"], r["a_us"], r["b_us"]) for r in doc["rows"]] == [
        ("size=4096", 32.0, 25.0), ("size=65536", 128.0, 100.0)]
    assert doc["speedup"] == pytest.approx(1.28)
    assert doc["not_comparable"] is None


def test_diff_uses_notes_on_either_side(built):
    # The baseline's own commit was measured on the CPU; its H200 note makes it comparable,
    # whether it is A or B.
    root, shas = built
    doc = review.compare(Repo(root), shas["e2.2"], shas["baseline"])
    assert doc["not_comparable"] is None and doc["device"] == ra.DEVICE
    assert doc["speedup"] == pytest.approx(1 / 1.6)
    reverse = review.compare(Repo(root), shas["baseline"], shas["e2.2"])
    assert reverse["device"] == ra.DEVICE and reverse["speedup"] == pytest.approx(1.6)
    assert [r["a_us"] for r in reverse["rows"]] == [40.0, 160.0]


def test_diff_with_a_failed_attempt_explains_why_there_are_no_timings(built, run_kgit):
    root, shas = built
    result = run_kgit(root, "diff", shas["e1.2"], shas["e3.1"])
    assert result.exit_code == 0
    assert "no timing comparison" in result.output and "timeout" in result.output
    first_failed = run_kgit(root, "diff", shas["e1.1"], shas["e1.2"])
    assert "its status is incorrect" in first_failed.output


def test_diff_across_devices_says_how_to_compare(built, tmp_path, run_kgit):
    root, shas = built
    copy = tmp_path / "repo"
    shutil.copytree(root, copy, symlinks=True)
    repo = Repo(copy)
    mi300 = dict(ra.result(ra.scaled(2.0)), device="AMD Instinct MI300X", harness="other harness")
    # The base's MI300X figure as a note, so committing needs no re-measurement.
    repo.add_note(shas["e1.2"], {"device": mi300["device"], "harness": mi300["harness"], "status": "ok",
                                 "geomean_us": 50.0, "times": ra.scaled(1.6), "when": 2})
    branch, _ = workflow.start(repo, "try it on the MI300X", shas["e1.2"], checkout=False)
    tree = ra.tree_with(repo, shas["e1.2"], "# mi300 variant\n")
    other = workflow.commit_attempt(repo, config_mod.load(copy), branch=branch, tree=tree, parent=shas["e1.2"],
                              result=mi300, author=None, model="human").sha
    result = run_kgit(copy, "diff", shas["e2.2"], other)
    assert result.exit_code == 0
    assert "never measured on one device" in result.output and f"kgit remeasure {other[:10]}" in result.output
    assert "+# mi300 variant" in result.output


def test_tree_layout_keeps_the_best_path_straight_and_survives_long_chains():
    def campaign(parents):
        return SimpleNamespace(experiments={n: SimpleNamespace(parent=p) for n, p in parents.items()})

    pos = plots._tree_layout(campaign({1: 0, 2: 1, 3: 0, 4: 1}), on_path={1, 4})
    assert len(set(pos.values())) == 5
    assert [pos[n][0] for n in (0, 1, 2, 3, 4)] == [0, 1, 2, 1, 2]
    # The best path (baseline, #1, #4) is the top row; the other branches hang below.
    assert pos[0][1] == pos[1][1] == pos[4][1] == 0
    assert pos[2][1] == 1 and pos[3][1] == 2
    # A lineage far deeper than Python's recursion limit.
    chain = plots._tree_layout(campaign({n: n - 1 for n in range(1, 5001)}))
    assert chain[5000] == (5000, 0.0)


def _labels_overlapping(campaign) -> list[tuple[str, str]]:
    import itertools

    import matplotlib.pyplot as plt

    fig = plots.lineage_figure(campaign)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts]
        boxes += [(t.get_text(), t.get_window_extent(renderer)) for t in ax.get_legend().get_texts()]
        return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]
    finally:
        plt.close(fig)


@pytest.mark.parametrize("parents, path", [
    # Ten experiments as the offline strategist makes them: a best path and side chains.
    ({1: 0, 2: 0, 3: 1, 4: 2, 5: 3, 6: 2, 7: 5, 8: 6, 9: 6, 10: 7}, [1, 3, 5, 7, 10]),
    ({n: n - 1 for n in range(1, 31)}, list(range(1, 31))),  # one long chain
    (dict.fromkeys(range(1, 11), 0), [4]),  # ten tries from the baseline
])
def test_lineage_tree_labels_never_overlap(parents, path):
    def hypothesis(n):
        return f"num_warps 4 -> 8, BLOCK_SIZE 1024 -> {n * 64}"

    experiments = {n: SimpleNamespace(parent=p, status="improved" if n in path else "not-faster",
                                      best=SimpleNamespace(speedup_baseline=1 + n / 100), hypothesis=hypothesis(n))
                   for n, p in parents.items()}
    best_path = [SimpleNamespace(experiment=0, is_baseline=True)]
    best_path += [SimpleNamespace(experiment=n, is_baseline=False) for n in path]
    campaign = SimpleNamespace(experiments=experiments, best_path=best_path, timed=True,
                               speedup_of=lambda attempt: attempt.speedup_baseline)
    assert _labels_overlapping(campaign) == []
    # Every experiment is still named in the figure.
    fig = plots.lineage_figure(campaign)
    assert {t.get_text().split()[0] for t in fig.axes[0].texts} == {"baseline"} | {f"#{n}" for n in parents}


def test_task_references_and_speed_of_light():
    task = problem_mod.load_task(problem_mod.shipped()["vector_add"])
    task.references = {"H200": {"vendor library": 30.0}, "MI300X": {"rocBLAS": 20.0}}
    keys = [problem_mod.shape_key(s) for s in task.benchmarks]
    attempt = SimpleNamespace(device="NVIDIA H200", timing="events", times=dict.fromkeys(keys, 100.0))
    refs = review.references(task, attempt)
    sol = geomean(12 * s["size"] / 4.8e12 * 1e6 for s in task.benchmarks)
    assert refs == {"vendor library": 30.0, "speed of light": pytest.approx(sol)}
    # The interpreter says nothing about a GPU, and an unknown device has no datasheet.
    assert review.references(task, SimpleNamespace(device="cpu", timing="interpreter", times={})) == {}


def test_task_yml_references_must_be_device_label_microseconds(tmp_path):
    source = problem_mod.shipped()["vector_add"]
    text = (source / "task.yml").read_text()
    (tmp_path / "task.yml").write_text(text + "references: {NVIDIA H200: {cuBLAS: 44.0}}\n")
    assert problem_mod.load_task(tmp_path).references == {"NVIDIA H200": {"cuBLAS": 44.0}}
    (tmp_path / "task.yml").write_text(text + "references: {cuBLAS: 44.0}\n")
    with pytest.raises(ConfigError, match="references maps a device name"):
        problem_mod.load_task(tmp_path)


def test_views_without_a_baseline_measurement_on_the_device(built):
    # An archive whose baseline was never measured where the best attempt was.
    root, _ = built
    campaign = review.load(Repo(root))
    campaign.baseline_geomean, campaign.baseline_times = None, {}
    assert plots.progress(campaign).startswith(b"\x89PNG")
    assert plots.shape_speedups(campaign) is None
    html = report_html.render(campaign, "no baseline")
    assert "kgit remeasure kgit/baseline" in html
    assert "kgit remeasure kgit/baseline" in review.markdown(campaign, "no baseline")
