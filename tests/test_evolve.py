"""`kgit evolve` end to end on the vector_add kernel repository (CPU interpreter, fast timing).

Each test keeps its evaluations to a handful: they are the slow part.
"""

from __future__ import annotations

import json

import fake_llm
import pytest
from conftest import fast_config_text, git

from kgit import evolve, workflow
from kgit.archive.repo import Repo
from kgit.errors import ConfigError, LockedError
from kgit.scientist import offline, prompts
from kgit.scientist import select as select_mod

SLOW_BLOCK = "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096"
FAST_BLOCK = "BLOCK_SIZE = 4096  # kgit: tune 256 512 1024 2048 4096"



def configure(repo_path, **evolve_keys):
    """Write a .kgit.yaml with fast timing and these evolve settings (knowledge off unless given)."""
    keys = {"knowledge": [], **evolve_keys}
    (repo_path / ".kgit.yaml").write_text(fast_config_text(evolve=keys), encoding="utf-8")
    return workflow.load(repo_path)


def trailers(cwd, sha) -> dict:
    out = git(cwd, "show", "-s", "--format=%(trailers:only,unfold)", sha)
    found = {}
    for line in out.splitlines():
        key, _, value = line.partition(": ")
        found.setdefault(key, []).append(value)
    return found


def branch_commits(cwd, branch) -> list[str]:
    """The branch's attempt commits, oldest first."""
    return git(cwd, "rev-list", "--reverse", branch, "--not", "kgit/baseline").split()


@pytest.mark.slow
def test_scripted_model_drives_every_failure_then_success(kernel_repo):
    repo, config = configure(kernel_repo, pick=1, attempts=4)
    status_before = git(kernel_repo, "status", "--porcelain")
    baseline = repo.rev("kgit/baseline")
    kernel = (kernel_repo / "kernel.py").read_text()
    broken = kernel.replace("def custom_kernel(data):", "def custom_kernel(data)")
    wrong = kernel.replace("a + b, mask=mask", "a - b, mask=mask")
    fake = fake_llm.FakeLLM([
        # No select call: with only the baseline in the archive the choice is forced.
        ("design", fake_llm.design(["Use a larger block per program"])),
        ("write", fake_llm.search_replace("kernel.py", "BLOCK_SIZE = 999", "BLOCK_SIZE = 4096")),  # no match
        ("write", fake_llm.whole_file("kernel.py", broken, "Rewrote the kernel.")),   # does not compile
        ("write", fake_llm.whole_file("kernel.py", wrong, "Fixed the syntax.")),      # wrong result
        ("write", fake_llm.whole_file("kernel.py", kernel.replace(SLOW_BLOCK, FAST_BLOCK), "Correct now.")),
    ])
    lines = []
    summary = evolve.evolve(repo, config, client=fake, progress=lines.append)

    assert not fake.answers, "the loop stopped before using the whole script"
    assert [r.status for r in summary.rows] == ["rejected", "compile-error", "incorrect", "ok"]
    branches = git(kernel_repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/kgit/").split()
    assert branches == ["kgit/1-larger-block-per-program"]
    shas = branch_commits(kernel_repo, branches[0])
    assert shas == [r.sha for r in summary.rows]

    assert fake.prompts("select") == []
    assert any("forced: only the baseline exists, no model call" in line for line in lines)
    first = trailers(kernel_repo, shas[0])
    assert first["Kgit-Base"] == [baseline]
    assert "Kgit-Reference" not in first

    # Rejected: an empty commit (same tree as its parent) carrying the error for the model.
    assert git(kernel_repo, "rev-parse", f"{shas[0]}^{{tree}}") == git(kernel_repo, "rev-parse", f"{baseline}^{{tree}}")
    assert "matched nothing" in git(kernel_repo, "show", "-s", "--format=%B", shas[0])
    # Each fix prompt carried the previous failure.
    fixes = fake.prompts("write")[1:]
    assert "matched nothing" in fixes[0]
    assert "did not compile" in fixes[1]
    assert "wrong results" in fixes[2]
    # Attempts form a line: each one's parent is the one before.
    for parent, child in zip(shas, shas[1:]):
        assert git(kernel_repo, "rev-parse", f"{child}^") .strip() == parent

    for sha, status in zip(shas, ["rejected", "compile-error", "incorrect", "ok"]):
        t = trailers(kernel_repo, sha)
        assert t["Kgit-Status"] == [status]
        assert t["Kgit-Model"] == ["fake/scripted"]
        assert t["Kgit-Expected-Gain"] == ["5%..30%"]
        assert int(t["Kgit-Tokens"][0]) >= 120
        assert float(t["Kgit-Cost-USD"][0]) > 0
        message = git(kernel_repo, "show", "-s", "--format=%B", sha)
        # Interpreter timings are no speed figures: not even the correct attempt claims a speedup.
        assert "speedup" not in message
        assert git(kernel_repo, "show", "-s", "--format=%an", sha).strip() == "kgit (fake/scripted)"
    assert git(kernel_repo, "show", "-s", "--format=%s", shas[-1]).strip().endswith(": correct (not timed on a GPU)")
    # The first attempt also carries its share of the design call: 1 call + its own.
    assert int(trailers(kernel_repo, shas[0])["Kgit-Tokens"][0]) == 2 * 120
    assert float(trailers(kernel_repo, shas[-1])["Kgit-Speedup"][0]) > 0
    assert "4096" in git(kernel_repo, "show", f"{shas[-1]}:kernel.py")

    # The user's tree, index and branch are untouched; nothing is left behind.
    assert git(kernel_repo, "status", "--porcelain") == status_before
    assert git(kernel_repo, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert not list((repo.state / "worktrees").glob("*")) if (repo.state / "worktrees").exists() else True
    assert summary.cost == pytest.approx(5 * 0.002)
    assert any("select" in line and "fake/scripted" in line for line in lines)
    assert any("checks correctness only" in line for line in lines)
    assert "ok" in evolve.summary_text(summary)


@pytest.mark.slow
def test_same_tree_is_not_measured_again(kernel_repo):
    repo, config = configure(kernel_repo, pick=1, attempts=1, iterations=2)
    kernel = (kernel_repo / "kernel.py").read_text()
    faster = kernel.replace(SLOW_BLOCK, FAST_BLOCK)
    baseline = repo.rev("kgit/baseline")
    fake = fake_llm.FakeLLM([
        ("design", fake_llm.design(["Bigger blocks"])),
        ("write", fake_llm.whole_file("kernel.py", faster)),
        ("select", fake_llm.selection(baseline[:8])),
        ("design", fake_llm.design(["Bigger blocks again, from the baseline"])),
        ("write", fake_llm.search_replace("kernel.py", SLOW_BLOCK, FAST_BLOCK)),
    ])
    evaluated = []

    def counting(sha):
        evaluated.append(sha)
        return workflow.evaluate_rev(repo, config, sha)

    summary = evolve.evolve(repo, config, client=fake, evaluate=counting)
    assert len(evaluated) == 1
    first, second = summary.rows
    assert (first.status, second.status) == ("ok", "ok")
    assert second.reused == "same tree"
    body = git(kernel_repo, "show", "-s", "--format=%B", second.sha)
    assert f"equals attempt {first.sha[:10]}" in body
    assert trailers(kernel_repo, second.sha)["Kgit-Geomean-us"] == trailers(kernel_repo, first.sha)["Kgit-Geomean-us"]


def test_the_run_prestarts_its_evaluators_spares_before_the_first_model_call(kernel_repo):
    repo, config = configure(kernel_repo, pick=1, attempts=1, iterations=1)
    kernel = (kernel_repo / "kernel.py").read_text()
    fake = fake_llm.FakeLLM([
        ("design", fake_llm.design(["Bigger blocks"])),
        ("write", fake_llm.whole_file("kernel.py", kernel.replace(SLOW_BLOCK, FAST_BLOCK))),
    ])
    events = []

    class Evaluator:
        def prestart(self, jobs):
            events.append(("prestart", jobs, len(fake.answers)))

        def __call__(self, sha):
            events.append(("evaluate", sha))
            return workflow.evaluate_rev(repo, config, sha)

    summary = evolve.evolve(repo, config, client=fake, evaluate=Evaluator())
    assert [row.status for row in summary.rows] == ["ok"]
    # Once, with the run's jobs, while both answers were still unasked for; then the evaluation.
    assert events[0] == ("prestart", config.evolve.jobs, 2) and [e[0] for e in events] == ["prestart", "evaluate"]


@pytest.mark.slow
def test_offline_runs_concurrently_then_resumes_without_repeating(kernel_repo, run_kgit):
    configure(kernel_repo, pick=2, jobs=2)
    result = run_kgit(kernel_repo, "evolve", "-n", "1", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [r["status"] for r in doc["attempts"]] == ["ok", "ok"] and "1 iteration" in doc["stop"]
    assert "[1/1] design offline" in result.stderr
    repo, config = configure(kernel_repo, pick=1)
    evolve.evolve(repo, config)

    attempts = [a for a in repo.read() if not a.is_baseline]
    assert sorted(a.experiment for a in attempts) == [1, 2, 3]
    assert all(a.model == "offline" and a.status == "ok" for a in attempts)
    assert all("Kgit-Cost-USD" not in a.trailers for a in attempts)
    strategist = offline.Strategist(repo, ["kernel.py"])
    configs = strategist.configurations([a.sha for a in repo.read()])
    assert len(set(configs.values())) == 4, "a configuration was measured twice"
    branches = git(kernel_repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/kgit/").split()
    assert len(branches) == 3
    # One attempt each, built on its base; the third builds on the best of the first run.
    assert all(a.parents == [a.base] for a in attempts)
    third = next(a for a in attempts if a.experiment == 3)
    assert third.base == workflow.best([a for a in repo.read() if a.experiment < 3]).sha


def test_exhausted_space_ends_the_run_with_exit_0(kernel_repo, run_kgit, monkeypatch):
    configure(kernel_repo, iterations=3)
    monkeypatch.setattr(offline.Strategist, "plans", lambda self, attempts, best, pick: [])
    result = run_kgit(kernel_repo, "evolve")
    assert result.exit_code == 0
    assert "measured every configuration" in result.output
    assert git(kernel_repo, "for-each-ref", "refs/heads/kgit/") == ""


def test_interrupt_keeps_commits_and_leaves_no_lock_or_worktree(kernel_repo):
    repo, config = configure(kernel_repo, pick=2)
    calls = []

    def evaluate_then_interrupt(sha):
        calls.append(sha)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return workflow.evaluate_rev(repo, config, sha)

    summary = evolve.evolve(repo, config, evaluate=evaluate_then_interrupt)
    assert summary.interrupted and "interrupted" in summary.stop
    assert [r.status for r in summary.rows] == ["ok"]
    assert len(git(kernel_repo, "for-each-ref", "refs/heads/kgit/").splitlines()) == 1
    assert git(kernel_repo, "worktree", "list").count("\n") == 1
    with repo.lock("test"):  # released
        pass


def test_second_run_refuses_while_the_first_holds_the_lock(kernel_repo):
    repo, config = configure(kernel_repo)
    with repo.lock("evolve"):
        with pytest.raises(LockedError, match="pid"):
            evolve.evolve(Repo(kernel_repo), config, client=fake_llm.FakeLLM([]))


def test_dry_run_renders_prompts_without_a_model_call(kernel_repo, run_kgit):
    repo, config = configure(kernel_repo)
    config = evolve.with_overrides(config, model="openai/some-model")
    text = evolve.dry_run(repo, config, client=fake_llm.FakeLLM([], model="openai/some-model"))
    baseline = repo.rev("kgit/baseline")
    assert "# select (no model call)" in text and baseline[:10] in text  # forced: only the baseline
    assert "# design prompt" in text and "BLOCK_SIZE = 1024" in text
    assert "<the plan the designer picks>" in text
    result = run_kgit(kernel_repo, "evolve", "--dry-run")
    assert result.exit_code == 0 and "BLOCK_SIZE 1024 ->" in result.output
    assert git(kernel_repo, "for-each-ref", "refs/heads/kgit/") == ""


def test_design_that_stays_invalid_skips_the_iteration(kernel_repo):
    repo, config = configure(kernel_repo, iterations=1)
    fake = fake_llm.FakeLLM([
        ("design", '```json\n{"plans": []}\n```'),
        ("design", '```json\n{"plans": [{"title": "x", "description": "y", "gain_min": 10, "gain_max": 40}]}\n```'),
    ])
    summary = evolve.evolve(repo, config, client=fake)
    assert summary.rows == [] and len(summary.skipped) == 1
    assert "percentages" in summary.skipped[0]
    assert "non-empty list" in fake.prompts("design")[1]


def test_only_answers_that_were_used_are_kept(kernel_repo):
    """A design without a usable block, edits that do not apply or change nothing, and a writer's
    answer cut at the output limit are discarded (never replayed); the design that was used is
    kept. A cut answer is re-asked (design) or rejected as cut (write), never applied."""
    repo, config = configure(kernel_repo, pick=1, attempts=3)
    kernel = (kernel_repo / "kernel.py").read_text()
    cut_design = ("Here is my long reasoning about the plans, which goes on and on", {"truncated": True})
    fake = fake_llm.FakeLLM([
        ("design", *cut_design),
        ("design", fake_llm.design(["Use a larger block per program"])),
        ("write", fake_llm.search_replace("kernel.py", "BLOCK_SIZE = 999", "BLOCK_SIZE = 4096")),  # no match
        ("write", fake_llm.whole_file("kernel.py", kernel)),  # changes nothing
        ("write", fake_llm.whole_file("kernel.py", kernel.replace(SLOW_BLOCK, FAST_BLOCK)), {"truncated": True}),
    ])
    summary = evolve.evolve(repo, config, client=fake, evaluate=lambda sha: pytest.fail("nothing to evaluate"))
    assert not fake.answers
    assert [r.text for r in fake.kept] == [fake_llm.design(["Use a larger block per program"])]
    assert len(fake.discarded) == 4 and fake.discarded[0].text == cut_design[0]
    assert "cut off at the output limit" in fake.prompts("design")[1]
    assert [(r.status, trailers(kernel_repo, r.sha)["Kgit-Reason"][0]) for r in summary.rows] == [
        ("rejected", "edits did not apply"), ("rejected", "no change"), ("rejected", "answer cut at the output limit")]
    assert "cut off at the output limit" in git(kernel_repo, "show", "-s", "--format=%B", summary.rows[-1].sha)


def test_pending_plans_survive_the_file_round_trip(tmp_path):
    from kgit.scientist import pending
    from kgit.scientist.answers import Plan, Selection

    offline = Plan("BLOCK_SIZE 1024 -> 2048", "twice the elements", assignment={("kernel.py", "BLOCK_SIZE"): 2048},
                   base="b" * 40)
    other = Plan("Vectorize", "wider loads", "load 4 at once", 0.05, 0.3, 7.0)
    batch = pending.Batch(Selection("a" * 40, None, "the best"), [offline, other],
                          [pending.Open(other, "a" * 40, "c" * 40, "kgit/3-vectorize", 2, "It did not compile.",
                                        0.001, 60)])
    assert pending.save(tmp_path, [batch, pending.Batch(Selection("d" * 40, None, "x"), [offline])]) == 1
    (back,), note = pending.take(tmp_path)
    assert note == "" and not pending.path(tmp_path).exists()  # taken: no second run carries it out too
    assert back.plans == [offline, other] and back.selection == batch.selection
    assert back.open == batch.open and back.open[0].plan is back.plans[1]
    pending.path(tmp_path).write_text("{not json")
    batches, note = pending.take(tmp_path)
    assert batches == [] and "could not be read" in note and not pending.path(tmp_path).exists()


def test_wall_time_budget_stops_starting_new_work(kernel_repo):
    repo, config = configure(kernel_repo, iterations=5, max_wall_s=10)
    ticks = iter([0.0, 20.0])  # the run starts, then the first budget check is past the limit
    run = evolve.Run(repo, config, client=fake_llm.FakeLLM([]), clock=lambda: next(ticks))
    summary = run.run()
    assert summary.iterations == 0 and "wall-time" in summary.stop


@pytest.mark.gpu
def test_offline_evolve_on_the_gpu(kernel_repo):
    """On the H200: the offline strategist measures real timings with device events."""
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(timing={"target_rse": 0.01, "max_time_s": 0.5,
                                                                        "min_reps": 10, "warmup": 3},
                                                             evolve={"pick": 2}), encoding="utf-8")
    repo, config = workflow.load(kernel_repo)
    summary = evolve.evolve(repo, config)
    assert [r.status for r in summary.rows] == ["ok", "ok"]
    for row in summary.rows:
        t = trailers(kernel_repo, row.sha)
        assert t["Kgit-Timing"] == ["events"] and "cpu" not in t["Kgit-Device"][0].lower()
        assert float(t["Kgit-Speedup"][0]) > 0


# -- prompts: templates, overrides, knowledge, the archive table -------------------------
def test_templates_render_and_repo_overrides_win(kernel_repo):
    text = prompts.render("fix", None, number=0, plan="P", error="E", code="C", attempt=2, attempts=3,
                          editable="kernel.py", regions="")
    assert "attempt 2 of 3" in text and "$" not in text
    (kernel_repo / "prompts").mkdir()
    (kernel_repo / "prompts" / "select.md").write_text("Pick from $archive, or $nonsense.\n")
    with pytest.raises(ConfigError, match=r"\$nonsense"):
        prompts.render("select", kernel_repo, archive="", count=0, shown=0, figures="", ranking="", notebook="")
    (kernel_repo / "prompts" / "select.md").write_text("Mine: $ranking costs $$5\n")
    assert prompts.render("select", kernel_repo, archive="", count=0, shown=0, figures="", ranking="abc",
                          notebook="") == "Mine: abc costs $5\n"


def test_knowledge_documents_load_and_a_missing_one_names_the_fix(kernel_repo):
    assert len(prompts.knowledge(["triton"], None)) > 500
    (kernel_repo / "prompts" / "knowledge").mkdir(parents=True)
    (kernel_repo / "prompts" / "knowledge" / "ours.md").write_text("Our GPU has 7 SMs.")
    assert "7 SMs" in prompts.knowledge(["ours"], kernel_repo)
    with pytest.raises(ConfigError, match="evolve.knowledge lists 'volta'.*available: .*triton"):
        prompts.knowledge(["volta"], kernel_repo)


def test_archive_table_keeps_to_its_budget_and_leads_with_the_best(kernel_repo):
    from kgit.archive.repo import Attempt

    def attempt(i, status, geomean):
        block = (f"Kgit-Experiment: {i}\nKgit-Attempt: 1\nKgit-Status: {status}\nKgit-Hypothesis: idea {i}\n"
                 "Kgit-Device: NVIDIA H200\nKgit-Timing: events\nKgit-Harness: h1\n"
                 + (f"Kgit-Geomean-us: {geomean}\nKgit-Speedup-Baseline: {100 / geomean}\n"
                    f"Kgit-Time-us: size=1 {geomean}\n" if status == "ok" else ""))
        return Attempt(f"{i:040x}", [], "", "a", "e", i, "s", block)

    attempts = [attempt(i, "ok" if i % 3 else "incorrect", 50 + (i * 7919) % 1000) for i in range(1, 5001)]
    table, shown = select_mod.archive_table(attempts, token_budget=2000)
    assert len(table) <= 2000 * select_mod.CHARS_PER_TOKEN + 200 and 20 < shown < 5000
    fastest = min((a for a in attempts if a.ok), key=lambda a: a.geomean_us)
    assert table.index(fastest.sha[:10]) < table.index("## failures, unfixed first")
    assert table.index("## best on NVIDIA H200") == 0


# -- what the scientist sees, and what the figures claim --------------------------------
GPU = "NVIDIA H200"


def gpu_result(geomean, harness, noise=0.001):
    """A result as the harness reports it from a GPU: per-shape mean, spread and repetitions."""
    from kgit_harness import result as result_mod

    std = noise * geomean * 10  # n = 100 repetitions: standard error = std / 10
    return result_mod.new("ok", device=GPU, timing="events", harness=harness, geomean_us=geomean, eval_s=1.0,
                          versions={"torch": "2.9.1", "triton": "3.5.0", "arch": "90"},
                          shapes=[{"key": "size=1048576", "mean_us": geomean, "std_us": std, "n": 100}])


def remote_gpu_repo(kernel_repo, **evolve_keys):
    """The kernel repository as a remote H200 evaluator sees it: the baseline re-timed there (a note)."""
    keys = {"knowledge": [], **evolve_keys}
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(
        evolve=keys, evaluator={"backend": "command", "command": "ssh h200-box kgit eval-candidate {folder}"}),
        encoding="utf-8")
    repo, config = workflow.load(kernel_repo)
    harness = "kgit test harness"
    record = {**gpu_result(100.0, harness)}
    repo.add_note(repo.rev("kgit/baseline"), {"device": GPU, "harness": harness, "timing": "events", "status": "ok",
                                              "geomean_us": 100.0, "times": {"size=1048576": 100.0}, "noise": 0.001,
                                              "when": 2_000_000_000, "versions": record["versions"]})
    return repo, config, harness


def test_speedup_is_claimed_only_beyond_the_noise_and_grep_lists_exactly_those(kernel_repo, run_kgit):
    repo, config, harness = remote_gpu_repo(kernel_repo, pick=3, attempts=1)
    # A fabricated second attempt, so the selector has a real choice and is asked.
    variants = {"A": 80.0, "B": 99.7, "C": 125.0}  # 1.25x faster, within the noise, 0.8x

    def evaluate(sha):
        text = git(kernel_repo, "show", f"{sha}:kernel.py")
        tag = next(k for k in variants if f"# variant {k}" in text)
        return gpu_result(variants[tag], harness)

    edits = [fake_llm.search_replace("kernel.py", SLOW_BLOCK, f"{SLOW_BLOCK}\n# variant {k}") for k in variants]
    fake = fake_llm.FakeLLM([
        ("design", fake_llm.design(["Plan A", "Plan B", "Plan C"], chosen=[0, 1, 2],
                                   lessons=["a bigger block helps on H200"])),
        *[("write", e) for e in edits],
    ])
    summary = evolve.evolve(repo, config, client=fake, evaluate=evaluate)
    assert [r.status for r in summary.rows] == ["ok", "ok", "ok"]
    subjects = {r.sha: git(kernel_repo, "show", "-s", "--format=%s", r.sha) for r in summary.rows}
    a, b, c = (r.sha for r in summary.rows)
    assert "speedup 1.25x" in subjects[a]
    assert "no clear change 1.00x" in subjects[b]
    assert "slower 0.80x" in subjects[c]
    listed = git(kernel_repo, "log", "--all", "--grep", "speedup", "--format=%H").split()
    assert listed == [a]
    # The noise is stored with the figure it qualifies.
    assert trailers(kernel_repo, b)["Kgit-Noise"] == ["0.100%"]

    # The stable prefix: one system message, the same bytes for every writer; the designer's
    # adds the knowledge documents after it.
    systems = [prompts.flatten(messages[0]["content"]) for _, messages in fake.history]
    assert all(messages[0]["role"] == "system" for _, messages in fake.history)
    assert len(set(systems[1:])) == 1 and systems[0].startswith(systems[1]) and "# Background" in systems[0]
    system = systems[1]
    # The environment as the remote evaluator reported it, and the GPU test shapes.
    assert f"device: {GPU}" in system and "triton 3.5.0" in system and "torch 2.9.1" in system
    assert "ssh h200-box" in system and "compiled for the GPU" in system
    assert "size=1048577" in system and "size=67108864" in system and "size=4097" not in system
    assert "rtol=1e-06" in system
    # Each writer sees every plan of its iteration, in a shared part that comes before its own.
    writes = fake.history[1:]
    shared = {messages[1]["content"][0]["text"] for _, messages in writes}
    assert len(shared) == 1 and all(f"Plan {k}" in next(iter(shared)) for k in "ABC")
    assert all(messages[1]["content"][0].get(prompts.STABLE) for _, messages in writes)
    assert "writer of plan 2" in prompts.flatten(writes[2][1][1]["content"][1]["text"])

    # The lab notebook: stored in the archive, shown to the next select and design, in the report.
    from kgit.archive import notebook
    from kgit.review import campaign

    assert notebook.lessons(repo) == ["a bigger block helps on H200"]
    assert "a bigger block helps on H200" in campaign.markdown(campaign.load(repo), "t")
    from kgit.review import html as report_html

    assert "<li>a bigger block helps on H200</li>" in report_html.render(campaign.load(repo), "t")
    fake2 = fake_llm.FakeLLM([
        ("select", fake_llm.selection(a[:10], c[:10], "the fastest line, with the slow one for contrast")),
        ("design", fake_llm.design(["Plan D", "Plan E"], chosen=[0], fewer_because="E is unobservable here",
                                   lessons=["a bigger block helps on H200", "merging A and C loses"])),
        ("write", fake_llm.search_replace("kernel.py", SLOW_BLOCK, f"{SLOW_BLOCK}\n# variant A\n# more")),
    ])
    lines = []
    evolve.evolve(repo, config, client=fake2, evaluate=evaluate, progress=lines.append)
    select_prompt, design_prompt = fake2.prompts("select")[0], fake2.prompts("design")[0]
    for text in (select_prompt, design_prompt):
        assert "a bigger block helps on H200" in text
    # Figures carry their device and verdict; a speedup is named only where it is real.
    assert f"best on {GPU}" in select_prompt and "speedup vs base 1.25x" in select_prompt
    assert "no clear change vs base" in design_prompt and "slower vs base 0.80x" in design_prompt
    assert "twice the combined standard error" in design_prompt
    # The selector's reference reaches the designer as code.
    assert f"Reference kernel ({c[:10]}" in design_prompt and "# variant C" in design_prompt
    writer_shared = fake2.history[-1][1][1]["content"][0]["text"]
    assert f"Reference kernel ({c[:10]}" in writer_shared and "# variant C" in writer_shared
    assert any("1 of up to 3 plan(s): E is unobservable here" in line for line in lines)
    assert notebook.lessons(repo)[-1] == "merging A and C loses"
    assert len(notebook.history(repo)) == 2
    log = run_kgit(kernel_repo, "log").output
    assert f"{GPU}, events, +-0.1%" in log and "no clear change" in log and "slower" in log
    result = run_kgit(kernel_repo, "best")
    assert result.exit_code == 0 and f"rule: the fastest geomean on {GPU}" in result.output
    assert "80.00 us" in result.output.splitlines()[0]  # A's time (D repeats A's variant): the fastest


@pytest.mark.slow
def test_cpu_runs_check_correctness_only_and_show_no_timings(kernel_repo):
    repo, config = configure(kernel_repo, pick=1, attempts=2, iterations=2)
    kernel = (kernel_repo / "kernel.py").read_text()
    wrong = kernel.replace("a + b, mask=mask", "a - b, mask=mask")
    fake = fake_llm.FakeLLM([
        ("design", fake_llm.design(["Subtract instead"])),
        ("write", fake_llm.whole_file("kernel.py", wrong)),
        ("write", fake_llm.whole_file("kernel.py", kernel.replace(SLOW_BLOCK, FAST_BLOCK), "Fixed the sign.")),
        ("select", "No JSON here."),
        ("select", fake_llm.selection("deadbeef12")),
        ("design", fake_llm.design(["Another idea"])),
        ("write", fake_llm.search_replace("kernel.py", "BLOCK_SIZE = 999", "BLOCK_SIZE = 4096")),
        ("write", fake_llm.search_replace("kernel.py", "BLOCK_SIZE = 999", "BLOCK_SIZE = 4096")),
    ])
    summary = evolve.evolve(repo, config, client=fake)
    assert not fake.answers
    # An unusable selector answer is re-asked with the error, then the best attempt is used.
    assert "no ```json block" in fake.prompts("select")[1]
    system = prompts.flatten(fake.history[0][1][0]["content"])
    assert "device: cpu" in system and "Triton's interpreter" in system and "Only correctness is checked" in system
    # The CPU section's shapes, not the GPU ones.
    # The CPU set is what runs; the GPU benchmark set is listed apart, as what remeasure ranks on.
    cpu_part, _, gpu_part = system.partition("Benchmark shapes on a GPU")
    assert "size=4097" in cpu_part and "size=67108864" not in cpu_part and "size=67108864" in gpu_part
    # The fix prompt carries the candidate's error without kgit's own traceback frames.
    fix = fake.prompts("write")[1]
    assert "wrong results" in fix and "kgit_harness/" not in fix and "kgit/evaluation" not in fix
    select_prompt, design_prompt = fake.prompts("select")[0], fake.prompts("design")[1]
    # No interpreter timing is shown as performance; the fixed failure is shown as fixed.
    assert " us" not in select_prompt.split("# Archive")[1].split("# Answer")[0]
    assert "No GPU timings exist" in select_prompt
    assert "(fixed by 1.2)" in select_prompt
    assert "attempt 1 incorrect: size=1 (seed 101):" in design_prompt and "(fixed)" in design_prompt
    assert "incorrect: size=1 (seed 101):" in select_prompt
    assert "interpreter: not timed for speed" in design_prompt
    text = evolve.summary_text(summary)
    assert "checked correctness only" in text and "latest correct attempt" in text and "best:" not in text
