"""The worked example of docs/evaluators.md, run against a real sshd on 127.0.0.1.

The box is this machine's own OpenSSH server (tests/sshd.py), reached as `mi300` through
examples/evaluators/mi300-eval.sh, the script the docs quote: remote timings are recorded
with their host and never compared with the local baseline's (the base is re-timed
through ssh), a result that answers another candidate is refused, nothing remote
outlives a timeout or a kgit killed with SIGKILL, and the evaluator setting is this
clone's own (`kgit config --local`), never committed. CI installs openssh-server.

Each remote evaluation here gets its own TMPDIR on the "remote" side, so the test can
tell its remote processes (their environment names it) and see its folders go.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import fast_config_text, git
from sshd import Sshd

from kgit import config as config_mod
from kgit.archive.repo import BASELINE_TAG, Repo
from kgit.evaluation import backends, candidate

pytestmark = pytest.mark.ssh

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "evaluators" / "mi300-eval.sh"
KGIT = Path(sys.executable).with_name("kgit")
# A kernel that never returns: the remote evaluation hangs in the candidate's first call.
HANGING_KERNEL = "def custom_kernel(data):\n    while True:\n        pass\n"


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    server = Sshd(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()


@pytest.fixture
def remote_tmp(box, tmp_path, monkeypatch):
    """The remote side's TMPDIR for this test, and the example's settings pointing at the box."""
    folder = tmp_path / "remote-tmp"
    folder.mkdir()
    monkeypatch.setenv("KGIT_SSH", box.ssh)
    monkeypatch.setenv("KGIT_REMOTE_KGIT", f"env TMPDIR={folder} {KGIT}")
    return folder


def _use_the_example(run_kgit, repo: Path, **extra):
    """What the docs tell a user to do: the script beside .kgit.yaml, the evaluator set for this clone."""
    shutil.copy(SCRIPT, repo / "mi300-eval.sh")
    settings = {"evaluator.backend": "command", "evaluator.command": "./mi300-eval.sh {device}",
                "evaluator.devices": "[0]", "evaluator.pass_env": "[KGIT_SSH, KGIT_REMOTE_KGIT]", **extra}
    done = run_kgit(repo, "config", "--local", *[part for pair in settings.items() for part in pair])
    assert done.exit_code == 0, done.output


def _processes_naming(text: str) -> list[int]:
    """Processes (not this one) whose environment holds `text`: the remote side of one test
    (its TMPDIR reaches the judge and runner too), and the local script and ssh (KGIT_REMOTE_KGIT)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                    continue  # a zombie has ended; only its parent has not reaped it
        except OSError:
            continue
        if text.encode() in environ:
            found.append(int(entry.name))
    return found


def _remote_judges(folder: Path) -> list[int]:
    """The remote harness judges of this test (started with TMPDIR inside `folder`)."""
    judges = []
    for pid in _processes_naming(str(folder)):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"judge" in f.read().split(b"\0"):
                    judges.append(pid)
        except OSError:
            continue
    return judges


def _wait_for(predicate, limit: float, what: str):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {limit:g} s")


@pytest.mark.slow
def test_the_worked_example_records_remote_timings_against_a_base_retimed_there(kernel_repo, remote_tmp, run_kgit):
    _use_the_example(run_kgit, kernel_repo)
    assert run_kgit(kernel_repo, "try", "a comment in the kernel").exit_code == 0
    kernel = kernel_repo / "kernel.py"
    kernel.write_text("# timed on the box\n" + kernel.read_text())
    done = run_kgit(kernel_repo, "record", "--json")
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    host = socket.gethostname()
    # The result says where it ran: the command backend, and the host the remote kgit named.
    assert out["result"]["worker"]["backend"] == "command" and out["result"]["worker"]["host"] == host
    assert "candidate" not in out["result"]  # the echo was checked, and is not a result field
    assert out["config_changes"] == []
    repo = Repo(kernel_repo)
    attempts = {a.sha: a for a in repo.read()}
    attempt, baseline = attempts[out["sha"]], attempts[repo.rev(BASELINE_TAG)]
    assert attempt.evaluator == f"command@{host}" and baseline.evaluator == f"local@{host}"
    # Same device name ("cpu") and harness on both sides, but another evaluator: the base
    # was timed again through ssh, and the speedup compares those two figures.
    retimed = [n.to_note() for n in baseline.notes.measurements if n.tag == "re-timed as a base"]
    assert [n["evaluator"] for n in retimed] == [f"command@{host}"]
    assert out["speedup"] == pytest.approx(retimed[0]["geomean_us"] / attempt.geomean_us, rel=0.01)
    # The evaluator setting is this clone's: not in the commit, the work tree untouched.
    assert repo.read_file(out["sha"], ".kgit.yaml") == repo.read_file(BASELINE_TAG, ".kgit.yaml")
    assert "backend: command" not in (kernel_repo / ".kgit.yaml").read_text()
    assert git(kernel_repo, "status", "--porcelain", "--untracked-files=no") == ""
    # Each remote evaluation unpacked into a folder of its own, removed at its end.
    assert list(remote_tmp.iterdir()) == []


@pytest.mark.slow
def test_a_result_that_answers_another_candidate_is_refused(kernel_repo, remote_tmp, run_kgit, tmp_path):
    """The command hands back the box's verdict on another candidate (a folder left by an
    earlier evaluation, as a fixed remote folder shared by two repositories did): refused."""
    baseline = Repo(kernel_repo).rev(BASELINE_TAG)
    stale = candidate.stage(kernel_repo, config_mod.parse(fast_config_text()), tmp_path / "stale", sha=baseline)
    swap = tmp_path / "swap.sh"
    swap.write_text(f"exec $KGIT_SSH mi300 {shlex.quote(f'{KGIT} eval-candidate {stale}')}\n")
    _use_the_example(run_kgit, kernel_repo, **{"evaluator.command": f"sh {swap}"})
    assert run_kgit(kernel_repo, "try", "a comment in the kernel").exit_code == 0
    kernel = kernel_repo / "kernel.py"
    kernel.write_text("# not what the box evaluated\n" + kernel.read_text())
    tip = git(kernel_repo, "rev-parse", "HEAD").strip()
    done = run_kgit(kernel_repo, "record")
    assert done.exit_code == 1
    assert "answers another candidate" in done.stderr and f"commit {baseline[:10]}" in done.stderr
    assert git(kernel_repo, "rev-parse", "HEAD").strip() == tip  # nothing committed


def _hanging_folder(kernel_repo: Path, tmp_path: Path) -> Path:
    (kernel_repo / "kernel.py").write_text(HANGING_KERNEL)
    # The remote harness's own limit is far away: only the hang-up can end it in time.
    return candidate.stage(kernel_repo, config_mod.parse(fast_config_text(evaluator={"timeout_s": 600})),
                           tmp_path / "hanging", sha="hang")


@pytest.mark.slow
def test_the_remote_evaluation_ends_when_kgit_times_out(kernel_repo, remote_tmp, tmp_path):
    folder = _hanging_folder(kernel_repo, tmp_path)
    seen = []
    watcher = threading.Thread(target=lambda: _wait_for(lambda: seen.extend(_remote_judges(remote_tmp)) or seen,
                                                        60, "a remote judge"), daemon=True)
    watcher.start()
    # What kgit does with evaluator.timeout_s: the command's process group killed, its stdin closed.
    code, out, err, timed_out = backends.run_command(
        f"{SCRIPT} 0", kernel_repo, backends.command_env(["KGIT_SSH", "KGIT_REMOTE_KGIT"]), timeout=8,
        send=candidate.send_bytes(folder))
    watcher.join()
    assert timed_out and seen, f"the remote evaluation never started within the timeout: {err}"
    _wait_for(lambda: not _processes_naming(str(remote_tmp)), 10, "the remote side ended")
    assert list(remote_tmp.iterdir()) == []


def test_the_remote_evaluation_ends_when_kgit_is_killed(kernel_repo, remote_tmp, run_kgit, tmp_path):
    _use_the_example(run_kgit, kernel_repo, **{"evaluator.timeout_s": "600"})
    (kernel_repo / "kernel.py").write_text(HANGING_KERNEL)
    git(kernel_repo, "commit", "-q", "-am", "a kernel that never returns")
    kgit = subprocess.Popen([str(KGIT), "eval"], cwd=kernel_repo, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _remote_judges(remote_tmp), 60, "a remote judge")
    finally:
        kgit.send_signal(signal.SIGKILL)
        kgit.wait()
    # The local script and ssh, eval-candidate on the box, its judge and runner: all gone.
    _wait_for(lambda: not _processes_naming(str(remote_tmp)), 10, "everything of the evaluation ended")
    assert list(remote_tmp.iterdir()) == []


def test_the_docs_quote_the_tested_script():
    docs = (ROOT / "docs" / "evaluators.md").read_text()
    assert f"```sh\n{SCRIPT.read_text()}```" in docs
