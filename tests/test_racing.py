"""Racing: the judge stops timing a candidate that is clearly slower than the incumbent.

The decision rule is a pure function (harness/racing.py), tested here on the CPU; so are
the `stopped` status, its commit subject and trailers, that evolve hands the base's GPU
times to an evaluator that can race (and only then), and that a stopped attempt never
becomes `kgit best`. The judge's own stop is tested end to end on a GPU (marked `gpu`).
"""

from __future__ import annotations

import math

import fake_llm
import pytest
from conftest import fast_config_text, git

from kgit import evolve, problems, workflow
from kgit.archive import figures
from kgit_harness import racing, timing
from kgit_harness import result as result_mod

GPU = "NVIDIA H200"
HARNESS = "kgit test harness"
KEYS = ["size=1048576", "size=16777216", "size=67108864"]
SLOW_BLOCK = "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096"



def shape(key, mean, rel_std=0.01, n=100):
    return {"key": key, "mean_us": mean, "std_us": rel_std * mean, "n": n}


# A campaign whose candidates are about equally faster or slower on every shape.
INCUMBENT = {"name": "abc1234567", "times": dict.fromkeys(KEYS, 100.0), "noise": 0.002,
             "spread": racing.SPREAD_FLOOR}


# -- the rule ---------------------------------------------------------------------------
def test_clearly_slower_stops_with_what_was_compared():
    verdict = racing.decide(INCUMBENT, [shape(KEYS[0], 150.0)], total=3, on_gpu=True)
    assert verdict is not None
    assert verdict["incumbent"] == "abc1234567" and (verdict["timed"], verdict["total"]) == (1, 3)
    assert verdict["compared"] == [KEYS[0]]
    assert verdict["slower"] == pytest.approx(1.5)
    assert 1 + racing.MARGIN < verdict["bound"] < 1.5


def test_within_the_noise_goes_on():
    # 3% slower is under the margin; 20% slower with a wide spread over few repetitions is not beyond it.
    assert racing.decide(INCUMBENT, [shape(KEYS[0], 103.0)], total=3, on_gpu=True) is None
    noisy = shape(KEYS[0], 120.0, rel_std=0.5, n=4)
    assert racing.decide(INCUMBENT, [noisy], total=3, on_gpu=True) is None
    # The same 20% with a tight spread is beyond it.
    assert racing.decide(INCUMBENT, [shape(KEYS[0], 120.0)], total=3, on_gpu=True) is not None


def test_faster_or_mixed_goes_on():
    assert racing.decide(INCUMBENT, [shape(KEYS[0], 60.0)], total=3, on_gpu=True) is None
    # Slower on one shape, as much faster on the other: the geomean over both is even.
    mixed = [shape(KEYS[0], 150.0), shape(KEYS[1], 100.0 / 1.5)]
    assert racing.decide(INCUMBENT, mixed, total=3, on_gpu=True) is None


def test_a_candidate_slower_only_on_its_first_shapes_is_not_stopped_where_shapes_lie_apart():
    """The timed shapes' mean stands for all of them only as far as one candidate's shapes agree.
    On the H200 a candidate 7% faster overall was stopped twenty calls into its first of 18
    shapes, where it was slower: without a campaign figure the rule allows for shapes as far
    apart as racing.SPREAD, and only a far slower first shape stops."""
    keys = [f"m={i}" for i in range(18)]
    unknown = {"name": "base", "times": dict.fromkeys(keys, 100.0), "noise": 0.002}
    first = [shape(keys[0], 112.0)]
    assert racing.decide(unknown, first, total=18, on_gpu=True) is None
    # A campaign whose shapes agree (racing.campaign_spread) lets the same evidence stop it.
    assert racing.decide({**unknown, "spread": racing.SPREAD_FLOOR}, first, total=18, on_gpu=True) is not None
    verdict = racing.decide(unknown, [shape(keys[0], 200.0)], total=18, on_gpu=True)
    assert verdict is not None and verdict["spread"] == racing.SPREAD
    # The more shapes are timed, the less the untimed ones can change: 12% on nine of 18 stops.
    assert racing.decide(unknown, [shape(k, 112.0) for k in keys[:3]], total=18, on_gpu=True) is None
    assert racing.decide(unknown, [shape(k, 125.0) for k in keys[:9]], total=18, on_gpu=True) is not None


def test_shapes_that_disagree_widen_the_verdict_whatever_the_campaign_says():
    # 30% slower on one shape, 10% faster on the next: 8% slower on the mean, past the margin,
    # but two shapes this far apart say little about the third.
    apart = [shape(KEYS[0], 130.0), shape(KEYS[1], 90.0)]
    assert racing.decide(INCUMBENT, apart, total=3, on_gpu=True) is None
    agree = [shape(KEYS[0], 109.0), shape(KEYS[1], 108.0)]
    assert racing.decide(INCUMBENT, agree, total=3, on_gpu=True) is not None


def test_the_campaign_spread_is_the_second_widest_of_its_fully_timed_attempts():
    assert racing.campaign_spread([[1.0, 1.1, 0.9]] * 2) is None  # two attempts: too few
    assert racing.campaign_spread([[1.0, 1.1]] * 5) is None  # two shapes each: too few
    tight = [1.0, 1.001, 0.999]
    assert racing.campaign_spread([tight] * 3) == racing.SPREAD_FLOOR
    wide, wider, widest = [1.0, 1.2, 0.8], [1.0, 1.4, 0.6], [1.0, 3.0, 0.3]
    spread = racing.campaign_spread([tight, wide, widest, wider])
    logs = [0.0, math.log(1.4), math.log(0.6)]
    mean = sum(logs) / 3
    assert spread == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in logs) / 2))
    # Times of zero or less are not ratios.
    assert racing.campaign_spread([[0.0, -1.0, 1.0]] * 3) is None


def test_interpreter_timings_never_race():
    assert racing.decide(INCUMBENT, [shape(KEYS[0], 1000.0)], total=3, on_gpu=False) is None


def test_no_race_without_spread_an_incumbent_or_shapes_left():
    slow = [shape(KEYS[0], 1000.0)]
    assert racing.decide(None, slow, total=3, on_gpu=True) is None
    assert racing.decide({**INCUMBENT, "noise": None}, slow, total=3, on_gpu=True) is None
    assert racing.decide(INCUMBENT, [{"key": KEYS[0], "mean_us": 1000.0}], total=3, on_gpu=True) is None
    # A shape the incumbent never timed is no evidence.
    assert racing.decide(INCUMBENT, [shape("size=7", 1000.0)], total=3, on_gpu=True) is None
    # Every shape timed: the result is complete, so it is ranked, not stopped.
    done = [shape(k, 1000.0) for k in KEYS]
    assert racing.decide(INCUMBENT, done, total=3, on_gpu=True) is None


def test_ranking_statistic_is_the_tasks():
    timed = [{"key": KEYS[0], "mean_us": 100.0, "median_us": 200.0, "std_us": 1.0, "n": 100}]
    assert racing.decide(INCUMBENT, timed, total=3, on_gpu=True) is None
    assert racing.decide(INCUMBENT, timed, total=3, on_gpu=True, stat="median_us") is not None


# -- partway through a shape --------------------------------------------------------------
def calls_entry(key, times):
    """A shape's entry from its calls so far, with the statistics the judge gives it (timing.stats)."""
    return {"key": key, **timing.stats(times)}


def ask_within(times, timed=(), incumbent=INCUMBENT, on_gpu=True):
    """racing.decide_within as the judge asks it: the calls so far, and their later half."""
    return racing.decide_within(incumbent, list(timed), calls_entry(KEYS[1], times),
                                calls_entry(KEYS[1], times[len(times) // 2:]), total=3, on_gpu=on_gpu)


def jittered(mean, count, spread=0.02):
    return [mean * (1 + spread * ((i * 7) % 5 - 2) / 2) for i in range(count)]


def test_asked_every_few_calls_once_enough_are_in():
    asked = [n for n in range(1, 61) if racing.due(n)]
    assert asked[0] == racing.WITHIN_MIN_CALLS and all(b - a == racing.WITHIN_EVERY for a, b in zip(asked, asked[1:]))


def test_partway_a_clearly_slower_shape_stops_and_says_how_many_calls():
    verdict = ask_within(jittered(150.0, 20))
    assert verdict is not None and verdict["calls"] == 20
    assert (verdict["timed"], verdict["total"]) == (1, 3) and verdict["compared"] == [KEYS[1]]
    assert verdict["slower"] == pytest.approx(1.5, rel=0.01)
    # Counted with the shapes finished before it.
    verdict = ask_within(jittered(150.0, 20), timed=[shape(KEYS[0], 150.0)])
    assert verdict["timed"] == 2 and verdict["compared"] == KEYS[:2]
    # The last shape may stop partway too: it is not complete yet.
    two_done = [shape(KEYS[0], 150.0), shape(KEYS[2], 150.0)]
    assert racing.decide_within(INCUMBENT, two_done, calls_entry(KEYS[1], jittered(150.0, 20)),
                                calls_entry(KEYS[1], jittered(150.0, 10)), total=3, on_gpu=True)["timed"] == 3


def test_partway_slow_first_calls_alone_do_not_stop():
    # Twenty calls at 1.5x the incumbent's time, then calls as fast as it: the whole is beyond
    # the noise, its later half is not.
    ramp = jittered(150.0, 20) + jittered(100.0, 20)
    whole = calls_entry(KEYS[1], ramp)
    assert racing.decide(INCUMBENT, [whole], total=3, on_gpu=True) is not None
    assert ask_within(ramp) is None
    assert ask_within(jittered(100.0, 40)) is None and ask_within(jittered(104.0, 40)) is None


def test_after_a_whole_shape_slow_first_calls_alone_do_not_stop():
    # A shape of twenty calls whose first ten are at 1.6x (clocks coming up after the checks):
    # the whole is beyond the noise, its later half is not, so the race goes on.
    ramp = jittered(160.0, 10) + jittered(100.0, 10)
    whole, later = calls_entry(KEYS[0], ramp), calls_entry(KEYS[0], ramp[10:])
    assert racing.decide(INCUMBENT, [whole], total=3, on_gpu=True) is not None
    assert racing.decide(INCUMBENT, [whole], total=3, on_gpu=True, later=later) is None
    # Slow throughout: stopped, with the whole shape's figures.
    slow = jittered(150.0, 10)
    verdict = racing.decide(INCUMBENT, [calls_entry(KEYS[0], slow)], total=3, on_gpu=True,
                            later=calls_entry(KEYS[0], slow[5:]))
    assert verdict is not None and verdict["slower"] == pytest.approx(1.5, rel=0.01)


def test_partway_never_on_the_interpreter_or_without_an_incumbent():
    assert ask_within(jittered(1000.0, 20), on_gpu=False) is None
    assert ask_within(jittered(1000.0, 20), incumbent=None) is None
    assert ask_within(jittered(1000.0, 20), incumbent={**INCUMBENT, "noise": None}) is None


# -- the status and its commit ------------------------------------------------------------
def stopped_result(mean=150.0):
    timed = [shape(KEYS[0], mean)]
    race = racing.decide(INCUMBENT, timed, total=3, on_gpu=True)
    return result_mod.new("stopped", device=GPU, timing="events", harness=HARNESS, shapes=timed, race=race,
                          tests=[{"key": "size=1", "seed": 1, "ok": True, "message": ""}], eval_s=1.0,
                          error="stopped timing after 1 of 3 shapes")


def test_stopped_is_a_valid_status_without_a_geomean():
    doc = result_mod.validate(stopped_result())
    assert doc["status"] == "stopped" and doc["geomean_us"] is None
    assert doc["race"]["timed"] == 1
    assert "stopped" in result_mod.STATUSES


def test_subject_names_the_incumbent_and_never_speedup():
    text = racing.subject("bigger-blocks", {"incumbent": "abc1234567", "timed": 1, "total": 3})
    assert text == "bigger-blocks: stopped, slower than abc1234567 after 1 of 3 shapes"
    assert "speedup" not in text.lower()
    partway = racing.subject("bigger-blocks", {"incumbent": "abc1234567", "timed": 2, "total": 3, "calls": 25})
    assert partway == "bigger-blocks: stopped, slower than abc1234567 after 25 calls into shape 2 of 3"


def remote_gpu_repo(kernel_repo, **evolve_keys):
    """The vector_add repository as an H200 evaluator sees it: the baseline timed there (a note)."""
    keys = {"knowledge": [], **evolve_keys}
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve=keys), encoding="utf-8")
    repo, config = workflow.load(kernel_repo)
    repo.add_note(repo.rev("kgit/baseline"), {
        "device": GPU, "harness": HARNESS, "timing": "events", "status": "ok", "geomean_us": 100.0,
        "times": dict(INCUMBENT["times"]), "noise": 0.001, "when": 2_000_000_000, "versions": {}})
    return repo, config


class RacingEvaluator:
    """Stands in for the local backend on an H200: ok results, or what the judge's race would decide."""

    races = True

    def __init__(self, repo_path, means):
        self.path, self.means, self.races_seen = repo_path, means, []

    def __call__(self, sha, race=None):
        self.races_seen.append(race)
        text = git(self.path, "show", f"{sha}:kernel.py")
        mean = next(v for k, v in self.means.items() if f"# variant {k}" in text)
        shapes = []
        for key in KEYS:
            shapes.append(shape(key, mean))
            verdict = racing.decide(race, shapes, len(KEYS), on_gpu=True)
            if verdict:
                return result_mod.new("stopped", device=GPU, timing="events", harness=HARNESS, shapes=shapes,
                                      race=verdict, eval_s=1.0, error="stopped")
        return result_mod.new("ok", device=GPU, timing="events", harness=HARNESS, shapes=shapes,
                              geomean_us=mean, eval_s=1.0)


def run_variants(kernel_repo, evaluator_means, pick=2, **keys):
    repo, config = remote_gpu_repo(kernel_repo, pick=pick, attempts=1, **keys)
    evaluator = RacingEvaluator(kernel_repo, evaluator_means)
    edits = [fake_llm.search_replace("kernel.py", SLOW_BLOCK, f"{SLOW_BLOCK}\n# variant {k}") for k in evaluator_means]
    plans = [f"Plan {k}" for k in evaluator_means]
    fake = fake_llm.FakeLLM([("design", fake_llm.design(plans, chosen=list(range(len(plans))))),
                             *[("write", e) for e in edits]])
    summary = evolve.evolve(repo, config, client=fake, evaluate=evaluator)
    return repo, summary, evaluator


def test_evolve_races_against_the_base_and_a_stopped_attempt_is_never_best(kernel_repo):
    repo, summary, evaluator = run_variants(kernel_repo, {"A": 95.0, "B": 200.0})
    # The first evaluation finds out the device; from then on the base's times on it are raced against.
    assert evaluator.races_seen[0] is None
    race = evaluator.races_seen[1]
    assert race["times"] == INCUMBENT["times"] and race["name"] == repo.rev("kgit/baseline")[:10]
    assert race["noise"] == pytest.approx(0.001 * 3 ** 0.5)
    assert [r.status for r in summary.rows] == ["ok", "stopped"]
    stopped = summary.rows[1].sha
    subject = git(kernel_repo, "show", "-s", "--format=%s", stopped).strip()
    assert subject.endswith(f": stopped, slower than {race['name']} after 1 of 3 shapes")
    body = git(kernel_repo, "show", "-s", "--format=%B", stopped)
    assert "speedup" not in body.lower()
    assert "Kgit-Status: stopped" in body and f"Kgit-Time-us: {KEYS[0]} 200.000" in body
    assert "Kgit-Stopped: after 1 of 3 shapes" in body and "Kgit-Geomean-us" not in body
    attempts = repo.read()
    attempt = next(a for a in attempts if a.sha == stopped)
    assert not attempt.ok and attempt.measurements() == []
    assert figures.best(attempts).sha == workflow.best(attempts).sha == summary.rows[0].sha
    assert stopped not in git(kernel_repo, "log", "--all", "--grep", "speedup", "--format=%H")


def test_evolve_races_with_the_spread_its_fully_timed_attempts_show(kernel_repo):
    """Until three attempts are timed in full against their base, the race allows for shapes as
    far apart as racing.SPREAD; then for the campaign's own spread (here every attempt is
    faster or slower by one factor on every shape, so the floor)."""
    repo, summary, evaluator = run_variants(kernel_repo, {"A": 95.0, "B": 96.0, "C": 97.0, "D": 300.0},
                                            pick=4)
    assert [r.status for r in summary.rows] == ["ok", "ok", "ok", "stopped"]
    assert all("spread" not in race for race in evaluator.races_seen[1:3])
    assert evaluator.races_seen[3]["spread"] == racing.SPREAD_FLOOR


def test_a_stopped_attempt_with_tiny_times_is_never_best(kernel_repo):
    """Its partial times are kept as trailers but never ranked, however fast they read."""
    repo, config = remote_gpu_repo(kernel_repo)
    baseline = repo.rev("kgit/baseline")
    branch = "kgit/1-partial"
    repo.create_branch(branch, baseline, "Partial", None)
    tree = git(kernel_repo, "rev-parse", "kgit/baseline^{tree}").strip()
    doc = stopped_result()
    # As if the times had been recorded at 1 us: faster than anything, yet partial.
    doc["shapes"] = [shape(KEYS[0], 1.0)]
    outcome = workflow.commit_attempt(repo, config, branch=branch, tree=tree, parent=baseline, result=doc,
                                         author="kgit (test)", model="test")
    attempts = repo.read()
    assert next(a for a in attempts if a.sha == outcome.sha).status == "stopped"
    best = workflow.best(attempts)
    assert best is not None and best.sha != outcome.sha and best.ok
    assert outcome.speedup is None


def test_a_stopped_attempt_ends_its_plan_without_fix_attempts(kernel_repo):
    """A stopped attempt is a measured result, not a failure: the writer is not asked to fix it,
    and the selector's table lists it with the other attempts, not among the failures."""
    from kgit.scientist import select

    repo, config = remote_gpu_repo(kernel_repo, pick=2, attempts=3)
    evaluator = RacingEvaluator(kernel_repo, {"A": 95.0, "B": 200.0})
    edits = [fake_llm.search_replace("kernel.py", SLOW_BLOCK, f"{SLOW_BLOCK}\n# variant {k}") for k in "AB"]
    fake = fake_llm.FakeLLM([("design", fake_llm.design(["Plan A", "Plan B"], chosen=[0, 1])),
                             *[("write", e) for e in edits]])
    summary = evolve.evolve(repo, config, client=fake, evaluate=evaluator)
    # Two writes, two evaluations, two commits: no attempt 2 or 3 after the stop.
    assert [r.status for r in summary.rows] == ["ok", "stopped"]
    assert [r.attempt for r in summary.rows] == [1, 1]
    assert len(fake.prompts("write")) == 2 and len(evaluator.races_seen) == 2
    stopped = summary.rows[1].sha
    branch = summary.rows[1].branch
    assert git(kernel_repo, "rev-parse", branch).strip() == stopped
    table, _ = select.archive_table(repo.read(), token_budget=100_000)
    failures = table.partition("## failures, unfixed first")[2].partition("## all others")[0]
    assert stopped[:10] in table and stopped[:10] not in failures


def test_race_off_in_config_sends_no_incumbent(kernel_repo):
    _, summary, evaluator = run_variants(kernel_repo, {"A": 95.0, "B": 200.0}, race=False)
    assert evaluator.races_seen == [None, None]
    assert [r.status for r in summary.rows] == ["ok", "ok"]


def test_an_evaluator_that_cannot_race_is_called_as_before(kernel_repo):
    repo, config = remote_gpu_repo(kernel_repo, pick=1, attempts=1)
    calls = []

    def plain(sha):  # no `race` parameter: command and ray backends, remote evaluators
        calls.append(sha)
        return result_mod.new("ok", device=GPU, timing="events", harness=HARNESS, geomean_us=90.0, eval_s=1.0,
                              shapes=[shape(k, 90.0) for k in KEYS])

    edit = fake_llm.search_replace("kernel.py", SLOW_BLOCK, f"{SLOW_BLOCK}\n# variant A")
    fake = fake_llm.FakeLLM([("design", fake_llm.design(["Plan A"])), ("write", edit)])
    summary = evolve.evolve(repo, config, client=fake, evaluate=plain)
    assert len(calls) == 1 and summary.rows[0].status == "ok"


# -- the judge on a GPU -----------------------------------------------------------------
@pytest.mark.gpu
def test_judge_stops_a_candidate_far_slower_than_a_fictional_incumbent(kernel_repo):
    """vector_add's baseline raced against an incumbent 100x faster on every shape: stopped after one."""
    from kgit.evaluation import child

    repo, config = workflow.load(kernel_repo)
    task_keys = ["size=1048576", "size=16777216", "size=67108864"]
    ok = child.evaluate_tree(kernel_repo, config, state_dir=repo.state / "scratch")
    assert ok["status"] == "ok" and ok["timing"] == "events"
    times = {s["key"]: s["mean_us"] / 100 for s in ok["shapes"]}
    assert sorted(times) == sorted(task_keys)
    doc = child.evaluate_tree(kernel_repo, config, state_dir=repo.state / "scratch",
                              race={"name": "fictional", "times": times, "noise": 0.01})
    assert doc["status"] == "stopped", doc.get("error")
    assert doc["race"]["timed"] == 1 and doc["race"]["total"] == 3 and len(doc["shapes"]) == 1
    assert doc["race"].get("calls", doc["shapes"][0]["n"]) == doc["shapes"][0]["n"]  # partway or whole
    assert doc["geomean_us"] is None and all(t["ok"] for t in doc["tests"])
    # Against its own times the same kernel is never stopped.
    own = {s["key"]: s["mean_us"] for s in ok["shapes"]}
    again = child.evaluate_tree(kernel_repo, config, state_dir=repo.state / "scratch",
                                race={"name": "itself", "times": own, "noise": 0.01})
    assert again["status"] == "ok", again.get("error")


def test_a_stopped_tree_is_raced_again_not_reused(kernel_repo):
    repo, config = remote_gpu_repo(kernel_repo, pick=3, attempts=1)
    evaluator = RacingEvaluator(kernel_repo, {"A": 95.0, "B": 200.0})
    edits = [fake_llm.search_replace("kernel.py", SLOW_BLOCK, f"{SLOW_BLOCK}\n# variant {k}") for k in "ABB"]
    fake = fake_llm.FakeLLM([("design", fake_llm.design(["Plan A", "Plan B", "Plan B again"], chosen=[0, 1, 2])),
                             *[("write", e) for e in edits]])
    summary = evolve.evolve(repo, config, client=fake, evaluate=evaluator)
    assert [r.status for r in summary.rows] == ["ok", "stopped", "stopped"]
    assert len(evaluator.races_seen) == 3 and summary.rows[2].reused == ""


@pytest.mark.slow
def test_judge_consults_the_race_after_each_shape_and_stops(kernel_repo, tmp_path, monkeypatch):
    """The judge's wiring on the CPU, run in-process: the rule is made to treat interpreter
    timings as GPU ones (only here; the rule's own tests show it never does), so the judge's
    stop can be seen without a GPU. The rule's arguments are checked on every call."""
    from dataclasses import asdict

    from kgit.evaluation import child
    from kgit_harness import judge

    repo, config = workflow.load(kernel_repo)
    task = problems.load_task(kernel_repo / config.problem)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    problem_dir, candidate_dir = child.stage_candidate(kernel_repo, config.problem, task.files, scratch)
    calls = []
    real = racing.decide

    def as_if_on_a_gpu(incumbent, timed, total, on_gpu, stat="mean_us", later=None):
        calls.append((len(timed), total, on_gpu, stat))
        # With an incumbent, the later half of the last shape's calls comes with it.
        assert incumbent is None or (later["key"] == timed[-1]["key"]
                                     and later["n"] == timed[-1]["n"] - timed[-1]["n"] // 2)
        return real(incumbent, timed, total, True, stat, later=later)

    monkeypatch.setattr(judge.racing, "decide", as_if_on_a_gpu)
    waits = []  # whether the judge waited for the target builds: not for a stopped attempt
    collect = judge._targets_collect
    monkeypatch.setattr(judge, "_targets_collect", lambda runner, wait=True: waits.append(wait) or collect(runner, wait))
    keys = ["size=4096", "size=65536"]  # vector_add's CPU benchmark shapes
    spec = {"problem_dir": str(problem_dir), "candidate_dir": str(candidate_dir), "timing": asdict(config.timing),
            "secret_seed": 7, "timeout_s": 300, "kernel_split": True, "sandbox": {}, "runner_prefix": [],
            "runner_cwd": str(scratch),
            "race": {"name": "fictional", "times": dict.fromkeys(keys, 0.001), "noise": 0.01}}
    doc = judge.run(spec)
    assert doc["status"] == "stopped", doc.get("error")
    assert calls == [(1, 2, False, "mean_us")]
    assert [s["key"] for s in doc["shapes"]] == keys[:1]
    assert doc["race"]["incumbent"] == "fictional" and doc["geomean_us"] is None
    assert doc["tests"] and all(t["ok"] for t in doc["tests"])
    # The runner said it was done (its output let go): the judge did not wait for it to end.
    assert "runner said bye" in doc["phases"]["judge"]
    assert waits == [False] and set(doc["targets"]["results"]) == {"gfx942", "sm_90a"}
    result_mod.validate(doc)

    # Without an incumbent the same kernel is timed in full and ranked.
    calls.clear()
    doc = judge.run({**spec, "race": None, "secret_seed": 8})
    assert doc["status"] == "ok" and len(doc["shapes"]) == 2 and calls == [(1, 2, False, "mean_us"),
                                                                          (2, 2, False, "mean_us")]
    assert waits == [False, True]

    # Partway through the first shape, asked from its fourth call on (of at least 5): stopped
    # there, with the calls so far as the shape's entry.
    within = []
    real_within = racing.decide_within

    def within_as_if_on_a_gpu(incumbent, timed, whole, later, total, on_gpu, stat="mean_us"):
        within.append((len(timed), whole["n"], later["n"], total, on_gpu))
        return real_within(incumbent, timed, whole, later, total, True, stat)

    monkeypatch.setattr(judge.racing, "decide_within", within_as_if_on_a_gpu)
    monkeypatch.setattr(judge.racing, "due", lambda n: n >= 4)
    calls.clear()
    doc = judge.run({**spec, "secret_seed": 9, "timing": {**spec["timing"], "min_reps": 5, "target_rse": 0.0}})
    assert doc["status"] == "stopped", doc.get("error")
    assert within == [(0, 4, 2, 2, False)] and calls == []
    assert doc["race"]["calls"] == 4 and doc["race"]["timed"] == 1
    assert [(s["key"], s["n"]) for s in doc["shapes"]] == [(keys[0], 4)] and "raced" not in doc["shapes"][0]
    assert "4 calls into shape 1 of 2" in doc["error"]
    result_mod.validate(doc)
