"""Re-measurements as git notes, the per-device view, and notes round-tripping through a remote."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest
from conftest import fast_config_text, git

from kgit import config as config_mod
from kgit import remeasure as rm
from kgit.archive import measure
from kgit.archive.notes import Measurement
from kgit.archive.repo import BASELINE_TAG, NOTES_REF, Repo
from kgit.errors import GitError, KgitError
from kgit.review import text as report
from kgit_harness import result as result_mod


def _refs(root) -> str:
    """Every ref except the notes: what a re-measurement must leave alone."""
    return "\n".join(line for line in git(root, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
                     if not line.startswith(NOTES_REF))


class FakeEvaluator:
    """Returns prepared geomeans in order, as if a device measured them."""

    slots = 1

    def __init__(self, values):
        self.values = list(values)
        self.asked = []

    def __call__(self, sha):
        self.asked.append(sha)
        return result_mod.new("ok", device="Fake GPU", timing="events", geomean_us=self.values.pop(0),
                              shapes=[{"key": "size=1", "mean_us": 1.0}])


@pytest.mark.slow
def test_remeasure_cli_adds_a_note_and_rewrites_nothing(kernel_repo, run_kgit):
    before_refs, before_status = _refs(kernel_repo), git(kernel_repo, "status", "--porcelain")
    result = run_kgit(kernel_repo, "remeasure", "kgit/baseline", "--device-tag", "ci-cpu", "--json")
    assert result.exit_code == 0, result.output
    stored = json.loads(result.stdout)
    assert len(stored) == 1 and stored[0]["device_tag"] == "ci-cpu" and stored[0]["status"] == "ok"
    assert _refs(kernel_repo) == before_refs and git(kernel_repo, "status", "--porcelain") == before_status
    note = git(kernel_repo, "notes", "--ref", NOTES_REF, "show", BASELINE_TAG)
    assert json.loads(note.strip().splitlines()[-1])["device_tag"] == "ci-cpu"
    log = json.loads(run_kgit(kernel_repo, "log", "--json").stdout)
    devices = log[0]["devices"]
    assert devices["ci-cpu"]["n"] == 1 and devices["ci-cpu"]["latest_us"] == stored[0]["geomean_us"]
    assert devices["cpu"]["n"] == 1  # the commit's own measurement stays on its own device
    table = run_kgit(kernel_repo, "log", "--devices").stdout
    assert "ci-cpu" in table and "spread" in table


def test_repeated_measurements_show_latest_and_spread(kernel_repo):
    repo = Repo(kernel_repo)
    config = config_mod.parse(fast_config_text())
    fake = FakeEvaluator([10.0, 12.0, 11.0])
    done = rm.remeasure(repo, config, ["kgit/baseline"], repeat=3, evaluator=fake)
    assert [d.record.geomean_us for d in done] == [10.0, 12.0, 11.0]
    assert fake.asked == [repo.rev(BASELINE_TAG)] * 3
    baseline = next(a for a in repo.read() if a.is_baseline)
    view = measure.by_device(baseline)["Fake GPU"]
    assert (view["n"], view["min_us"], view["max_us"]) == (3, 10.0, 12.0)
    assert view["latest_us"] == 11.0
    assert view["spread"] == pytest.approx(0.2)


def test_by_device_orders_notes_by_time_not_by_position():
    # After a notes merge the lines are sorted, so the later record may come first.
    own = Measurement(device="X", harness=None, evaluator=None, timing=None, geomean_us=5.0, times={}, when=100,
                      source="commit")
    records = [own] + [Measurement.from_note(n) for n in ({"device": "X", "geomean_us": 7.0, "when": 300},
                                                          {"device": "X", "geomean_us": 6.0, "when": 200})]
    attempt = SimpleNamespace(time=100, measurements=lambda: records)
    view = measure.by_device(attempt)["X"]
    assert view["latest_us"] == 7.0 and view["n"] == 3 and view["min_us"] == 5.0


def test_remeasure_defaults_to_baseline_and_best_and_refuses_non_attempts(kernel_repo):
    repo = Repo(kernel_repo)
    attempts = repo.read()
    assert rm.targets(repo, attempts, [], every=False) == [repo.rev(BASELINE_TAG)]
    git(kernel_repo, "commit", "-q", "--allow-empty", "-m", "not an attempt")
    with pytest.raises(KgitError, match="not a kgit attempt"):
        rm.targets(repo, attempts, ["HEAD"], every=False)
    with pytest.raises(KgitError, match="not both"):
        rm.targets(repo, attempts, ["kgit/baseline"], every=True)


# -- sync through a bare remote ------------------------------------------------------------
def _notes_of_baseline(root) -> list:
    repo = Repo(root)
    return sorted(n.tag for n in next(a for a in repo.read() if a.is_baseline).notes.measurements)


def _note(root, tag):
    repo = Repo(root)
    repo.add_note(repo.rev(BASELINE_TAG), {"device": "X", "geomean_us": 1.0, "tag": tag, "when": 1})


def test_notes_round_trip_through_a_bare_remote(kernel_repo, tmp_path, run_kgit):
    bare = tmp_path / "shared.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    git(kernel_repo, "remote", "add", "origin", str(bare))
    git(kernel_repo, "push", "-q", "origin", "main", "--tags")
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(bare), str(other)], check=True)
    git(other, "fetch", "-q", "origin", "--tags")
    assert _notes_of_baseline(other) == []  # a plain clone carries no notes

    nothing = rm.sync(Repo(other), "origin")
    assert nothing["pushed"] is False and nothing["merged"] == "no remote notes"

    _note(kernel_repo, "from-h200")
    first = run_kgit(kernel_repo, "sync", "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["pushed"] is True

    _note(other, "from-mi300")  # both sides changed: the next sync has to merge
    merged = rm.sync(Repo(other), "origin")
    assert merged["merged"] == "merged" and merged["pushed"]
    assert _notes_of_baseline(other) == ["from-h200", "from-mi300"]

    again = rm.sync(Repo(kernel_repo), "origin")
    assert again["pushed"]
    assert _notes_of_baseline(kernel_repo) == ["from-h200", "from-mi300"]
    assert rm.sync(Repo(kernel_repo), "origin")["merged"] == "already in sync"
    assert not git(kernel_repo, "for-each-ref", "refs/notes/kgit-sync").strip()  # staging ref cleaned up


def test_sync_names_a_missing_remote(kernel_repo, run_kgit):
    result = run_kgit(kernel_repo, "sync", "nowhere")
    assert result.exit_code == 1
    assert "no remote named 'nowhere'" in result.stderr


def test_sync_reports_git_errors_of_an_unreachable_remote(kernel_repo, tmp_path):
    _note(kernel_repo, "local")
    with pytest.raises(GitError, match="git push"):
        rm.sync(Repo(kernel_repo), str(tmp_path / "no-such-remote.git"))


def test_a_failed_remeasurement_keeps_its_reason_and_error_excerpt(kernel_repo):
    repo = Repo(kernel_repo)
    config = config_mod.parse(fast_config_text())
    error = "Traceback (most recent call last):\n" + "  frame\n" * 600 + "ValueError: grid too large for H200"

    def rejecting(sha):
        return result_mod.new("rejected", device="NVIDIA H200", timing="events", error=error,
                              reason="persistent grid launched more programs than the device holds")

    rejecting.slots = 1
    lines = []
    done = rm.remeasure(repo, config, ["kgit/baseline"], evaluator=rejecting, progress=lines.append)
    note = git(kernel_repo, "notes", "--ref", NOTES_REF, "show", BASELINE_TAG)
    record = json.loads(note.strip().splitlines()[-1])
    assert record == done[0].record.to_note() and record["status"] == "rejected"
    assert record["reason"] == "persistent grid launched more programs than the device holds"
    excerpt = record["error_excerpt"]
    assert excerpt.endswith("ValueError: grid too large for H200") and len(excerpt) == rm.ERROR_EXCERPT_CHARS
    assert "persistent grid launched" in lines[0] and "rejected" in lines[0]
    baseline = next(a for a in repo.read() if a.is_baseline)
    shown = report.attempt_text(baseline, "", {}, "")
    assert "remeasured: NVIDIA H200: rejected (persistent grid launched more programs" in shown
    # A correct re-measurement carries neither.
    ok = rm.remeasure(repo, config, ["kgit/baseline"], evaluator=FakeEvaluator([9.0]))
    assert "reason" not in ok[0].record.to_note() and "error_excerpt" not in ok[0].record.to_note()


@pytest.mark.slow
def test_remeasure_under_another_protocol_is_noted_and_never_ranked_beside_the_first(kernel_repo, run_kgit):
    result = run_kgit(kernel_repo, "remeasure", "kgit/baseline", "--protocol", "gpumode-leaderboard-wall", "--json")
    assert result.exit_code == 0, result.output
    [stored] = json.loads(result.stdout)
    assert stored["protocol"] == "gpumode-leaderboard-wall" and stored["status"] == "ok"
    assert stored["harness"].endswith("protocol gpumode-leaderboard-wall")
    [baseline] = [a for a in Repo(kernel_repo).read() if a.is_baseline]
    # The commit's own figure (kgit-adaptive) and the note's are of two protocols: never compared.
    assert measure.comparable(baseline, baseline.device, baseline.harness).source == "commit"
    assert baseline.harness != stored["harness"]
    # Nor do they make one spread: a row per device and protocol.
    views = measure.by_device(baseline)
    assert views[f"{baseline.device} · gpumode-leaderboard-wall"]["n"] == 1
    assert views[baseline.device]["protocol"] == "kgit-adaptive"
    assert "gpumode-leaderboard-wall" in run_kgit(kernel_repo, "log", "--devices").stdout
    bad = run_kgit(kernel_repo, "remeasure", "kgit/baseline", "--protocol", "fastest")
    assert bad.exit_code == 1 and "unknown timing protocol 'fastest'" in bad.output
