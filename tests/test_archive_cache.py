"""The archive cache: a warm read gives exactly what a full read gives, in every case."""

import json
import subprocess

import pytest
from conftest import git

from kgit import workflow
from kgit.archive.repo import Repo


def _full(repo: Repo) -> list[dict]:
    (repo.state / "cache" / "archive-state.json").unlink(missing_ok=True)
    return sorted((a.to_json() for a in repo.read()), key=lambda a: a["sha"])


def _warm(repo: Repo) -> list[dict]:
    return sorted((a.to_json() for a in repo.read()), key=lambda a: a["sha"])


def _fake_attempt(repo, branch, parent, geomean=5.0):
    # The baseline's own device and harness: a result from another would have the base re-timed
    # (a real evaluation, seconds each), which these tests are not about.
    baseline = next(a for a in repo.read() if a.is_baseline)
    result = {"schema": "kgit.result/1", "status": "ok", "device": baseline.device, "timing": "interpreter",
              "harness": baseline.harness, "ranking": "mean",
              "geomean_us": geomean, "eval_s": 0.1,
              "shapes": [{"key": "size=4096", "mean_us": geomean}, {"key": "size=65536", "mean_us": geomean}]}
    tree = git(repo.root, "rev-parse", f"{parent}^{{tree}}").strip()
    config = workflow.load(repo.root)[1]
    with repo.lock("test"):
        return workflow.commit_attempt(repo, config, branch=branch, tree=tree, parent=parent, result=result,
                                          author=None, model="human").sha


def test_warm_reads_follow_growth_deletion_rewrites_and_notes(kernel_repo):
    repo = Repo(kernel_repo)
    assert _warm(repo) == _full(repo)  # cache now holds the baseline
    assert len(_warm(repo)) == 1  # and a warm read does not count it twice
    branch, base = workflow.start(repo, "first idea", checkout=False)
    one = _fake_attempt(repo, branch, base)
    two = _fake_attempt(repo, branch, one, 4.0)
    warm = _warm(repo)  # grown branch: only the new commits are read
    assert [a["sha"] for a in warm if a["experiment"] == 1] and warm == _full(repo)
    assert {two, one} <= {a["sha"] for a in warm}

    other, _ = workflow.start(repo, "second idea", base=base, checkout=False)
    _fake_attempt(repo, other, base, 6.0)
    assert _warm(repo) == _full(repo)

    git(kernel_repo, "update-ref", f"refs/heads/{branch}", one)  # rewound: attempt two is gone
    assert two not in {a["sha"] for a in _warm(repo)}
    assert _warm(repo) == _full(repo)

    git(kernel_repo, "branch", "-D", other)  # deleted
    assert all(a["experiment"] != 2 for a in _warm(repo))

    repo.add_note(one, {"device": "NVIDIA H200", "geomean_us": 1.0, "times": {}})  # notes on an old commit
    noted = next(a for a in _warm(repo) if a["sha"] == one)
    assert noted["notes"] and noted["notes"][-1]["device"] == "NVIDIA H200"
    assert _warm(repo) == _full(repo)


def test_a_corrupt_cache_is_ignored(kernel_repo):
    repo = Repo(kernel_repo)
    expected = _full(repo)
    repo.read()
    (repo.state / "cache" / "archive-records.jsonl").write_bytes(b"{not json\n")
    assert _warm(repo) == expected
    assert json.dumps(expected)  # plain data all the way down


def test_a_commit_between_reading_refs_and_git_log_is_listed_once(kernel_repo, monkeypatch):
    repo = Repo(kernel_repo)
    branch, base = workflow.start(repo, "race", checkout=False)
    one = _fake_attempt(repo, branch, base)
    repo.read()
    stale = repo.kgit_refs()
    two = _fake_attempt(repo, branch, one, 4.0)  # lands after the refs were read
    monkeypatch.setattr(Repo, "kgit_refs", lambda self: stale)
    assert [a.sha for a in repo.read()].count(two) == 1
    monkeypatch.undo()
    shas = [a.sha for a in repo.read()]  # the cache recorded the old tip: `two` comes back as new
    assert shas.count(two) == 1 and len(shas) == len(set(shas))


def test_lines_left_by_a_crashed_append_are_ignored_and_dropped(kernel_repo):
    repo = Repo(kernel_repo)
    branch, base = workflow.start(repo, "crash", checkout=False)
    one = _fake_attempt(repo, branch, base)
    repo.read()
    records = repo.state / "cache" / "archive-records.jsonl"
    with open(records, "a", encoding="utf-8") as f:
        f.write('["half a line')  # a kill -9 in the middle of an append
    warm = _warm(repo)
    assert [a["sha"] for a in warm].count(one) == 1
    _fake_attempt(repo, branch, one, 4.0)  # growth appends after the valid lines only
    grown = _warm(repo)
    assert "half a line" not in records.read_text()
    assert grown == _full(repo)


def test_a_whole_read_stored_piece_by_piece_is_read_back_whole(kernel_repo, monkeypatch):
    """git's output read 200 bytes at a time: the records are written in many pieces, yet the
    cache holds each attempt once and a warm read gives what a full read gives."""
    from kgit.archive import attempt as attempt_mod
    from kgit.archive import command
    from kgit.archive import repo as repo_mod

    repo = Repo(kernel_repo)
    branch, base = workflow.start(repo, "pieces", checkout=False)
    tip = base
    for i in range(4):
        tip = _fake_attempt(repo, branch, tip, 5.0 - i)
    monkeypatch.setattr(command, "READ_BYTES", 200)
    batches = []
    real = attempt_mod.parse_records
    monkeypatch.setattr(repo_mod, "parse_records", lambda records: batches.append(len(records)) or real(records))
    full = _full(repo)
    assert len(full) == 5 and len(batches) > 2, batches
    state = json.loads((repo.state / "cache" / "archive-state.json").read_text())
    assert state["lines"] == 5
    assert _warm(repo) == full
    assert not list((repo.state / "cache").glob("*.tmp"))


def test_git_failing_mid_read_leaves_no_records_and_the_next_read_is_whole(kernel_repo):
    from kgit.archive import cache
    from kgit.errors import GitError

    repo = Repo(kernel_repo)
    expected = _full(repo)
    refs = repo.kgit_refs()
    real = repo._log(refs["baseline"])

    def failing(exclude):
        yield from real(exclude)
        raise GitError("git log failed: the pipe broke")

    (repo.state / "cache" / "archive-state.json").unlink()
    with pytest.raises(GitError, match="the pipe broke"):
        cache.read(repo, refs, failing, lambda: dict)
    assert not (repo.state / "cache" / "archive-state.json").exists()
    assert not list((repo.state / "cache").glob("*.tmp"))
    assert _warm(repo) == expected


def test_an_annotated_baseline_tag_is_peeled_to_its_commit(kernel_repo):
    repo = Repo(kernel_repo)
    baseline = repo.baseline()
    git(kernel_repo, "tag", "-f", "-a", "-m", "the baseline, annotated", "kgit/baseline", baseline)
    assert git(kernel_repo, "rev-parse", "kgit/baseline").strip() != baseline  # the tag object
    assert repo.kgit_refs()["baseline"] == baseline
    assert [a.sha for a in repo.read()] == [baseline]


def _log_json(repo: Repo) -> list[dict]:
    from kgit.archive import measure

    kept = json.loads(repo.log_json())
    plain = [{**a.to_json(), "devices": measure.by_device(a)} for a in repo.read()]
    assert kept == json.loads(json.dumps(plain, default=str)), "the kept objects differ from rendering them now"
    return kept


def test_log_json_keeps_rendered_attempts_and_follows_growth_notes_and_damage(kernel_repo, run_kgit, monkeypatch):
    from kgit.archive import repo as repo_mod

    rendering = []
    real_render = repo_mod._render_for_log
    monkeypatch.setattr(repo_mod, "_render_for_log", lambda a: rendering.append(a.sha) or real_render(a))
    repo = Repo(kernel_repo)
    rendered = repo.state / "cache" / "archive-log.jsonl"
    assert [a["experiment"] for a in _log_json(repo)] == [0] and rendered.exists()
    assert json.loads(run_kgit(kernel_repo, "log", "--json").output) == _log_json(repo)
    branch, base = workflow.start(repo, "first idea", checkout=False)
    one = _fake_attempt(repo, branch, base)
    rendering.clear()
    assert [a["sha"] for a in _log_json(repo)].count(one) == 1  # growth: the new attempt rendered and kept
    assert rendering == [one] and rendered.read_bytes().count(b"\n") == 2
    rendering.clear()
    assert _log_json(repo) and rendering == []  # nothing moved: the kept lines are the answer
    repo.add_note(one, {"device": "NVIDIA H200", "geomean_us": 1.0, "times": {}})  # a note on a kept attempt
    noted = next(a for a in _log_json(repo) if a["sha"] == one)
    assert noted["devices"]["NVIDIA H200"]["latest_us"] == 1.0 and noted["notes"][-1]["device"] == "NVIDIA H200"
    assert rendering == [one]  # that attempt rendered again, and only it
    repo.add_note(one, {"device": "NVIDIA H200", "geomean_us": 2.0, "times": {}})  # its notes change again
    assert next(a for a in _log_json(repo) if a["sha"] == one)["devices"]["NVIDIA H200"]["latest_us"] == 2.0
    assert json.loads(run_kgit(kernel_repo, "log", "--json").output) == _log_json(repo)
    good = rendered.read_bytes()
    cut = good.index(b"\n") + 1
    rendered.write_bytes(good[:cut - 12] + b"[broken" + good[cut - 5:])  # damaged in place, its length kept
    assert len(rendered.read_bytes()) == len(good)
    assert {a["sha"] for a in _log_json(repo)} == {one, base}
    assert b"broken" not in rendered.read_bytes()


def test_warm_reads_keep_gits_order_newest_first_after_growth(kernel_repo, monkeypatch):
    # Records are appended as the archive grows; a read still lists the newest first, as a
    # whole read (git's order) does, so `kgit log --json` is the same list either way.
    # Each commit a minute after the one before, as in a real archive: git orders commits of
    # the same second by how it met them, not parents after children.
    import time

    repo = Repo(kernel_repo)
    repo.read()
    branch, base = workflow.start(repo, "order", checkout=False)
    start = int(time.time())

    def minutes_later(minutes):
        for name in ("GIT_COMMITTER_DATE", "GIT_AUTHOR_DATE"):
            monkeypatch.setenv(name, f"{start + 60 * minutes} +0000")

    minutes_later(1)
    one = _fake_attempt(repo, branch, base)
    grown = [a.sha for a in repo.read()]
    minutes_later(2)
    two = _fake_attempt(repo, branch, one, 4.0)
    warm = [a.sha for a in repo.read()]
    again = [a.sha for a in repo.read()]
    (repo.state / "cache" / "archive-state.json").unlink()
    whole = [a.sha for a in repo.read()]
    assert warm == again == whole and whole[:3] == [two, one, base], (warm, whole)
    assert grown == whole[1:]


def test_notes_are_read_from_the_notes_commit_fanned_out_or_flat(kernel_repo):
    """git stores notes flat (<sha>) or fanned out (<ab>/<cdef...>) once there are many; both
    name the annotated commit, and each read takes the notes of the commit it was given."""
    repo = Repo(kernel_repo)
    baseline = repo.baseline()
    repo.add_note(baseline, {"device": "NVIDIA H200", "geomean_us": 2.0, "times": {}})
    flat = repo.kgit_refs()["notes"]
    assert json.loads(repo.notes(flat)[baseline])["geomean_us"] == 2.0
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=kernel_repo, check=True, capture_output=True,
                          text=True, input='{"device":"NVIDIA H200","geomean_us":3.0,"times":{}}\n').stdout.strip()
    inner = subprocess.run(["git", "mktree"], cwd=kernel_repo, check=True, capture_output=True, text=True,
                           input=f"100644 blob {blob}\t{baseline[2:]}\n").stdout.strip()
    fanned = subprocess.run(["git", "mktree"], cwd=kernel_repo, check=True, capture_output=True, text=True,
                            input=f"040000 tree {inner}\t{baseline[:2]}\n").stdout.strip()
    commit = git(kernel_repo, "commit-tree", fanned, "-p", flat, "-m", "notes, fanned out").strip()
    git(kernel_repo, "update-ref", "refs/notes/kgit", commit)
    assert json.loads(repo.notes(commit)[baseline])["geomean_us"] == 3.0
    assert json.loads(repo.notes(flat)[baseline])["geomean_us"] == 2.0  # the older notes commit, as it was
    assert next(a for a in repo.read() if a.sha == baseline).notes.measurements[-1].geomean_us == 3.0
    assert repo.notes(None) == {}
