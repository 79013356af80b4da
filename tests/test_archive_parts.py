"""The archive's small parts: experiment refs, the trailer schema, exit codes, the private
index and the git command wrapper."""

from __future__ import annotations

import os
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgit.archive import trailers as tr
from kgit.archive.attempt import Attempt, parse_log
from kgit.archive.refs import BadRefName, ExperimentRef
from kgit.archive.repo import Repo
from kgit.errors import EvaluationFailed, ExitCode, GitError, KgitError, UsageError
from kgit_harness.result import Result


# -- refs ---------------------------------------------------------------------------------
def test_experiment_refs_parse_and_print():
    ref = ExperimentRef.parse("kgit/12-larger-blocks")
    assert (ref.number, ref.slug) == (12, "larger-blocks")
    assert str(ref) == ref.branch == "kgit/12-larger-blocks" and ref.ref == "refs/heads/kgit/12-larger-blocks"
    assert ExperimentRef(3, "x") == ExperimentRef.parse("kgit/3-x")


@pytest.mark.parametrize("name", ["kgit/baseline", "kgit/x-slug", "kgit/3-Upper", "kgit/3-", "main",
                                  "refs/heads/kgit/3-x", "kgit/3-a b", "kgit-review/3-x", ""])
def test_bad_branch_names_are_refused(name):
    assert ExperimentRef.match(name) is None
    with pytest.raises(BadRefName, match="kgit/<N>-<slug>"):
        ExperimentRef.parse(name)


@pytest.mark.parametrize("number, slug", [(-1, "x"), (True, "x"), ("3", "x"), (3, "A"), (3, "a/b"), (3, "")])
def test_bad_parts_are_refused(number, slug):
    with pytest.raises(BadRefName):
        ExperimentRef(number, slug)


# -- the trailer schema -------------------------------------------------------------------------
RESULT = {"status": "ok", "device": "NVIDIA H200", "timing": "events", "harness": "h1", "ranking": "mean",
          "geomean_us": 12.3456, "eval_s": 4.25, "reason": None,
          "shapes": [{"key": "n=1", "mean_us": 10.0}, {"key": "n=2", "mean_us": 15.24}]}


def _attempt(trailers) -> Attempt:
    message = tr.Message("s: subject", ["body"], trailers).render(ok=True)
    (attempt,) = parse_log("\x1f".join(["a" * 40, "", "t", "n", "e", "1", message]) + "\0")
    return attempt


def test_written_trailers_read_back_as_attributes():
    values = {"experiment": 4, "attempt": 2, "branch": "kgit/4-x", "base": "b" * 40, "hypothesis": "h",
              **tr.from_result(Result(**RESULT)), "speedup": 1.23456, "model": "m", "cost": 0.5, "tokens": 120.0}
    lines = tr.lines(values)
    assert lines[:3] == [("Kgit-Experiment", "4"), ("Kgit-Attempt", "2"), ("Kgit-Branch", "kgit/4-x")]
    assert ("Kgit-Time-us", "n=2 15.240") in lines and ("Kgit-Tokens", "120") in lines
    assert ("Kgit-Speedup", "1.235") in lines and ("Kgit-Eval-s", "4.2") in lines
    assert not any(key == "Kgit-Reason" for key, _ in lines)  # None leaves a trailer out
    a = _attempt(lines)
    assert (a.experiment, a.attempt, a.branch, a.status, a.device) == (4, 2, "kgit/4-x", "ok", "NVIDIA H200")
    assert a.geomean_us == 12.346 and a.times == {"n=1": 10.0, "n=2": 15.24} and a.tokens == 120.0
    assert a.reason is None and a.reference is None and a.speedup_baseline is None
    # Each attribute agrees with the raw trailers, the reader's other path.
    assert a.trailers["Kgit-Model"] == ["m"] and a.trailers["Kgit-Cost-USD"][-1] == "0.500000"


def test_a_result_survives_the_trip_through_trailers():
    a = _attempt(tr.lines({"experiment": 1, "attempt": 1, **tr.from_result(Result(**RESULT))}))
    back = tr.to_result(a)
    assert back["status"] == "ok" and back["device"] == "NVIDIA H200" and back["geomean_us"] == 12.346
    assert back["shapes"] == [{"key": "n=1", "mean_us": 10.0}, {"key": "n=2", "mean_us": 15.24}]
    failed = _attempt(tr.lines({"experiment": 1, **tr.from_result(Result(status="incorrect", device=""))}))
    assert tr.to_result(failed) == {"status": "incorrect", "reason": None, "device": "unknown", "timing": "none",
                                    "protocol": "", "harness": "", "eval_s": 0.0}


def test_an_unknown_attribute_is_a_programming_error():
    with pytest.raises(ValueError, match="no trailer"):
        tr.lines({"experiment": 1, "target_gfx942": "x"})


def test_every_schema_row_is_an_attempt_attribute():
    a = _attempt([("Kgit-Experiment", 1)])
    for t in tr.SCHEMA:
        assert getattr(a, t.attr) == t.default or t.kind in ("int", "times")
    assert len({t.key for t in tr.SCHEMA}) == len({t.attr for t in tr.SCHEMA}) == len(tr.SCHEMA)


def test_strip_trailers_keeps_the_prose():
    body = "Hypothesis: h\n\nplan text\n\nKgit-Experiment: 1\nKgit-Attempt: 2\n"
    assert tr.strip_trailers(body) == ["Hypothesis: h", "plan text"]
    assert tr.strip_trailers("just prose\n\nmore") == ["just prose", "more"]


# -- exit codes ------------------------------------------------------------------------------------
def test_exit_codes():
    assert [int(c) for c in (ExitCode.DONE, ExitCode.FIX_NEEDED, ExitCode.USAGE, ExitCode.EVALUATION_FAILED)] == [0, 1, 2, 3]
    assert KgitError.exit_code == ExitCode.FIX_NEEDED and UsageError.exit_code == ExitCode.USAGE
    assert EvaluationFailed("x").exit_code == ExitCode.EVALUATION_FAILED and GitError.exit_code == 1


# -- the private index and the git wrapper -------------------------------------------------------
def test_the_private_index_is_named_for_its_owner_and_removed(kernel_repo):
    repo = Repo(kernel_repo)
    with repo.private_index() as env:
        path = env["GIT_INDEX_FILE"]
        repo.git("read-tree", "HEAD", env=env)
        assert os.path.basename(path).startswith(f"index-{os.getpid()}-") and os.path.exists(path)
        with repo.lock("test"):
            repo.clean_worktrees()  # a live owner's index survives the cleanup
        assert os.path.exists(path)
    assert not os.path.exists(path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = repo.state / f"index-{dead.pid}-0123abcd"
    stale.write_text("left by a killed kgit")
    with repo.lock("test"):
        repo.clean_worktrees()
    assert not stale.exists()


def test_files_of_commits_come_from_one_cat_file_process(kernel_repo):
    repo = Repo(kernel_repo)
    text = repo.read_file("HEAD", "kernel.py")
    assert text and "def " in text
    assert repo.read_file("HEAD", "no-such-file.py") is None
    assert repo.read_file("HEAD", "kernel.py") == text  # the process survives a miss


def test_git_failures_quote_git(kernel_repo):
    repo = Repo(kernel_repo)
    with pytest.raises(GitError, match="git rev-parse --verify nope failed: fatal"):
        repo.git("rev-parse", "--verify", "nope")
    assert repo.git("rev-parse", "--verify", "nope", check=False) == ""
    assert repo.resolve("nope") is None and repo.baseline() == repo.rev("kgit/baseline")


# -- typed attributes agree with the raw trailers, whatever a hand-edited commit holds ------------
def _from_raw_trailers(a: Attempt) -> dict:
    """What each attribute must be, computed the slow, obvious way from `Attempt.trailers`."""
    out = {}
    for t in tr.SCHEMA:
        values = a.trailers.get(t.key)
        one = values[-1] if values else None
        if t.kind == "text":
            out[t.attr] = t.default if one is None else one
        elif t.kind == "int":
            try:
                out[t.attr] = int("0" if one is None else one)
            except ValueError:
                out[t.attr] = -1
        elif t.kind == "float":
            try:
                out[t.attr] = float(one)
            except (TypeError, ValueError):
                out[t.attr] = None
        elif t.kind == "family":
            out[t.attr] = {t.decode(k[len(t.key):]): v[-1] for k, v in a.trailers.items()
                           if k.startswith(t.key) and t.decode(k[len(t.key):]) in t.names}  # names in its table
        else:
            times = {}
            for value in values or []:
                key, _, number = value.rpartition(" ")
                try:
                    times[key] = float(number)
                except ValueError:
                    continue
            out[t.attr] = times
    # A key written twice (a shape twice) cannot be kgit's own: the attempt is refused.
    counts = {k: len(v) for k, v in a.trailers.items()}
    shapes = [value.rpartition(" ")[0] for value in a.trailers.get("Kgit-Time-us", [])
              if _is_float(value.rpartition(" ")[2])]
    twice = [k for k, n in counts.items() if n > 1 and (k in tr.BY_KEY and tr.BY_KEY[k].kind != "times"
                                                         or tr.family_of(k))]
    if twice or len(shapes) != len(set(shapes)):
        out.update(status="refused", reason="malformed trailers", geomean_us=None, speedup=None, speedup_baseline=None,
                   times={})
    return out


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


LINE_KEYS = st.sampled_from(["Kgit-Experiment", "Kgit-Attempt", "Kgit-Time-us", "Kgit-Geomean-us", "Kgit-Status",
                             "Kgit-Tokens", " Kgit-Status", "Kgit-Status ", "Kgit-Other",
                             "Kgit-Target-gfx942", "Kgit-Target-sm-90a", "Kgit-Target-"])
LINE_VALUES = st.text(alphabet="ab1.5e-x \t\u00a0\x1c:", max_size=16)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(LINE_KEYS, st.sampled_from([":", ": ", ":  "]), LINE_VALUES), max_size=12))
def test_typed_attributes_agree_with_the_raw_trailers(lines):
    block = "\n".join(f"{k}{sep}{v}" for k, sep, v in lines)
    a = Attempt("s" * 40, [], "", "", "", 0, "", block)
    expected = _from_raw_trailers(a)
    got = {t.attr: getattr(a, t.attr) for t in tr.SCHEMA}
    if got["status"] == "refused":
        assert got["reason"].startswith("malformed trailers: ")
        got["reason"] = "malformed trailers"
    assert repr(sorted(got.items())) == repr(sorted(expected.items()))  # repr: nan equals nan


def test_every_trailer_of_the_schema_is_a_declared_attribute_of_an_attempt():
    from kgit.archive.attempt import _TrailerValue

    declared = {name for name, value in vars(Attempt).items() if isinstance(value, _TrailerValue)}
    assert declared == {t.attr for t in tr.SCHEMA}
    # Each reads its own row: a commit with one trailer set shows it under that name only.
    a = _attempt(tr.lines({"experiment": 3, "attempt": 2, "model": "m", "geomean_us": 1.5, "status": "ok"}))
    assert (a.experiment, a.attempt, a.model, a.geomean_us, a.status) == (3, 2, "m", 1.5, "ok")
    assert a.speedup is None and a.hypothesis == "" and a.targets == {}
