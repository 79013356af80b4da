"""The manual experiment workflow: init, try, record, eval, best, and the attempt commit
that `evolve` shares with `record`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kgit import config as config_mod
from kgit import live, settings
from kgit import problems as problem_mod
from kgit.archive import figures, measure, trees
from kgit.archive import trailers as tr
from kgit.archive.notes import Measurement
from kgit.archive.refs import ExperimentRef
from kgit.archive.repo import BASELINE_TAG, Attempt, Repo
from kgit.errors import EvaluationFailed, KgitError, NotAKernelRepo
from kgit.evaluation import child, targets_policy
from kgit.evaluation.evaluated import Evaluation
from kgit.scientist import offline
from kgit.scientist.protocol import is_offline
from kgit_harness import racing
from kgit_harness.result import Result

GITIGNORE_LINES = ["__pycache__/", "*.pyc"]
# Experiments between two `Repo.maintain()` runs (ref packing and commit-graph).
MAINTAIN_EVERY = 200


@dataclass
class Outcome:
    """What one evaluation + commit produced."""

    sha: str
    result: Evaluation
    speedup: float | None = None
    speedup_baseline: float | None = None
    base_times: dict = field(default_factory=dict)
    config_changes: list = field(default_factory=list)  # "key: old -> new" of a recorded .kgit.yaml edit
    untuned: str = ""  # after init: what to do when the kernel marks no tunable parameter, else ""


# -- init ------------------------------------------------------------------------
def init(path: Path, problem: str | None = None, *, force: bool = False, config_text: str | None = None,
         problem_dir: Path | None = None, kernel_source: str | None = None, progress=None) -> Outcome:
    """Make `path` a kernel repository of a shipped problem (or a prepared problem folder).

    The problem, the configuration and the files it would overwrite are checked before
    anything is written; `progress(line)` hears once, when the baseline's measurement
    starts, after every refusal.
    """
    path = Path(path).resolve()
    problem_dir = _problem_folder(problem, problem_dir)
    text = config_text if config_text is not None else config_mod.default_text()
    config = config_mod.parse(text, "the new .kgit.yaml")
    task = problem_mod.load_task(problem_dir)
    for name in ("task.yml", "reference.py"):
        if not (problem_dir / name).exists():
            raise KgitError(f"{problem_dir / name} is missing: a problem needs task.yml and reference.py.")
    _check_overwrites(path, [config.problem + "/", *task.files, ".kgit.yaml"], force)
    path.mkdir(parents=True, exist_ok=True)
    repo = Repo.open_or_init(path)
    if repo.root != path:
        raise KgitError(f"{path} is inside the git repository {repo.root}; a kernel repository is a whole "
                        f"repository. Run `kgit init` in {repo.root}, or pick a folder outside it.")
    with repo.lock("init"):
        _check_init_allowed(repo, force)
        _write_problem(repo, problem_dir, config, task, kernel_source, text)
        judged = _measure_baseline(repo, config, task, progress)
        _refuse_failed_baseline(judged, config, task)
        sha = _commit_baseline(repo, config, task, judged)
    return Outcome(sha=sha, result=judged, speedup=1.0, speedup_baseline=1.0, untuned=_untuned(repo, task))


def _problem_folder(problem: str | None, problem_dir: Path | None) -> Path:
    """The folder of the problem to start from: the one given, else the shipped one named."""
    if problem_dir is not None:
        return problem_dir
    shipped = problem_mod.shipped()
    if problem not in shipped:
        raise KgitError(f"unknown problem {problem!r}. Shipped problems: {', '.join(shipped)} "
                        "(`kgit problems` describes them).")
    return shipped[problem]


def _write_problem(repo: Repo, problem_dir: Path, config, task, kernel_source: str | None, text: str) -> None:
    """The problem folder, the kernel, .kgit.yaml and the .gitignore lines, into the work tree."""
    dest = repo.root / config.problem
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in ("task.yml", "reference.py"):
        shutil.copy2(problem_dir / name, dest / name)
    # Anything else beside them (an imported problem's helper modules) goes along;
    # the editable files are the kernel's, not the problem's.
    for item in problem_dir.iterdir():
        if item.name in ("task.yml", "reference.py", "__pycache__") or item.name in task.files:
            continue
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, dest / item.name)
    kernel_name = task.files[0]
    if kernel_source is None:
        kernel_source = (problem_dir / kernel_name).read_text(encoding="utf-8")
    (repo.root / kernel_name).write_text(kernel_source, encoding="utf-8")
    (repo.root / ".kgit.yaml").write_text(text, encoding="utf-8")
    _extend_gitignore(repo.root / ".gitignore")


def _measure_baseline(repo: Repo, config, task, progress) -> Evaluation:
    """The baseline evaluated on this host, whatever evaluator.backend says."""
    if progress:
        from kgit.evaluation.sandbox import gpu_driver_present

        where = "" if gpu_driver_present() else " (no GPU here: in the Triton CPU interpreter)"
        progress(f"measuring the {task.name} baseline{where}...")
    with live.evaluation(progress, "baseline", config.evaluator.timeout_s) as watch:
        judged = Evaluation.of(child.evaluate_tree(repo.root, config, state_dir=repo.state / "scratch",
                                                   **({"watch": watch} if watch else {})))
    if judged.worker is None:
        from kgit.evaluation.backends import this_host

        judged.worker = this_host()  # init measures here, whatever evaluator.backend says
    return judged


def _refuse_failed_baseline(judged: Evaluation, config, task) -> None:
    """An EvaluationFailed that says why, for a baseline that did not pass; nothing is committed."""
    doc = judged.to_document()  # what EvaluationFailed carries (`kgit init --json` prints it)
    error = judged.error or ""
    kernel_name = task.files[0]
    if judged.status == "unsupported":
        raise EvaluationFailed(f"the problem {task.name} is {tr.subject('', 'unsupported', None, None, judged.reason)[2:]}; "
                               f"no kernel was judged:\n{_tail(error, 1500)}\nNothing was committed; "
                               "run `kgit init` on a machine that has what it needs, or edit the problem.", doc)
    missing = re.search(r"ModuleNotFoundError: No module named '([^'.]+)", error)
    if judged.status == "compile-error" and missing:
        raise EvaluationFailed(f"the baseline kernel needs the Python module {missing.group(1)}, which is not "
                               f"installed here:\n{_tail(error, 1500)}\nNothing was committed; "
                               f"install it, or write {kernel_name} without it, and run `kgit init --force`.", doc)
    if not judged.ok:
        raise EvaluationFailed(f"the baseline kernel did not pass ({judged.status}): "
                               f"{_tail(error, 1500)}\nNothing was committed. {kernel_name} is "
                               "the problem's own kernel, so fix it where it came from (the problem folder "
                               "or the imported files) and run the same `kgit init` with --force, which "
                               f"writes {config.problem}/, {kernel_name} and .kgit.yaml again.", doc)


def _commit_baseline(repo: Repo, config, task, judged: Evaluation) -> str:
    """The baseline commit on HEAD, tagged kgit/baseline, its notes beside it; its sha."""
    kernel_name = task.files[0]
    paths = [config.problem, kernel_name, ".kgit.yaml", ".gitignore"] + task.files[1:]
    tree = repo.snapshot_tree(paths)
    message = tr.Message(
        subject=f"kgit baseline: {task.name} (geomean {judged.geomean_us:.1f} us)",
        paragraphs=[f"Baseline kernel of the problem {task.name}, measured by kgit init.", task.summary],
        trailers=tr.lines({"experiment": 0, "attempt": 0, "branch": repo.head_branch() or "HEAD",
                           "hypothesis": "baseline", **tr.from_result(judged.result),
                           "evaluator": judged.evaluator, "speedup": "1.00", "speedup_baseline": "1.00",
                           "model": "human"})
    ).render(ok=False)
    head = repo.head()
    sha = repo.commit_tree(tree, [head] if head else [], message)
    repo.update_ref("HEAD", sha, head, reason="kgit init")
    repo.tag_baseline(sha)
    _keep_notes(repo, sha, judged.result)
    repo.sync_index()
    return sha


def _untuned(repo: Repo, task) -> str:
    """What to do when the kernel marks no tunable parameter for the offline strategist, else ""."""
    marked = any(offline.tunables(name, (repo.root / name).read_text(encoding="utf-8"))
                 for name in task.files if (repo.root / name).is_file())
    return "" if marked else (f"{', '.join(task.files)} marks no tunable parameter, so the offline strategist "
                              f"(kgit evolve without --model) has nothing to try yet. {offline.MARK_HOW}.")


def _tail(text: str, limit: int) -> str:
    """At most `limit` characters of an error, its end kept (a traceback's last line says what
    failed), in the user's terms: the kernel's place first, kgit's frames left out."""
    from kgit.excerpts import in_user_terms

    return in_user_terms(text if len(text) <= limit else "...\n" + text[-limit:].split("\n", 1)[-1])


def _check_overwrites(root: Path, names: list[str], force: bool):
    """Refuse to replace the user's own files (a kernel.py of theirs, say) unless --force."""
    if force:
        return
    found = [name for name in names if (root / name.rstrip("/")).exists()]
    if (root / ".kgit.yaml").exists():
        raise KgitError(f"{root} is already a kernel repository (.kgit.yaml exists). Use `kgit init --force` "
                        f"to overwrite {', '.join(found)} with a new problem, kernel and baseline.")
    if found:
        raise KgitError(f"`kgit init` would overwrite {', '.join(found)} in {root}. Move them away, pick "
                        "another folder, or use `kgit init --force` to replace them.")


def _check_init_allowed(repo: Repo, force: bool):
    if repo.head() and repo.tracked_changes().strip():
        raise KgitError(f"{repo.root} has uncommitted changes; commit or stash them (`git stash`) first, "
                        "so the baseline commit holds only what kgit wrote.")


def _extend_gitignore(path: Path):
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    missing = [line for line in GITIGNORE_LINES if line not in lines]
    if missing:
        path.write_text("\n".join(lines + missing) + "\n", encoding="utf-8")


# -- reading -----------------------------------------------------------------------
def load(path=".", *, archive: bool = True) -> tuple[Repo, config_mod.Config]:
    """The kernel repository around `path` and its configuration: `.kgit.yaml` with this
    machine's own settings over it (`kgit config --local`). `archive`: NotAKernelRepo, saying
    where to go instead, when the .kgit.yaml has no archive beside it (no kgit/baseline)."""
    repo = Repo.find(path)
    config = config_mod.load(repo.root, settings.local_file(repo))  # a broken .kgit.yaml is said first
    if archive and repo.baseline() is None:
        raise NotAKernelRepo(no_archive_message(repo.root))
    return repo, config


# Where scripts/demo.sh makes its kernel repository unless KGIT_DEMO_DIR names another.
DEMO_DIR = "~/kgit-demo"


def no_archive_message(root: Path) -> str:
    """What a folder with a .kgit.yaml but no kgit archive is, and where to go instead.

    kgit's own checkout is one (its .kgit.yaml documents every key), and the folder the
    demo leaves a person in: there the message points at the demo's kernel repository.
    """
    import kgit

    demo = Path(os.environ.get("KGIT_DEMO_DIR") or DEMO_DIR).expanduser()
    if Path(root).resolve() == Path(kgit.__file__).resolve().parent.parent:
        found = (demo / ".kgit.yaml").exists()
        where = (f"the demo's kernel repository is {demo}: `cd {demo}` and run kgit there" if found else
                 f"`bash scripts/demo.sh` makes one in {demo} (or in $KGIT_DEMO_DIR)")
        return (f"{root} is kgit's own checkout: its .kgit.yaml documents the settings, and it holds no "
                f"experiments. kgit works in a kernel repository: {where}; or make one with "
                "`kgit init mykernel --problem softmax` (see `kgit problems`).")
    return (f"{root} has a .kgit.yaml but no kgit archive (no {BASELINE_TAG} tag), so there is nothing to show "
            "yet. Make the archive here with `kgit init --force --config .kgit.yaml --problem NAME` (keeps these "
            "settings; `kgit problems` lists the problems), or cd to the kernel repository you meant.")


def best(attempts: list[Attempt]) -> Attempt | None:
    """The best correct attempt by the one ranking rule of kgit/archive/figures.py (docs/evolve.md):
    the fastest on the ranking GPU setup (archive/figures.py), or, with no GPU timings, the most recent."""
    return figures.best(attempts)


def find(attempts: list[Attempt], sha: str) -> Attempt | None:
    return next((a for a in attempts if a.sha == sha), None)


def resolve(repo: Repo, rev: str, attempts: list[Attempt] | None = None) -> str:
    """The commit sha `rev` names: a git revision, or an experiment number.

    N (or #N) is experiment N's best correct attempt by the ranking rule (figures.best: the
    fastest on the ranking GPU, or the most recent where no GPU timed them), or its last
    attempt when none is correct. A number of four digits or more that is no experiment may
    still be an abbreviated sha, so git gets to read it then.
    """
    text = str(rev).strip()
    number = text[1:] if text.startswith("#") else text
    if number.isdigit():
        attempts = repo.read() if attempts is None else attempts
        mine = sorted((a for a in attempts if a.experiment == int(number) and not a.is_baseline),
                      key=lambda a: a.attempt)
        if mine:
            found = best(mine)
            return found.sha if found is not None else mine[-1].sha
        if int(number) == 0:
            return repo.rev(BASELINE_TAG)
        if len(number) < 4 or text.startswith("#"):
            raise KgitError(f"there is no experiment {int(number)}; `kgit log` lists them (the exp column).")
    return repo.rev(text)


def next_experiment(repo: Repo, attempts: list[Attempt]) -> int:
    numbers = list(repo.experiment_branches()) + [a.experiment for a in attempts]
    return max(numbers, default=0) + 1


# -- try -----------------------------------------------------------------------------
def start(repo: Repo, hypothesis: str, base: str | None = None, *, checkout: bool = True,
          progress=None) -> tuple[str, str]:
    """Create experiment branch kgit/<N>-<slug> from `base` (default: the best attempt).

    Checking it out brings the base's `.kgit.yaml`; `progress(line)` hears which settings
    that changes from the ones checked out before (machine-local ones are unaffected)."""
    hypothesis = (hypothesis or "").strip()
    if not hypothesis:
        raise KgitError('the hypothesis is empty: say what you expect to change, e.g. kgit try "use BLOCK_SIZE 2048".')
    with repo.lock("try"):
        attempts = repo.read()
        if not attempts:
            raise NotAKernelRepo(f"{repo.root} has no {BASELINE_TAG} tag; run `kgit init --problem NAME` first.")
        base_sha = resolve(repo, base, attempts) if base else best(attempts).sha
        if checkout and repo.tracked_changes().strip():
            raise KgitError("the work tree has uncommitted changes; commit or stash them (`git stash`) "
                            "before `kgit try` checks out the new experiment branch.")
        number = next_experiment(repo, attempts)
        branch = ExperimentRef(number, tr.slugify(hypothesis)).branch
        repo.create_branch(branch, base_sha, hypothesis)
        if number % MAINTAIN_EVERY == 0:
            repo.maintain()
        if checkout:
            before = repo.head()
            repo.checkout(branch)
            _announce_config_change(repo, before, base_sha, branch, progress)
    return branch, base_sha


def _announce_config_change(repo: Repo, before: str | None, after: str, branch: str, progress):
    old = repo.read_file(before, config_mod.CONFIG_NAME) if before else None
    new = repo.read_file(after, config_mod.CONFIG_NAME)
    if progress is None or old is None or old == new:
        return
    progress(f"note: {branch} has its base's .kgit.yaml, which differs from the one checked out before in "
             f"{'; '.join(config_mod.changed_keys(old, new))}. Where to evaluate belongs to this machine: "
             "`kgit config --local evaluator.KEY VALUE` holds on every branch and is never committed.")


# -- record --------------------------------------------------------------------------
def record(repo: Repo, config, notes: str = "", *, allow_unchanged: bool = False, progress=None) -> Outcome:
    """Evaluate the work tree and commit it as the next attempt of the current experiment.

    A tree equal to the branch tip's or the experiment base's is refused unless
    `allow_unchanged`: it would commit a copy and measure it again.
    """
    branch = repo.head_branch()
    if not branch or not ExperimentRef.match(branch):
        raise KgitError(f"`kgit record` works on an experiment branch, and HEAD is {branch or 'detached'}. "
                        'Start one with `kgit try "HYPOTHESIS"`, or check one out with `git checkout kgit/N-...`.')
    task = problem_mod.load_task(repo.root / config.problem)
    with repo.lock("record"):
        repo.clean_worktrees()  # what a killed run left behind
        tree = repo.snapshot_tree(task.files)
        parent = repo.head()
        if not allow_unchanged:
            _refuse_unchanged(repo, branch, tree, parent)
        if progress:
            progress(f"evaluating the work tree (limit {config.evaluator.timeout_s:g} s, evaluator.timeout_s)...")
        changes = _config_changes(repo, parent, tree)
        if changes and progress:
            progress(f"note: this attempt also commits your change to .kgit.yaml ({'; '.join(changes)}); it "
                     "becomes part of the experiment's history. Settings of this machine alone go in "
                     "`kgit config --local` instead (docs/evaluators.md).")
        provisional = repo.commit_tree(tree, [parent], "kgit: provisional commit for evaluation\n")
        with live.evaluation(progress, "evaluating", config.evaluator.timeout_s) as watch:
            judged = evaluate_rev(repo, config, provisional, watch=watch)
        outcome = commit_attempt(repo, config, branch=branch, tree=tree, parent=parent, result=judged,
                                 notes=notes, author=None, model="human",
                                 plan="Also changes .kgit.yaml: " + "; ".join(changes) if changes else "")
        outcome.config_changes = changes
        repo.sync_index()
    return outcome


def _config_changes(repo: Repo, parent: str, tree: str) -> list[str]:
    """The settings the recorded tree's `.kgit.yaml` changes from its parent's."""
    old = repo.read_file(parent, config_mod.CONFIG_NAME)
    new = repo.read_file(tree, config_mod.CONFIG_NAME)
    return [] if old == new else config_mod.changed_keys(old, new)


def _refuse_unchanged(repo: Repo, branch: str, tree: str, parent: str):
    base = repo.branch_meta(branch)["base"] or parent
    for sha, what in ((parent, f"the tip of {branch}"), (base, "the experiment's base")):
        if trees.tree_of(repo, sha) == tree:
            raise KgitError(f"nothing changed: the work tree equals {what} ({sha[:10]}), so recording would commit "
                            "a copy of it. Edit the kernel first; to time that commit again without a new commit, "
                            f"run `kgit remeasure {sha[:10]}`, or commit it as a new attempt anyway with "
                            "`kgit record --allow-unchanged`.")


def evaluate_rev(repo: Repo, config, rev: str, watch=None) -> Evaluation:
    """Evaluate a commit with the configured backend (kgit/backends.py): local GPUs, Ray, or a command.
    `watch(stage)` hears each stage where the backend reports them (`watches`)."""
    from kgit.evaluation.backends import get_evaluator

    evaluator = get_evaluator(repo, config)
    if watch is not None and getattr(evaluator, "watches", False):
        return Evaluation.of(evaluator(rev, watch=watch))
    return Evaluation.of(evaluator(rev))


def evaluate_commit(repo: Repo, config, rev: str, progress=None) -> Evaluation:
    """`kgit eval`: evaluate REV in a throwaway worktree, saying so first, with its stages on the live line."""
    sha = resolve(repo, rev)
    if progress:
        progress(f"evaluating {rev} ({sha[:10]}) in a throwaway worktree (limit {config.evaluator.timeout_s:g} s)...")
    with live.evaluation(progress, "evaluating", config.evaluator.timeout_s) as watch:
        return evaluate_rev(repo, config, sha, watch=watch)


def experiment_info(repo: Repo, attempts: list[Attempt], branch: str) -> dict:
    number = ExperimentRef.parse(branch).number
    mine = sorted((a for a in attempts if a.experiment == number), key=lambda a: a.attempt)
    meta = repo.branch_meta(branch)
    last = mine[-1] if mine else None
    return {
        "number": number, "attempts": mine,
        "hypothesis": meta["hypothesis"] or (last.hypothesis if last else ""),
        "base": meta["base"] or (last.base if last else repo.rev(branch)),
        "reference": meta["reference"] or (last.reference if last else None),
    }


def commit_attempt(repo: Repo, config, *, branch: str, tree: str, parent: str, result: Evaluation | Result | dict,
                   notes: str = "", plan: str = "", expected_gain: str | None = None,
                   author: str | None, model: str, cost: float | None = None, tokens: int | None = None,
                   run: str | None = None, extra_trailers: list | None = None) -> Outcome:
    """Commit one attempt on `branch` (whose tip must be `parent`) with its result (an Evaluation, or
    the harness's result document, validated here); the lock is held. `run`: the `kgit evolve` run
    whose cost log holds the model calls behind it (kgit/archive/costlog.py)."""
    judged = Evaluation.of(result)
    result = judged.result
    targets_policy.apply_policy(result, config)  # require_targets: in place, so evolve sees it too
    attempts = repo.read()
    info = experiment_info(repo, attempts, branch)
    number = info["number"]
    index = max((a.attempt for a in info["attempts"]), default=0) + 1
    ok = result.status == "ok"
    base_m = baseline_m = None
    times = measure.result_times(result)
    if ok:
        base_m = _reference_measurement(repo, config, attempts, info["base"], judged)
        baseline_sha = repo.rev(BASELINE_TAG)
        baseline_m = base_m if baseline_sha == info["base"] else _reference_measurement(repo, config, attempts, baseline_sha, judged)
    speedup = measure.ratio(base_m, result.geomean_us, times)
    speedup_baseline = measure.ratio(baseline_m, result.geomean_us, times)
    slug = ExperimentRef.parse(branch).slug
    priced = cost is not None or not (model == "human" or is_offline(model))
    trailers = tr.lines({
        "experiment": number, "attempt": index, "branch": branch, "base": info["base"],
        "reference": info["reference"] or None, "hypothesis": info["hypothesis"],
        "expected_gain": expected_gain or None, **tr.from_result(result), "evaluator": judged.evaluator,
        "speedup": speedup,
        "speedup_baseline": speedup_baseline, "model": model,
        "cost": ("unknown" if cost is None else cost) if priced else None, "tokens": tokens, "run": run,
    })
    trailers += stopped_trailers(judged) + (extra_trailers or [])
    paragraphs = [f"Hypothesis: {info['hypothesis']}", plan, f"Notes: {notes}" if notes else ""]
    if not ok and result.error:
        paragraphs.append("Error excerpt:\n" + _indent(result.error[-2500:]))
    verdict = None
    if ok:
        base_attempt = find(attempts, info["base"])
        verdict = figures.verdict(speedup, result.timing, result.device, figures.result_noise(result),
                                  figures.measurement_noise(base_attempt, base_m) if base_attempt else
                                  base_m.noise if base_m else None,
                                  figures.repeatability(attempts, result.device, result.harness, judged.evaluator))
        subject = (f"{slug}: {verdict.subject_part()}" if verdict.word == "interpreter" else
                   f"{slug}: {verdict.subject_part()} vs base (geomean {result.geomean_us:.1f} us)")
    elif result.status == "stopped":
        subject = racing.subject(slug, judged.race or {"incumbent": info["base"][:10], "timed": len(times),
                                                       "total": "?"})
    else:
        subject = tr.subject(slug, result.status, speedup, result.geomean_us, result.reason)
    # Only a real speedup may carry the lowercase word, so `git log --grep speedup` lists exactly those.
    message = tr.Message(subject, paragraphs, trailers).render(ok=bool(verdict and verdict.claimed))
    sha = repo.commit_tree(tree, [parent], message, author=author)
    repo.update_ref(f"refs/heads/{branch}", sha, parent, reason=f"kgit attempt {number}.{index}")
    _keep_notes(repo, sha, result)
    return Outcome(sha=sha, result=judged, speedup=speedup, speedup_baseline=speedup_baseline,
                   base_times=dict(base_m.times) if base_m else {})


def _keep_notes(repo: Repo, sha: str, result) -> None:
    """A GPU result's per-kernel split, and build facts of more kernel variants than the
    trailers keep, in notes beside its commit (measure.kernels_record, targets_record)."""
    for record in (measure.kernels_record(result), measure.targets_record(result)):
        if record is not None:
            repo.add_note(sha, record)


def stopped_trailers(judged: Evaluation) -> list:
    """A stopped result's race and the shapes timed before it stopped: kept, never ranked (no Kgit-Geomean-us)."""
    if judged.status != "stopped":
        return []
    race = judged.race or {}
    return ([("Kgit-Stopped", f"after {racing.how_far(race)}, {race.get('slower')}x the time of "
                              f"{race.get('incumbent')}")]
            + [("Kgit-Time-us", f"{key} {value:.3f}") for key, value in measure.result_times(judged.result).items()])


def _reference_measurement(repo, config, attempts, sha, measured: Evaluation) -> Measurement | None:
    """The base's timing on the device and harness that just measured `measured`, through the
    same evaluator (backend and host); re-timed through the configured one if absent."""
    result, through = measured.result, measured.evaluator
    attempt = find(attempts, sha)
    if attempt is not None:
        found = measure.comparable(attempt, result.device, result.harness, through)
        if found:
            return found
    judged = evaluate_rev(repo, config, sha)
    if not judged.ok:
        return None
    retimed = dataclasses.replace(measure.note_record(judged.result, tag="re-timed as a base",
                                                      evaluator=judged.evaluator),
                                  noise=figures.result_noise(judged.result), null_keys=frozenset({"noise"}))
    repo.add_note(sha, retimed)
    # Kept either way; compared only when it is the same setup (a Ray task may land elsewhere).
    same = (retimed.device, retimed.harness) == (result.device, result.harness) and (
        through is None or judged.evaluator == through)
    return retimed if same else None


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines())


def describe(repo: Repo, rev: str) -> tuple[Attempt, str, dict, str]:
    """One attempt with its message body, its base's per-shape times and the diff stat."""
    attempts = repo.read()
    sha = resolve(repo, rev, attempts)
    attempt = find(attempts, sha)
    if attempt is None:
        raise KgitError(f"{rev} ({sha[:10]}) is not a kgit attempt; `kgit log` lists the attempts.")
    paragraphs = tr.strip_trailers(repo.body(sha))
    base_times = {}
    diffstat = ""
    if attempt.base:
        base = find(attempts, attempt.base)
        if base is not None:
            found = measure.comparable(base, attempt.device, attempt.harness, attempt.evaluator or None)
            base_times = dict(found.times) if found else {}
        # The base comes from a trailer, which anyone can write: never let it read as an option.
        diffstat = repo.diff(attempt.base, sha, stat=True)
    return attempt, "\n\n".join(paragraphs), base_times, diffstat
