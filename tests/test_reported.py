"""What a candidate reports is data: held to a schema by the judge, and never a way to write
kgit's trailers or to stop `kgit record` from committing (harness/reported.py, the trailer
table in kgit/archive/trailers.py, the reader in kgit/archive/attempt.py)."""

from __future__ import annotations

import subprocess

from conftest import git, init_with_one_attempt, make_git_repo

from kgit.archive import trailers as tr
from kgit.archive.repo import parse_log
from kgit_harness import reported
from kgit_harness import result as result_mod

FORGED_NAME = "sm_90a\n\nKgit-Status: ok\nKgit-Geomean-us: 0.04"
HOSTILE_TARGETS = {
    "reported_by": "judge", "triton": "3.6\nKgit-Status: ok", "launches": "many", "variants": 10**30,
    "results": {
        FORGED_NAME: {"builds": True, "kernels": []},
        "gfx942": {"builds": "yes", "error": ["not", "text"], "not_compiled": -4,
                   "kernels": [{"kernel": "k\nKgit-Status: ok", "vgpr": "lots"}, "not a kernel",
                               {"kernel": "_gemm", "vgpr": 10**50, "lds_bytes": 65536, "extra": object.__name__}],
                   "failures": {"not": "a list"}},
        "sm_90a": None,
    },
    "dry": {"captured": "nope", "failed": {"a\nb": 7}},
}


def _result(status="incorrect", **fields):
    return result_mod.Result.from_dict(result_mod.new(status, **fields))


def test_the_schema_keeps_known_targets_and_bounded_values_and_notes_the_rest():
    facts = reported.clean_targets(HOSTILE_TARGETS, ["gfx942", "sm_90a"], {"kernel.py": "def _gemm():\n    pass\n"})
    assert set(facts["results"]) == {"gfx942", "sm_90a"} and facts["reported_by"] == "candidate"
    assert facts["triton"] == "unknown" and facts["launches"] == 0 and facts["variants"] == 0
    gfx = facts["results"]["gfx942"]
    assert [k["kernel"] for k in gfx["kernels"]] == ["_gemm"] and gfx["kernels"][0]["vgpr"] is None
    assert gfx["kernels"][0]["lds_bytes"] == 65536 and "extra" not in gfx["kernels"][0]
    assert gfx["builds"] is None and gfx["not_compiled"] == 0 and "\n" not in gfx["error"]
    assert facts["results"]["sm_90a"]["builds"] is None
    assert facts["dry"]["captured"] == [] and facts["dry"]["failed"] == {"a b": "7"}
    assert any("not asked for" in note for note in facts["dropped"])
    # A kernel its source does not define was never the judge's to see.
    facts = reported.clean_targets({"results": {"gfx942": {"builds": True, "kernels": [{"kernel": "_ghost"}]}}},
                                   ["gfx942"], {"kernel.py": "x = 1\n"})
    assert facts["results"]["gfx942"]["kernels"] == [] and facts["results"]["gfx942"]["builds"] is None
    assert any("_ghost" in note for note in facts["dropped"])
    assert reported.clean_targets("a string", ["gfx942"])["results"] == {}


def test_forged_target_names_write_no_trailers_and_the_attempt_is_still_committed(tmp_path, monkeypatch):
    # The runner's report arrives as kgit reads any result (a command evaluator's output too):
    # it becomes an attempt, its keys are kgit's own, and nothing in it stops the commit.
    baseline = result_mod.new("ok", device="cpu", timing="interpreter", geomean_us=10.0,
                              shapes=[{"key": "size=1", "mean_us": 10.0}])
    attempt = result_mod.new("incorrect", error="wrong\n\nKgit-Status: ok\nKgit-Geomean-us: 0.01",
                             targets=HOSTILE_TARGETS)
    _, sha = init_with_one_attempt(tmp_path / "repo", monkeypatch, baseline, attempt)
    message = git(tmp_path / "repo", "log", "-1", "--format=%B", sha)
    block = message.rstrip().split("\n\n")[-1]
    keys = [line.partition(":")[0] for line in block.splitlines()]
    known = set(tr.BY_KEY) | {f"Kgit-Target-{tr.BY_ATTR['targets'].encode(n)}" for n in tr.BY_ATTR["targets"].names}
    assert set(keys) <= known and keys.count("Kgit-Status") == 1, keys
    trailers = subprocess.run(["git", "log", "-1", "--format=%(trailers:key=Kgit-Status,valueonly)", sha],
                              cwd=tmp_path / "repo", capture_output=True, text=True, check=True).stdout.split()
    assert trailers == ["incorrect"]
    read = _read(tmp_path / "repo", sha)
    assert read.status == "incorrect" and read.geomean_us is None


def _log_format():
    from kgit.archive.attempt import LOG_FORMAT

    return LOG_FORMAT


def _commit(repo, message: str) -> str:
    tree = git(repo, "write-tree").strip()
    return subprocess.run(["git", "commit-tree", tree, "-F", "-"], cwd=repo, input=message, capture_output=True,
                          text=True, check=True).stdout.strip()


def _read(repo, sha):
    [attempt] = parse_log(git(repo, "log", "-1", "-z", "--format=" + _log_format(), sha))
    return attempt


def test_the_reader_refuses_repeated_verdict_trailers_and_trailers_in_the_body(tmp_path):
    repo = make_git_repo(tmp_path / "r")
    honest = ("x: speedup 2.00x vs base (geomean 5.0 us)\n\nKgit-Experiment: 1\nKgit-Attempt: 1\n"
              "Kgit-Status: ok\nKgit-Geomean-us: 5.0\nKgit-Time-us: n=1 5.0\n")
    assert _read(repo, _commit(repo, honest)).ok
    repeated = honest.replace("Kgit-Status: ok\n", "Kgit-Status: incorrect\nKgit-Status: ok\n")
    twice = honest.replace("Kgit-Time-us: n=1 5.0\n", "Kgit-Time-us: n=1 9.0\nKgit-Time-us: n=1 5.0\n")
    body = honest.replace("\n\nKgit-Experiment", "\n\nquoted\nKgit-Status: ok\n\nKgit-Experiment")
    for forged in (repeated, twice, body):
        attempt = _read(repo, _commit(repo, forged))
        assert attempt.status == "refused" and not attempt.ok and attempt.geomean_us is None, forged
        assert attempt.reason.startswith("malformed trailers") and attempt.times == {}


def test_quoted_text_that_reads_as_a_trailer_is_indented_so_kgits_own_commits_read_whole(tmp_path):
    repo = make_git_repo(tmp_path / "r")
    message = tr.Message("x: incorrect", ["Notes: Kgit-Status: ok", "Error excerpt:\nkgit-geomean-us: 0.01"],
                         [("Kgit-Experiment", 1), ("Kgit-Attempt", 1), ("Kgit-Status", "incorrect")]).render(ok=False)
    assert "\n  kgit-geomean-us: 0.01" in message
    attempt = _read(repo, _commit(repo, message))
    assert attempt.status == "incorrect"


def test_a_family_trailer_is_written_only_for_names_in_its_table():
    lines = tr.lines({"targets": {"gfx942": "builds", FORGED_NAME: "builds", "sm_90a": "fails: x"}})
    assert lines == [("Kgit-Target-gfx942", "builds"), ("Kgit-Target-sm-90a", "fails: x")]
    assert tr.family_of("Kgit-Target-evil") is None and tr.family_of("Kgit-Target-sm-90a")[1] == "sm_90a"


def test_a_result_from_outside_is_cleaned_where_kgit_reads_it():
    result = _result("ok", geomean_us=1.0, targets=HOSTILE_TARGETS, confine={"applied": ["a\nb", 3], "missing": "x"})
    assert FORGED_NAME not in result.targets["results"] and result.targets["reported_by"] == "candidate"
    assert result.confine == {"applied": ["a b", "3"], "missing": []}
    values = tr.target_values(result)  # what the commit writes: no name outside the table
    assert set(values["targets"]) <= set(tr.BY_ATTR["targets"].names)
