"""kill -9 of kgit's whole process group at bad moments, and two runs at once.

After every kill: `git fsck` is clean, every commit made before the kill is still
reachable, the archive lock is free, no process of the run is left, and the next run
removes the leftover worktrees and scratch folders and goes on.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import fast_config_text, git

from kgit.archive.repo import Repo

KGIT = str(Path(sys.executable).with_name("kgit"))



def _start(repo: Path, *args) -> subprocess.Popen:
    """kgit in a session of its own, as a terminal would run it: killpg takes all of it."""
    return subprocess.Popen([KGIT, *args], cwd=repo, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_group(proc: subprocess.Popen):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def _wait_for(predicate, what: str, within_s: float = 120.0):
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _processes_under(path: Path) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmdline:
                found.append(f"{pid}: {cmdline[:200]}")
    return found


def _reachable(repo) -> set[str]:
    # Refs only: `--all` would also count leftover worktrees' provisional commits.
    return set(git(repo, "rev-list", "--branches", "--tags", "--glob=refs/notes/*", "HEAD").split())


def _evaluating(repo: Path) -> bool:
    return bool(_processes_under(repo / ".git" / "kgit" / "scratch"))


def _attempt_commits(repo) -> set[str]:
    out = git(repo, "rev-list", "--branches=kgit/*", "--not", "kgit/baseline")
    return set(out.split())


def assert_survived(repo: Path, before: set[str]):
    """Everything the issue promises after a kill -9, checked right after it."""
    fsck = subprocess.run(["git", "fsck", "--no-progress"], cwd=repo, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert not [line for line in (fsck.stdout + fsck.stderr).splitlines()
                if line.startswith(("error", "missing", "broken", "bad"))]
    lost = before - _reachable(repo)
    assert not lost, f"commits lost: {lost}"
    deadline = time.monotonic() + 10
    while _processes_under(repo) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_under(repo) == [], "orphans of the killed run"
    with Repo(repo).lock("test"):  # a stale lock would raise LockedError here
        pass


def assert_cleaned(repo: Path):
    state = repo / ".git" / "kgit"
    for sub in ("worktrees", "scratch"):
        assert not list((state / sub).glob("*")) if (state / sub).exists() else True, f"left in {sub}"
    assert not list(state.glob("index-*"))
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.fixture
def experiment(kernel_repo, run_kgit):
    """A kernel repository on a fresh experiment branch with an edited kernel."""
    assert run_kgit(kernel_repo, "try", "double the block size").exit_code == 0
    kernel = kernel_repo / "kernel.py"
    kernel.write_text(kernel.read_text().replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 2048"))
    return kernel_repo


@pytest.mark.parametrize("moment", ["starting", "evaluating"])
@pytest.mark.slow
def test_kill_record(experiment, moment):
    repo = experiment
    before = _reachable(repo)
    status_before = git(repo, "status", "--porcelain")
    # A delay into the moment, the same on every run (seeded by the moment), so that a
    # failure can be repeated.
    delay = random.Random(moment)
    proc = _start(repo, "record")
    if moment == "starting":
        time.sleep(delay.uniform(0.05, 0.6))
    else:
        _wait_for(lambda: _evaluating(repo), "the evaluation to start")
        time.sleep(delay.uniform(0.0, 1.0))
    _kill_group(proc)
    assert_survived(repo, before)
    assert git(repo, "status", "--porcelain") == status_before

    # The next run cleans up and records the attempt.
    again = subprocess.run([KGIT, "record"], cwd=repo, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert_cleaned(repo)
    assert len(_attempt_commits(repo)) == 1


@pytest.mark.slow
def test_kill_evolve_after_its_first_commit(kernel_repo):
    repo = kernel_repo
    proc = _start(repo, "evolve", "-n", "1")
    _wait_for(lambda: _attempt_commits(repo) or proc.poll() is not None, "the first attempt commit")
    committed = _attempt_commits(repo)
    assert committed, proc.communicate()
    before = _reachable(repo)
    _kill_group(proc)
    assert_survived(repo, before)

    # One new attempt shows the run went on; the default three hypotheses only cost evaluations.
    (repo / ".kgit.yaml").write_text(fast_config_text(evolve={"pick": 1}), encoding="utf-8")
    resumed = subprocess.run([KGIT, "evolve", "-n", "1"], cwd=repo, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert committed < _attempt_commits(repo)  # kept, and the run went on
    assert_cleaned(repo)


def test_second_run_refuses_naming_the_first(experiment):
    repo = experiment
    first = _start(repo, "record")
    lock = repo / ".git" / "kgit" / "lock"
    try:
        _wait_for(lambda: f"pid {first.pid}:" in lock.read_text(errors="replace"), "the first run's lock")
        second = subprocess.run([KGIT, "evolve", "-n", "1"], cwd=repo, capture_output=True, text=True)
    finally:
        _kill_group(first)
    assert second.returncode == 1
    message = second.stderr.strip()
    assert len(message.splitlines()) == 1 and "Traceback" not in message
    assert f"pid {first.pid}" in message and "kgit record" in message


def test_clean_keeps_a_live_processs_worktree(kernel_repo):
    """A `kgit eval` that takes no lock must not lose its worktree to another run's cleanup."""
    repo = Repo(kernel_repo)
    with repo.checkout_copy("HEAD") as live:
        dead = repo.state / "worktrees" / "999999999-deadbeef0000"
        dead.mkdir()
        scratch = repo.state / "scratch" / "eval-999999999-abc"
        scratch.mkdir(parents=True)
        lock = repo.git_dir / "refs" / "heads" / "kgit" / "7-x.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text("stale")
        removed = repo.clean_worktrees()
        assert live.exists() and not dead.exists() and not scratch.exists() and not lock.exists()
        assert removed == 3


def test_a_checkout_copy_killed_while_it_is_written_leaves_git_fsck_clean(kernel_repo):
    """kill -9 while a throwaway checkout is being written (between `read-tree` and
    `checkout-index`, where a `git worktree add` had no HEAD yet): git's own state is
    untouched, so fsck is clean at once, and the next cleanup removes the folder and index."""
    code = (
        "import os, signal, sys\n"
        "from kgit.archive.repo import Repo\n"
        "repo = Repo(sys.argv[1])\n"
        "git = repo.git\n"
        "def killed_in_the_middle(*args, **kw):\n"
        "    if args[0] == 'checkout-index':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return git(*args, **kw)\n"
        "repo.git = killed_in_the_middle\n"
        "with repo.checkout_copy('HEAD'):\n"
        "    pass\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(kernel_repo)], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    repo = Repo(kernel_repo)
    left = list((repo.state / "worktrees").iterdir())
    assert len(left) == 1 and list(repo.state.glob("index-*"))  # the kill came mid-way
    fsck = subprocess.run(["git", "fsck", "--no-progress"], cwd=kernel_repo, capture_output=True, text=True)
    assert fsck.returncode == 0 and not fsck.stderr.strip(), fsck.stderr
    assert git(kernel_repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    repo.clean_worktrees()
    assert not left[0].exists() and not list(repo.state.glob("index-*"))


def test_a_checkout_copy_holds_the_revisions_files_with_their_modes_and_no_git_link(kernel_repo):
    repo = Repo(kernel_repo)
    (kernel_repo / "run.sh").write_text("#!/bin/sh\n")
    (kernel_repo / "run.sh").chmod(0o755)
    git(kernel_repo, "add", "run.sh")
    git(kernel_repo, "commit", "-q", "-m", "a script")
    tracked = set(git(kernel_repo, "ls-files").split())
    with repo.checkout_copy("HEAD") as copy:
        inside = {str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()}
        assert inside == tracked
        assert os.access(copy / "run.sh", os.X_OK)
        assert not (copy / ".git").exists()  # evaluated code gets no path back into the archive
    assert not copy.exists() and not list(repo.state.glob("index-*"))


def test_clean_removes_a_worktree_left_locked_by_a_killed_add(kernel_repo):
    """kill -9 during `git worktree add` leaves it registered and locked ("initializing");
    git's prune skips locked worktrees, so cleanup must unlock them."""
    repo = Repo(kernel_repo)
    dead = repo.state / "worktrees" / "999999999-0123456789ab"
    dead.parent.mkdir(parents=True, exist_ok=True)
    git(kernel_repo, "worktree", "add", "--detach", "--lock", "--reason", "initializing", str(dead), "HEAD")
    assert git(kernel_repo, "worktree", "list", "--porcelain").count("worktree ") == 2
    repo.clean_worktrees()
    assert git(kernel_repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not dead.exists()
