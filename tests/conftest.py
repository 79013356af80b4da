"""Shared fixtures: throwaway kernel repositories built once per session and copied per test."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

# Tests fork judges from this process (tests/cheats in_fork). A fork taken while torch's
# OpenMP pool has worker threads can deadlock in the child (a forked judge waited on a
# libgomp lock when several test files ran in one process): one thread, no pool.
torch.set_num_threads(1)

from kgit import config as config_mod  # noqa: E402 - after the thread setting above
from kgit import workflow  # noqa: E402

# Short timing so the CPU interpreter runs stay quick; everything else is the default.
FAST_TIMING = {"target_rse": 0.5, "max_time_s": 0.05, "min_reps": 2, "warmup": 0}


def logged(fields: list) -> list:
    """The attempts of one `git log -z` record given as its fields and, last, its notes text
    (which kgit reads apart from the log, by sha)."""
    from kgit.archive.repo import parse_log

    *record, notes = fields
    return parse_log("\x1f".join(record) + "\0", notes={record[0]: notes})


def fast_config_text(targets=(), **sections) -> str:
    """The commented default .kgit.yaml with fast timing and any overrides, as YAML text.

    No build targets unless asked for (`targets=None`: the problem's own): the two
    cross-compiles cost a CPU evaluation of vector_add 0.6 s of 4, and the tests that are
    about the target facts ask for them.
    """
    import yaml

    data = yaml.safe_load(config_mod.default_text())
    data["timing"] = dict(FAST_TIMING)
    data["targets"] = None if targets is None else list(targets)
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return yaml.safe_dump(data, sort_keys=False)


def git(cwd, *args) -> str:
    """`git ARGS` in `cwd`; its output. The one git helper of the tests (kgit's own code runs
    git only through kgit/archive/)."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def rev(cwd, name: str) -> str:
    """The object name `name` resolves to in the repository at `cwd`."""
    return git(cwd, "rev-parse", name).strip()


def make_git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test Person")
    git(path, "config", "user.email", "test@example.com")
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (scripts/test.sh): one worker per core, but none when GPU tests may be selected.

    GPU tests share one device and time kernels on it; side by side they would disturb each
    other's figures and memory, so a marker expression that may select them runs serially.
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own rule reads it
    if "not gpu" not in (config.option.markexpr or ""):
        return 0
    return len(os.sched_getaffinity(0))


def init_with_one_attempt(root: Path, monkeypatch, baseline_result, attempt_result) -> tuple[str, str]:
    """(baseline sha, attempt sha): `kgit init` of vector_add in `root` with the evaluator faked
    to answer `baseline_result`, then one attempt committed with `attempt_result`, which says it
    ran where init measured (this host's local evaluator) unless it names a `worker` itself."""
    from kgit.evaluation.backends import this_host

    monkeypatch.setattr(workflow.child, "evaluate_tree", lambda *a, **k: baseline_result)
    make_git_repo(root)
    baseline = workflow.init(root, "vector_add", config_text=fast_config_text()).sha
    repo, config = workflow.load(root)
    branch, base = workflow.start(repo, "a change", checkout=False)
    tree = git(root, "rev-parse", f"{base}^{{tree}}").strip()
    with repo.lock("test"):
        attempt = workflow.commit_attempt(repo, config, branch=branch, tree=tree, parent=base,
                                             result={"worker": this_host(), **attempt_result}, author=None,
                                             model="human").sha
    return baseline, attempt


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch, tmp_path_factory):
    """No test sees the developer's git config or writes caches into the real home."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    for key in list(os.environ):
        if key.startswith(("GIT_AUTHOR", "GIT_COMMITTER")):
            monkeypatch.delenv(key)


def _template(tmp_path_factory, problem: str, targets=()) -> Path:
    root = tmp_path_factory.getbasetemp() / f"template-{problem}"
    if not root.exists():
        # Session fixtures run outside the autouse environment; set identity locally.
        make_git_repo(root)
        workflow.init(root, problem, config_text=fast_config_text(targets=targets))
    return root


@pytest.fixture(scope="session")
def vector_add_template(tmp_path_factory):
    return _template(tmp_path_factory, "vector_add")


@pytest.fixture(scope="session")
def softmax_template(tmp_path_factory):
    # With the problem's build targets: the tests of the target facts use this repository.
    return _template(tmp_path_factory, "softmax", targets=None)


@pytest.fixture
def kernel_repo(vector_add_template, tmp_path) -> Path:
    """A fresh copy of an initialized vector_add kernel repository (baseline committed; no build targets)."""
    dest = tmp_path / "repo"
    shutil.copytree(vector_add_template, dest, symlinks=True)
    return dest


@pytest.fixture
def softmax_repo(softmax_template, tmp_path) -> Path:
    dest = tmp_path / "softmax-repo"
    shutil.copytree(softmax_template, dest, symlinks=True)
    return dest


@pytest.fixture
def run_kgit(monkeypatch):
    """Run the CLI in a folder; returns click's Result (exit_code, stdout, stderr)."""
    from kgit.cli import cli

    def run(cwd, *args):
        monkeypatch.chdir(cwd)
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    return run
