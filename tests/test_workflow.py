"""The manual experiment workflow (kgit init, try, record, log, show), driven through the CLI."""

import json
import subprocess

import pytest
from conftest import fast_config_text, git, make_git_repo

from kgit.archive.repo import Repo


def _status(path):
    return git(path, "status", "--porcelain", "--untracked-files=all", "--ignored")


def _set_block(path, value):
    kernel = path / "kernel.py"
    text = kernel.read_text()
    kernel.write_text(text.replace("BLOCK_SIZE = 1024", f"BLOCK_SIZE = {value}"))


def test_init_commits_a_measured_baseline(vector_add_template):
    repo = vector_add_template
    assert (repo / "problem" / "task.yml").exists() and (repo / "problem" / "reference.py").exists()
    assert (repo / "kernel.py").exists() and (repo / ".kgit.yaml").exists()
    tagged = git(repo, "rev-parse", "kgit/baseline^{commit}").strip()
    assert tagged == git(repo, "rev-parse", "HEAD").strip()
    trailers = git(repo, "log", "-1", "--format=%(trailers:only,unfold)", "kgit/baseline")
    assert "Kgit-Status: ok" in trailers and "Kgit-Timing: interpreter" in trailers
    assert trailers.count("Kgit-Time-us: size=") == 2
    assert _status(repo) == ""  # nothing left behind: no bytecode, no scratch, no index drift


def test_init_refuses_an_existing_kernel_repository_and_dirty_trees(kernel_repo, run_kgit, tmp_path):
    result = run_kgit(kernel_repo, "init", "--problem", "vector_add")
    assert result.exit_code == 1 and "--force" in result.stderr
    assert "already a kernel repository" in result.stderr and "kernel.py" in result.stderr
    (kernel_repo / ".kgit.yaml").unlink()
    result = run_kgit(kernel_repo, "init", "--problem", "vector_add")
    assert result.exit_code == 1 and "would overwrite problem/, kernel.py" in result.stderr
    result = run_kgit(kernel_repo, "init", "--problem", "vector_add", "--force")
    assert result.exit_code == 1 and "uncommitted changes" in result.stderr and "git stash" in result.stderr
    result = run_kgit(tmp_path, "init", "new", "--problem", "no_such_problem")
    assert result.exit_code == 1 and "vector_add" in result.stderr  # lists what exists
    result = run_kgit(tmp_path, "init", "new")
    assert result.exit_code == 2 and "--problem" in result.stderr


def test_init_refuses_to_overwrite_the_users_files(run_kgit, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "kernel.py").write_text("# my own kernel, three days of work\n")
    (folder / "problem").mkdir()
    result = run_kgit(tmp_path, "init", "mine", "--problem", "vector_add")
    assert result.exit_code == 1
    assert "would overwrite problem/, kernel.py" in result.stderr and "--force" in result.stderr
    assert "measuring" not in result.stderr  # refused before any progress line
    assert (folder / "kernel.py").read_text() == "# my own kernel, three days of work\n"
    assert not (folder / ".git").exists() and not (folder / ".kgit.yaml").exists()  # nothing written


def test_refusals_come_before_progress_lines(kernel_repo, run_kgit, tmp_path):
    result = run_kgit(tmp_path, "init", "m1", "--problem", "sofmax")
    assert result.exit_code == 1 and "unknown problem 'sofmax'" in result.stderr
    assert "measuring" not in result.stderr and not (tmp_path / "m1").exists()
    result = run_kgit(kernel_repo, "record")
    assert result.exit_code == 1 and "evaluating" not in result.stderr
    result = run_kgit(kernel_repo, "eval", "no-such-rev")
    assert result.exit_code == 1 and "unknown revision" in result.stderr and "evaluating" not in result.stderr


@pytest.mark.slow
def test_record_refuses_an_unchanged_tree(kernel_repo, run_kgit):
    run_kgit(kernel_repo, "try", "measure the baseline again")
    tips = git(kernel_repo, "rev-parse", "HEAD").strip()
    result = run_kgit(kernel_repo, "record")
    assert result.exit_code == 1 and "nothing changed" in result.stderr and "evaluating" not in result.stderr
    assert "kgit remeasure" in result.stderr and "--allow-unchanged" in result.stderr
    assert git(kernel_repo, "rev-parse", "HEAD").strip() == tips  # no commit
    result = run_kgit(kernel_repo, "record", "--allow-unchanged")
    assert result.exit_code == 0, result.stderr
    # Once recorded, the same tree again is refused against the branch tip.
    result = run_kgit(kernel_repo, "record")
    assert result.exit_code == 1 and "the tip of kgit/1-measure-baseline-again" in result.stderr
    _set_block(kernel_repo, 2048)
    assert run_kgit(kernel_repo, "record").exit_code == 0


@pytest.mark.slow
def test_init_force_replaces_the_baseline(kernel_repo, run_kgit, tmp_path):
    old = git(kernel_repo, "rev-parse", "kgit/baseline").strip()
    cfg = tmp_path / "fast.yaml"
    cfg.write_text(fast_config_text())
    result = run_kgit(kernel_repo, "init", "--problem", "softmax", "--force", "--config", str(cfg))
    assert result.exit_code == 0, result.stderr
    new = git(kernel_repo, "rev-parse", "kgit/baseline").strip()
    assert new != old and git(kernel_repo, "rev-parse", f"{new}^").strip() == old
    assert "softmax" in (kernel_repo / "problem" / "task.yml").read_text()


@pytest.mark.slow
def test_try_record_ok_and_failing_attempts(kernel_repo, run_kgit):
    before = _status(kernel_repo)
    result = run_kgit(kernel_repo, "try", "Bigger blocks: BLOCK_SIZE 2048 for a speedup")
    assert result.exit_code == 0, result.stderr
    branch = git(kernel_repo, "symbolic-ref", "--short", "HEAD").strip()
    assert branch == "kgit/1-bigger-blocks-block-size-2048-speed-up"
    _set_block(kernel_repo, 2048)
    result = run_kgit(kernel_repo, "record", "-m", "first")
    assert result.exit_code == 0, result.stderr
    assert _status(kernel_repo) == before  # index synced, nothing written into the tree

    (kernel_repo / "kernel.py").write_text((kernel_repo / "kernel.py").read_text().replace("a + b, mask", "a - b, mask"))
    result = run_kgit(kernel_repo, "record", "-m", "this one breaks; no speedup here")
    assert result.exit_code == 3
    assert "incorrect" in result.stdout

    attempts = json.loads(run_kgit(kernel_repo, "log", "--json").stdout)
    by_key = {(a["experiment"], a["attempt"]): a for a in attempts}
    baseline, first, second = by_key[(0, 0)], by_key[(1, 1)], by_key[(1, 2)]
    assert first["parents"] == [baseline["sha"]] and second["parents"] == [first["sha"]]
    assert first["status"] == "ok" and second["status"] == "incorrect"
    assert first["base"] == baseline["sha"] and first["branch"] == branch
    assert first["speedup"] > 0 and first["geomean_us"] > 0 and set(first["times_us"]) == {"size=4096", "size=65536"}
    assert first["timing"] == "interpreter" and first["device"] == "cpu"
    assert first["author"] == "Test Person"  # a person's attempt carries their identity

    # `git log --all --grep speedup` lists exactly the real speedups: an interpreter timing is none.
    listed = git(kernel_repo, "log", "--all", "--grep", "speedup", "--format=%H").split()
    assert listed == [] and "correct (not timed on a GPU)" in first["subject"]
    body = git(kernel_repo, "log", "-1", "--format=%B", second["sha"])
    assert "speedup" not in body and "Error excerpt" in body and "differ beyond" in body
    assert "Kgit-Status: incorrect" in body


def test_eval_uses_a_throwaway_worktree(kernel_repo, run_kgit):
    before = _status(kernel_repo)
    result = run_kgit(kernel_repo, "eval", "kgit/baseline", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "kgit.result/1" and doc["status"] == "ok" and doc["timing"] == "interpreter"
    assert _status(kernel_repo) == before
    assert len(git(kernel_repo, "worktree", "list").splitlines()) == 1
    assert not any((kernel_repo / ".git" / "kgit" / "worktrees").iterdir())


@pytest.mark.slow
def test_eval_of_a_broken_commit_exits_3(kernel_repo, run_kgit):
    (kernel_repo / "kernel.py").write_text("def custom_kernel(data):\n    return data[0] +\n")
    git(kernel_repo, "commit", "-qam", "broken")
    result = run_kgit(kernel_repo, "eval")
    assert result.exit_code == 3 and "compile-error" in result.stdout


def test_record_outside_an_experiment_branch(kernel_repo, run_kgit):
    result = run_kgit(kernel_repo, "record")
    assert result.exit_code == 1
    assert "kgit try" in result.stderr and "Traceback" not in result.stderr


def test_unknown_revision_and_not_a_repository(kernel_repo, run_kgit, tmp_path):
    result = run_kgit(kernel_repo, "show", "nope")
    assert result.exit_code == 1 and "unknown revision 'nope'" in result.stderr
    plain = make_git_repo(tmp_path / "plain")
    result = run_kgit(plain, "log")
    assert result.exit_code == 1 and "kgit init" in result.stderr
    result = run_kgit(tmp_path, "log")
    assert result.exit_code == 1 and "not inside a git repository" in result.stderr


def test_show_best_and_try_from_any_head(kernel_repo, run_kgit):
    run_kgit(kernel_repo, "try", "blocks of 4096")
    _set_block(kernel_repo, 4096)
    assert run_kgit(kernel_repo, "record").exit_code == 0
    sha = git(kernel_repo, "rev-parse", "HEAD").strip()
    shown = run_kgit(kernel_repo, "show", sha)
    assert shown.exit_code == 0
    assert "blocks of 4096" in shown.stdout and "size=4096" in shown.stdout and "kernel.py" in shown.stdout
    best = json.loads(run_kgit(kernel_repo, "best", "--json").stdout)
    assert best["status"] == "ok" and best["speedup_baseline"] is not None
    git(kernel_repo, "checkout", "-q", "--detach", "kgit/baseline")
    result = run_kgit(kernel_repo, "try", "another idea", "--base", "kgit/baseline")
    assert result.exit_code == 0
    assert git(kernel_repo, "symbolic-ref", "--short", "HEAD").strip() == "kgit/2-another-idea"
    assert git(kernel_repo, "rev-parse", "HEAD").strip() == git(kernel_repo, "rev-parse", "kgit/baseline").strip()
    # An experiment number is a revision too: experiment 1's best correct attempt.
    assert run_kgit(kernel_repo, "try", "from the first one", "--base", "1").exit_code == 0
    assert git(kernel_repo, "rev-parse", "HEAD").strip() == sha
    assert json.loads(run_kgit(kernel_repo, "show", "1", "--json").stdout)["sha"] == sha


def test_lock_names_the_holder(kernel_repo, run_kgit):
    run_kgit(kernel_repo, "try", "idea")
    _set_block(kernel_repo, 512)
    repo = Repo(kernel_repo)
    with repo.lock("evolve"):
        result = run_kgit(kernel_repo, "record")
    assert result.exit_code == 1 and "pid" in result.stderr and "evolve" in result.stderr
    # The lock dies with its holder: the next command goes through.
    assert run_kgit(kernel_repo, "record").exit_code == 0


@pytest.mark.slow
def test_base_from_another_device_is_retimed_and_noted(kernel_repo, run_kgit):
    from kgit import workflow

    repo = Repo(kernel_repo)
    branch, base = workflow.start(repo, "pretend H200 result", checkout=False)
    fake = {"schema": "kgit.result/1", "status": "ok", "device": "NVIDIA H200", "timing": "events", "harness": "other",
            "ranking": "mean", "geomean_us": 5.0, "eval_s": 1.0,
            "shapes": [{"key": "size=4096", "mean_us": 5.0}, {"key": "size=65536", "mean_us": 5.0}]}
    tree = git(kernel_repo, "rev-parse", "HEAD^{tree}").strip()
    with repo.lock("test"):
        outcome = workflow.commit_attempt(repo, workflow.load(kernel_repo)[1], branch=branch, tree=tree,
                                             parent=base, result=fake, author="kgit (test-model)", model="test-model",
                                             cost=None, tokens=12)
    assert git(kernel_repo, "log", "-1", "--format=%an", outcome.sha).strip() == "kgit (test-model)"
    assert "Kgit-Cost-USD: unknown" in git(kernel_repo, "log", "-1", "--format=%B", outcome.sha)
    run_kgit(kernel_repo, "try", "build on the H200 one", "--base", outcome.sha)
    assert run_kgit(kernel_repo, "record", "--allow-unchanged").exit_code == 0
    notes = git(kernel_repo, "notes", "--ref", "refs/notes/kgit", "show", outcome.sha)
    record = json.loads(notes.strip().splitlines()[-1])
    assert record["device"] == "cpu" and record["tag"] == "re-timed as a base"
    mine = [a for a in json.loads(run_kgit(kernel_repo, "log", "--json").stdout) if a["experiment"] == 2]
    assert mine[0]["speedup"] is not None  # compared against the CPU re-timing, not the H200 figure


def test_works_without_any_git_identity(tmp_path, monkeypatch):
    """CI has no user.name/email: kgit stands in for author and committer."""
    from kgit import workflow

    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "empty-gitconfig"))
    root = tmp_path / "anon"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    assert subprocess.run(["git", "config", "user.name"], cwd=root, capture_output=True).returncode != 0
    outcome = workflow.init(root, "vector_add", config_text=fast_config_text())
    who = git(root, "log", "-1", "--format=%an <%ae>|%cn <%ce>", outcome.sha).strip()
    assert who == "kgit <kgit@localhost>|kgit <kgit@localhost>"


def test_record_and_try_say_when_the_committed_configuration_changes(kernel_repo, run_kgit):
    """A .kgit.yaml edit may still be recorded, and is announced; `try` says what the base's
    .kgit.yaml changes back; machine-local settings hold across both and are never committed."""
    config = kernel_repo / ".kgit.yaml"
    assert run_kgit(kernel_repo, "config", "--local", "evaluator.timeout_s", "321").exit_code == 0
    assert run_kgit(kernel_repo, "try", "fewer repetitions").exit_code == 0
    config.write_text(config.read_text().replace("min_reps: 2", "min_reps: 3"))
    _set_block(kernel_repo, 2048)
    done = run_kgit(kernel_repo, "record", "--json")
    assert done.exit_code == 0, done.stderr
    assert "also commits your change to .kgit.yaml (timing.min_reps: 2 -> 3)" in done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["config_changes"] == ["timing.min_reps: 2 -> 3"]
    body = git(kernel_repo, "log", "-1", "--format=%B", outcome["sha"])
    assert "Also changes .kgit.yaml: timing.min_reps: 2 -> 3" in body
    assert "timeout_s: 321" not in git(kernel_repo, "show", f"{outcome['sha']}:.kgit.yaml")
    # Back to the baseline's configuration: said, and the local setting still applies.
    done = run_kgit(kernel_repo, "try", "from the baseline", "--base", "kgit/baseline")
    assert done.exit_code == 0 and "timing.min_reps: 3 -> 2" in done.stderr and "--local" in done.stderr
    assert "min_reps: 2" in config.read_text()
    shown = run_kgit(kernel_repo, "config", "evaluator.timeout_s")
    assert shown.stdout.startswith("evaluator.timeout_s = 321  (machine-local")
