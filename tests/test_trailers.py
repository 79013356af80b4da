import json
import subprocess

from conftest import git, init_with_one_attempt, make_git_repo

from kgit.archive import trailers as tr
from kgit.archive.repo import parse_log
from kgit_harness import result as result_mod


def _commit(repo, message):
    env_tree = subprocess.run(["git", "write-tree"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    return subprocess.run(["git", "commit-tree", env_tree, "-F", "-"], cwd=repo, input=message,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_trailers_round_trip_through_git(tmp_path):
    repo = make_git_repo(tmp_path / "r")
    msg = tr.Message(
        "slug: incorrect",
        ["Hypothesis: try a thing", "Error excerpt:\n--- a/kernel.py\n+++ b/kernel.py\nKey: looks like a trailer"],
        [("Kgit-Experiment", 7), ("Kgit-Hypothesis", "multi\nline\thypothesis with ünïcödé"),
         ("Kgit-Time-us", "m=1,n=2 3.5"), ("Kgit-Time-us", "m=4,n=5 6.25")],
    ).render(ok=False)
    sha = _commit(repo, msg)
    # git's own parser finds the block despite the quoted diff ("---" lines) in the body.
    parsed = subprocess.run(["git", "log", "-1", "--format=%(trailers:only,unfold)", sha], cwd=repo,
                            capture_output=True, text=True, check=True).stdout
    found = tr.parse(parsed)
    assert found["Kgit-Experiment"] == ["7"]
    assert found["Kgit-Hypothesis"] == ["multi line hypothesis with ünïcödé"]
    assert found["Kgit-Time-us"] == ["m=1,n=2 3.5", "m=4,n=5 6.25"]
    assert "Key" not in found


def test_failed_messages_never_contain_speedup():
    msg = tr.Message("x: incorrect", ["Speedup was SPEEDUP and speedup"], [("Kgit-Hypothesis", "get a speedup")])
    text = msg.render(ok=False)
    assert "speedup" not in text.lower()
    ok_text = tr.Message("x: speedup 1.10x", [], [("Kgit-Hypothesis", "get a speedup")]).render(ok=True)
    assert "get a speedup" in ok_text


def test_subject_forms():
    assert tr.subject("a-b", "ok", 1.234, 12.345) == "a-b: speedup 1.23x vs base (geomean 12.3 us)"
    assert tr.subject("a-b", "compile-error", None, None) == "a-b: compile error"
    assert tr.subject("a-b", "rejected", None, None, "forbidden import: os") == "a-b: rejected (forbidden import: os)"
    assert "speedup" not in tr.subject("speedup-now", "timeout", None, None)


def test_slugify():
    assert tr.slugify("Use BLOCK_SIZE=2048, and 8 warps!") == "block-size-2048-8-warps"
    # Stop words go, content words stay (the campaign's "k-major-split-k-that" lost "builds gfx942").
    assert tr.slugify("K-major split-K that builds on gfx942") == "k-major-split-k-builds-gfx942"
    # Short: at most 40 characters, never cut inside a word.
    long = tr.slugify("Persistent grid-stride kernel with a TMA descriptor pipeline and warp specialization")
    assert long == "persistent-grid-stride-kernel-tma" and len(long) <= 40
    assert tr.slugify("Of the") == "of-the"  # nothing but stop words: keep them rather than nothing
    assert tr.slugify("   ") == "experiment"
    assert tr.slugify("ñ") == "experiment"


def test_parse_log_skips_non_kgit_commits():
    user = "\x1f".join(["a" * 40, "", "t" * 40, "n", "e", "1", "fix\n\nSigned-off-by: x\n"])
    quoted = "\x1f".join(["c" * 40, "", "t" * 40, "n", "e", "1", "s\n\nKgit-Experiment: 1 in a quote\n\nplain end\n"])
    # A unit separator inside a message cannot shift the fields: the message comes last.
    kgit = "\x1f".join(["b" * 40, "a" * 40, "t" * 40, "n", "e", "2",
                        "s: speedup\n\nbody \x1f odd\n\nKgit-Experiment: 3\nKgit-Attempt: 2\nKgit-Time-us: k=1 2.5\n"])
    attempts = parse_log("\0".join([user, quoted, kgit]) + "\0", notes={"b" * 40: '{"device":"x","geomean_us":1}\n'})
    assert [a.sha for a in attempts] == ["b" * 40]
    assert attempts[0].experiment == 3 and attempts[0].attempt == 2 and attempts[0].subject == "s: speedup"
    assert attempts[0].times == {"k=1": 2.5}
    assert list(attempts[0].notes.documents) == [{"device": "x", "geomean_us": 1}]


# -- the build-target family: written by both commit sites, read back by `kgit log --json` ------
TARGET_FACTS = {"triton": "3.9.0", "results": {
    "gfx942": {"builds": True, "error": None, "kernels": [{"kernel": "_k", "vgpr": 128, "agpr": 0, "lds_bytes": 65536,
                                                          "scratch_bytes": 0, "vgpr_spill": 0, "occupancy": 2}]},
    "sm_90a": {"builds": False, "error": "RuntimeError: boom", "kernels": []}}}
TARGET_LINES = {"gfx942": "builds; vgpr 128, lds 64 KiB, spill 0, occupancy 2", "sm_90a": "fails: RuntimeError: boom"}


def _judged_with_targets(geomean_us: float) -> dict:
    return result_mod.new("ok", device="Test GPU", timing="events", harness="test harness", geomean_us=geomean_us,
                          shapes=[{"key": "n=1", "mean_us": geomean_us}], targets=TARGET_FACTS, eval_s=0.5)


def test_init_and_every_attempt_carry_target_trailers_that_log_json_reads_back(tmp_path, monkeypatch, run_kgit):
    from kgit.archive.repo import Repo

    root = tmp_path / "k"
    baseline, attempt = init_with_one_attempt(root, monkeypatch, _judged_with_targets(10.0), _judged_with_targets(8.0))
    for sha in (baseline, attempt):
        body = git(root, "show", "-s", "--format=%B", sha)
        assert "Kgit-Target-gfx942: builds; vgpr 128" in body and "Kgit-Target-sm-90a: fails: RuntimeError" in body
        assert "Kgit-Targets-Compiler: triton 3.9.0, candidate-reported" in body
    logged = {a["sha"]: a for a in json.loads(run_kgit(root, "log", "--json").output)}
    assert logged[baseline]["targets"] == logged[attempt]["targets"] == TARGET_LINES
    assert {a.sha: a.targets for a in Repo(root).read()} == {baseline: TARGET_LINES, attempt: TARGET_LINES}


def test_a_family_trailer_is_read_by_name_and_an_odd_key_is_not():
    block = "Kgit-Experiment: 1\nKgit-Target-sm-90a: builds\nKgit-Target-gfx942: fails: x\nKgit-Target-a_b: no\n" \
            "Kgit-Target-sm-90a:  builds; regs 96 \nKgit-Targets-Compiler: triton 3.9.0"
    a = parse_log("\x1f".join(["b" * 40, "", "t" * 40, "n", "e", "2", f"s\n\n{block}\n"]))[0]
    assert a.targets == {"sm_90a": "builds; regs 96", "gfx942": "fails: x"}  # the last of a repeated key wins
    assert a.targets == {tr.family_of(k)[1]: v[-1] for k, v in a.trailers.items() if tr.family_of(k)}
    assert a.targets_compiler == "triton 3.9.0"
    assert tr.lines({"targets": {"sm_90a": "builds"}}) == [("Kgit-Target-sm-90a", "builds")]
