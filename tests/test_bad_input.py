"""Bad input of every kind ends in one line that names the fix, the right exit code,
and no traceback.

The wrong-type cases are generated from the Config dataclasses, so a key added later
is covered without touching this file.
"""

from __future__ import annotations

import dataclasses
import subprocess
import types
import typing

import pytest
import yaml
from conftest import make_git_repo

from kgit import config as config_mod
from kgit import workflow
from kgit.archive import trailers as tr
from kgit.archive.repo import Repo
from kgit_harness import result as result_mod

# A value of the wrong type for each annotation kgit uses.
WRONG = {str: [1, 2], int: "many", float: "fast", bool: 3, list: 5}


def _wrong_for(annotation):
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if {str, list} <= set(args):
            return {"a": 1}  # neither a string nor a list
        return _wrong_for(args[0])
    return WRONG[typing.get_origin(annotation) or annotation]


def _wrong_type_cases():
    cases = []
    for section in dataclasses.fields(config_mod.Config):
        cls = typing.get_type_hints(config_mod.Config)[section.name]
        if not dataclasses.is_dataclass(cls):
            cases.append((section.name, None, _wrong_for(cls)))
            continue
        for key, annotation in typing.get_type_hints(cls).items():
            cases.append((section.name, key, _wrong_for(annotation)))
    return cases


# Right type, wrong value: each validated rule once.
WRONG_VALUES = [
    ("evaluator", "backend", "cloud"), ("evaluator", "devices", "some"), ("evaluator", "devices", [-1]),
    ("evaluator", "timeout_s", 0), ("evaluator", "max_output_bytes", -5), ("evaluator", "sandbox", "maybe"),
    ("evaluator", "max_memory_gb", 0), ("evaluator", "scratch_gb", 0), ("evaluator", "max_processes", 0),
    ("timing", "target_rse", 0), ("timing", "max_time_s", -1),
    ("timing", "min_reps", 0), ("timing", "warmup", -1), ("llm", "model", " "), ("llm", "timeout_s", 0),
    ("llm", "retries", -1), ("evolve", "iterations", 0), ("evolve", "pick", 0), ("evolve", "attempts", 0),
    ("evolve", "jobs", 0), ("evolve", "max_cost_usd", 0), ("evolve", "max_wall_s", -3),
    ("evolve", "knowledge", [1]), ("evolve", "archive_tokens", 0),
]


@pytest.fixture(scope="module")
def config_repo(tmp_path_factory):
    """A git repository that only needs a .kgit.yaml: config errors come before anything else."""
    return make_git_repo(tmp_path_factory.mktemp("config-repo"))


def _one_line_error(result, code=1) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    # Progress lines ("evaluating ...") may come first; the error is one line of its own.
    errors = [line for line in result.stderr.splitlines() if line.startswith("kgit: ")]
    assert len(errors) == 1 and errors[0] == result.stderr.rstrip().splitlines()[-1], result.stderr
    return errors[0]


@pytest.mark.parametrize("section, key, value", _wrong_type_cases() + WRONG_VALUES,
                         ids=lambda v: str(v) if not isinstance(v, (list, dict)) else type(v).__name__)
def test_every_config_key_with_a_wrong_value(config_repo, run_kgit, section, key, value):
    data = {section: value} if key is None else {section: {key: value}}
    (config_repo / ".kgit.yaml").write_text(yaml.safe_dump(data))
    message = _one_line_error(run_kgit(config_repo, "log"))
    dotted = section if key is None else f"{section}.{key}"
    assert dotted in message
    assert ".kgit.yaml" in message  # which file to fix


def test_the_cases_cover_every_key():
    keys = {(s, k) for s, k, _ in _wrong_type_cases()}
    for section in ("evaluator", "timing", "llm", "evolve"):
        for key in vars(getattr(config_mod.Config(), section)):
            assert (section, key) in keys
    validated = {(s, k) for s, k, _ in WRONG_VALUES}
    assert ("evaluator", "sandbox") in validated and ("evaluator", "max_memory_gb") in validated


def test_not_a_git_repository(tmp_path, run_kgit):
    for args in (["log"], ["record"], ["try", "x"], ["evolve"]):
        message = _one_line_error(run_kgit(tmp_path, *args))
        assert "not inside a git repository" in message and "kgit init" in message


def test_git_repository_without_kgit(tmp_path, run_kgit):
    make_git_repo(tmp_path / "plain")
    message = _one_line_error(run_kgit(tmp_path / "plain", "log"))
    assert "no .kgit.yaml" in message and "kgit init --problem" in message


@pytest.mark.slow
def test_missing_problem_files(kernel_repo, run_kgit):
    assert run_kgit(kernel_repo, "try", "anything").exit_code == 0
    task = kernel_repo / "problem" / "task.yml"
    saved = task.read_text()
    task.unlink()
    message = _one_line_error(run_kgit(kernel_repo, "record"))
    assert "task.yml" in message and "missing" in message
    task.write_text(saved)
    (kernel_repo / "problem" / "reference.py").unlink()
    message = _one_line_error(run_kgit(kernel_repo, "record"))
    assert "reference.py" in message and "git checkout kgit/baseline" in message
    # Nothing was committed as the kernel's failure.
    assert subprocess.run(["git", "rev-list", "--count", "HEAD", "^kgit/baseline"], cwd=kernel_repo,
                          capture_output=True, text=True).stdout.strip() == "0"


def test_record_outside_an_experiment_branch(kernel_repo, run_kgit):
    message = _one_line_error(run_kgit(kernel_repo, "record"))
    assert "experiment branch" in message and "kgit try" in message


def test_dirty_tree_before_try(kernel_repo, run_kgit):
    (kernel_repo / "kernel.py").write_text("# changed\n")
    message = _one_line_error(run_kgit(kernel_repo, "try", "something"))
    assert "uncommitted changes" in message and "git stash" in message


@pytest.mark.parametrize("args", [["show", "no-such-rev"], ["eval", "no-such-rev"], ["try", "x", "--base", "nope"]])
def test_unknown_revisions(kernel_repo, run_kgit, args):
    message = _one_line_error(run_kgit(kernel_repo, *args))
    assert "unknown revision" in message and "kgit log" in message


def test_usage_errors_exit_2(kernel_repo, run_kgit):
    result = run_kgit(kernel_repo, "evolve", "-n", "0")
    assert result.exit_code == 2
    result = run_kgit(kernel_repo, "no-such-command")
    assert result.exit_code == 2


HYPOTHESES = [
    "используй общую память 共享内存 ✓ — ñandú",
    "tab\tand\nnewline\r\nand \x1b[31m escape and a long dash —",
    "speedup claims are scrubbed from failed attempts",
    "word " * 2000,  # longer than a trailer line may be
    "Kgit-Status: ok\nKgit-Geomean-us: 0.001",  # a hypothesis posing as trailers
]


@pytest.mark.parametrize("hypothesis", HYPOTHESES, ids=["unicode", "control", "speedup", "long", "fake-trailers"])
def test_hypotheses_round_trip_through_trailers(kernel_repo, hypothesis):
    repo = Repo(kernel_repo)
    branch, base = workflow.start(repo, hypothesis, checkout=False)
    config = config_mod.load(kernel_repo)
    tree = repo.git("rev-parse", f"{base}^{{tree}}").strip()
    with repo.lock("test"):
        outcome = workflow.commit_attempt(repo, config, branch=branch, tree=tree, parent=base,
                                    result=result_mod.new("incorrect", error="wrong\n--- at shape 3"),
                                    author=None, model="human")
    attempt = next(a for a in repo.read() if a.sha == outcome.sha)
    assert attempt.hypothesis == tr.scrub(tr.one_line(hypothesis))
    assert attempt.status == "incorrect"  # the fake trailers did not override the real ones
    assert attempt.geomean_us is None
    assert len(attempt.hypothesis) <= 2000
    assert "speedup" not in repo.git("show", "-s", "--format=%B", outcome.sha)
    interpreted = subprocess.run(["git", "interpret-trailers", "--parse"], cwd=kernel_repo, capture_output=True,
                                 text=True, input=repo.git("show", "-s", "--format=%B", outcome.sha)).stdout
    assert [line for line in interpreted.splitlines() if line.startswith("Kgit-Status:")] == ["Kgit-Status: incorrect"]


def test_bare_off_in_yaml_means_sandbox_off():
    """YAML 1.1 reads `off` as false; the user meant the word."""
    assert config_mod.parse("evaluator:\n  sandbox: off\n").evaluator.sandbox == "off"
    with pytest.raises(config_mod.ConfigError, match="evaluator.sandbox must be one of auto, strict, off"):
        config_mod.parse("evaluator:\n  sandbox: on\n")
