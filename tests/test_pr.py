"""kgit pr against a local bare remote, with a fake `gh` on PATH that records its
arguments, and without gh (the body and the exact command are printed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import review_archive as ra
from conftest import git, rev

from kgit.archive.repo import Repo

FAKE_GH = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
log = os.environ["FAKE_GH_LOG"]
record = {{"args": args, "cwd": os.getcwd()}}
if "--body-file" in args:
    record["body"] = open(args[args.index("--body-file") + 1]).read()
with open(log, "a") as f:
    f.write(json.dumps(record) + "\\n")
if args[:2] == ["auth", "status"]:
    sys.exit(int(os.environ.get("FAKE_GH_AUTH", "0")))
if args[:2] == ["pr", "create"]:
    if os.environ.get("FAKE_GH_FAIL"):
        print("GraphQL: No commits between main and the head branch", file=sys.stderr)
        sys.exit(1)
    print("https://github.example/kernels/pull/7")
"""



@pytest.fixture(scope="module")
def campaign_template(vector_add_template, tmp_path_factory):
    root = tmp_path_factory.mktemp("pr-template") / "repo"
    shas = ra.copy_built(vector_add_template, root)
    return root, shas


@pytest.fixture
def setup(campaign_template, tmp_path, monkeypatch):
    """A copy of the campaign with a bare `origin` holding main, and a bin folder for PATH."""
    template, shas = campaign_template
    root = tmp_path / "repo"
    shutil.copytree(template, root, symlinks=True)
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(root, "remote", "add", "origin", str(remote))
    git(root, "push", "-q", "origin", "main")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # PATH holds git and, per test, gh: nothing else, so a gh installed here is never found.
    os.symlink(shutil.which("git"), bin_dir / "git")
    monkeypatch.setenv("PATH", str(bin_dir))
    log = tmp_path / "gh.log"
    monkeypatch.setenv("FAKE_GH_LOG", str(log))
    return root, remote, bin_dir, log, shas


def install_gh(bin_dir):
    path = bin_dir / "gh"
    path.write_text(FAKE_GH)
    path.chmod(0o755)


def gh_calls(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_pr_pushes_squashed_commits_and_opens_the_pull_request(setup, run_kgit):
    root, remote, bin_dir, log, shas = setup
    install_gh(bin_dir)
    archive_before = len(Repo(root).read())
    status_before = git(root, "status", "--porcelain")
    result = run_kgit(root, "pr", "2")
    assert result.exit_code == 0, result.output + result.stderr
    assert "https://github.example/kernels/pull/7" in result.output

    branch = "kgit-review/2-vectorize-loads-4-elements-per-thread"
    tip = rev(remote, f"refs/heads/{branch}")
    # Experiment 2 builds on experiment 1, which main lacks: one commit per experiment,
    # trees equal to the attempts', on top of the baseline; no failed attempt in between.
    assert rev(remote, f"{tip}^{{tree}}") == rev(root, f"{shas['e2.2']}^{{tree}}")
    assert rev(remote, f"{tip}~1^{{tree}}") == rev(root, f"{shas['e1.2']}^{{tree}}")
    assert rev(remote, f"{tip}~2") == shas["baseline"]
    messages = git(remote, "log", "--format=%B", f"{shas['baseline']}..{tip}")
    assert "speedup" not in messages  # `git log --all --grep speedup` still lists only attempts
    assert f"Kgit-Squash-Of: {shas['e2.2']}" in messages

    calls = gh_calls(log)
    assert [c["args"][:2] for c in calls] == [["auth", "status"], ["pr", "create"]]
    args = calls[1]["args"]
    assert args[args.index("--base") + 1] == "main"
    assert args[args.index("--head") + 1] == branch
    assert args[args.index("--title") + 1] == "kgit #2: vectorize loads with 4 elements per thread (1.60x vs baseline)"
    assert calls[1]["cwd"] == str(root)
    body = calls[1]["body"]
    for part in ("## Hypothesis", "Plan: vectorize loads", "## Results on NVIDIA H200", "kgit-test harness abc123",
                 "## Stacked experiments", "## Attempts", "## Model and cost", "openai/gpt-5", "$0.050",
                 f"kgit eval {tip}", f"kgit show {shas['e2.2']}"):
        assert part in body, part
    # Before/after per shape: baseline 160 us, PR base (experiment 1) 128 us, this PR 100 us.
    row = next(line for line in body.splitlines() if line.startswith("| size=65536"))
    assert [c.strip() for c in row.split("|")[2:7]] == ["160", "128", "100", "1.28x", "1.60x"]
    # The failed attempt and why: the last line of its traceback.
    failed = next(line for line in body.splitlines() if shas["e2.1"][:10] in line)
    assert "compile-error" in failed and "triton.CompilationError: bad cast" in failed

    assert len(Repo(root).read()) == archive_before  # the archive never reads review branches
    assert git(root, "status", "--porcelain") == status_before


def test_pr_on_a_base_branch_that_already_holds_the_parent_experiment(setup, run_kgit):
    root, remote, bin_dir, log, shas = setup
    install_gh(bin_dir)
    git(root, "push", "-q", "origin", f"{shas['e1.2']}:refs/heads/main")
    result = run_kgit(root, "pr", "kgit/2-vectorize-loads-4-elements-per-thread", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["opened"] and len(doc["stack"]) == 1
    assert rev(remote, f"{doc['sha']}^") == shas["e1.2"]
    assert "## Stacked experiments" not in doc["body"]


def test_pr_after_the_parent_experiment_was_squash_merged(setup, run_kgit):
    # What a forge's squash merge of `kgit pr 1` leaves on main: a new commit with the
    # pull request's tree whose message quotes the squashed commits' messages.
    root, remote, bin_dir, log, shas = setup
    tree = rev(root, f"{shas['e1.2']}^{{tree}}")
    message = f"Use BLOCK_SIZE 2048 (#12)\n\n* kgit #1: use BLOCK_SIZE 2048\n\nKgit-Squash-Of: {shas['e1.2']}\n"
    merged = subprocess.run(["git", "commit-tree", tree, "-p", shas["baseline"], "-F", "-"], cwd=root, input=message,
                            capture_output=True, text=True, check=True).stdout.strip()
    git(root, "push", "-q", "origin", f"{merged}:refs/heads/main")
    result = run_kgit(root, "pr", "2", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert len(doc["stack"]) == 1
    assert rev(remote, f"{doc['sha']}^") == merged


def test_pr_without_gh_prints_the_body_and_the_command(setup, run_kgit):
    root, remote, bin_dir, log, shas = setup
    result = run_kgit(root, "pr", "1", "--remote", "origin", "--base-branch", "main")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "## Hypothesis" in out and "use BLOCK_SIZE 2048 for wider tiles" in out
    assert "gh is not installed" in out
    command = out.strip().splitlines()[-1]
    assert command.startswith("gh pr create --base main --head kgit-review/1-block-size-2048-wider-tiles ")
    body_file = root / ".git" / "kgit" / "pr" / "1.md"
    assert f"--body-file {body_file}" in command
    assert "Mismatch at index 17" in body_file.read_text()  # experiment 1's failed first attempt
    tip = rev(remote, "refs/heads/kgit-review/1-block-size-2048-wider-tiles")
    assert rev(remote, f"{tip}^") == shas["baseline"]
    assert not log.exists()


def test_pr_with_gh_logged_out_leaves_the_command_to_the_user(setup, run_kgit, monkeypatch):
    root, remote, bin_dir, log, shas = setup
    install_gh(bin_dir)
    monkeypatch.setenv("FAKE_GH_AUTH", "1")
    result = run_kgit(root, "pr", "1")
    assert result.exit_code == 0
    assert "gh is not logged in (`gh auth login`)" in result.output
    assert [c["args"][:2] for c in gh_calls(log)] == [["auth", "status"]]


def test_pr_when_gh_fails_says_the_branch_is_pushed_and_how_to_retry(setup, run_kgit, monkeypatch):
    root, remote, bin_dir, log, shas = setup
    install_gh(bin_dir)
    monkeypatch.setenv("FAKE_GH_FAIL", "1")
    result = run_kgit(root, "pr", "1")
    assert result.exit_code == 1
    assert "No commits between" in result.stderr and "gh pr create --base main" in result.stderr


def test_pr_of_an_experiment_the_branch_already_holds(setup, run_kgit):
    root, remote, bin_dir, log, shas = setup
    git(root, "push", "-q", "origin", f"{shas['e2.2']}:refs/heads/main")
    result = run_kgit(root, "pr", "2")
    assert result.exit_code == 1
    assert "origin/main already holds experiment 2's best attempt" in result.stderr
    assert "kgit-review" not in git(remote, "branch", "--list")


@pytest.mark.parametrize("args, message", [
    (["pr", "3"], "experiment 3 has no correct attempt"),
    (["pr", "9"], "there is no experiment '9'"),
    (["pr", "soon"], "is not an experiment"),
    (["pr", "1", "--remote", "upstream"], "no git remote named 'upstream'"),
    (["pr", "1", "--base-branch", "release"], "origin has no branch release"),
])
def test_pr_refusals_say_what_to_do(setup, run_kgit, args, message):
    root, *_ = setup
    result = run_kgit(root, *args)
    assert result.exit_code == 1
    assert message in result.stderr


def _geomean_row(body: str) -> list[str]:
    row = next(line for line in body.splitlines() if line.startswith("| **geomean**"))
    return [c.strip() for c in row.split("|")[2:7]]


def test_pr_figures_use_one_baseline_measurement_and_say_which(setup, run_kgit):
    # The baseline is re-measured after the campaign (slower this time): the title, the
    # results and the attempts must all use that one measurement, not the trailers'.
    root, remote, bin_dir, log, shas = setup
    repo = Repo(root)
    times = {k: v * 1.2 for k, v in ra.BASELINE_US.items()}
    repo.add_note(shas["baseline"], {"device": ra.DEVICE, "harness": ra.HARNESS, "timing": "events", "status": "ok",
                                     "geomean_us": (times["size=4096"] * times["size=65536"]) ** 0.5,
                                     "times": times, "tag": "remeasure", "when": 2_000_000_000})
    doc = json.loads(run_kgit(root, "pr", "1", "--json").output)
    assert doc["title"].endswith("(1.50x vs baseline)")  # 1.25 * 1.2, not the trailer's 1.25
    assert _geomean_row(doc["body"])[4] == "1.50x"
    # Experiment 1's PR base is the baseline: its attempts table uses the same figure.
    attempt = next(line for line in doc["body"].splitlines() if shas["e1.2"][:10] in line)
    assert "1.50x" in attempt
    assert f"the baseline `{shas['baseline'][:10]}` as re-measured in refs/notes/kgit (remeasure" in doc["body"]

    doc = json.loads(run_kgit(root, "pr", "2", "--json").output)
    assert doc["title"].endswith("(1.92x vs baseline)") and _geomean_row(doc["body"])[3:] == ["1.28x", "1.92x"]
    attempt = next(line for line in doc["body"].splitlines() if shas["e2.2"][:10] in line)
    assert "1.28x" in attempt and f"the PR base `{shas['e1.2'][:10]}` as measured by its own commit" in doc["body"]


def test_pr_targets_the_remotes_default_branch_when_it_lacks_the_local_one(setup, run_kgit):
    # A local `main` against a remote whose only (and default) branch is `trunk`.
    root, remote, bin_dir, log, shas = setup
    install_gh(bin_dir)
    git(root, "push", "-q", "origin", "main:refs/heads/trunk")
    git(remote, "symbolic-ref", "HEAD", "refs/heads/trunk")
    git(root, "push", "-q", "origin", "--delete", "main")
    result = run_kgit(root, "pr", "1")
    assert result.exit_code == 0, result.output
    assert "origin has no branch main, so the pull request targets origin's default branch trunk" in result.stderr
    args = gh_calls(log)[-1]["args"]
    assert args[args.index("--base") + 1] == "trunk"
    # Named explicitly, a missing branch is still refused.
    result = run_kgit(root, "pr", "1", "--base-branch", "main")
    assert result.exit_code == 1 and "origin has no branch main" in result.stderr
