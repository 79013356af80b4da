"""`kgit pr EXPERIMENT`: propose an experiment's best attempt for code review.

The archive keeps every attempt, failures included; a reviewer wants one commit. So
the best attempt's tree becomes one commit on top of the experiment's base. When that
base is itself an attempt the remote's base branch does not hold yet (experiment 5
built on experiment 2's best), each experiment on the lineage in between becomes one
commit of its own, so the pull request never carries failed attempts. The commits go
to a review branch `kgit-review/<N>-<slug>` (outside kgit/*, so the archive never
reads them), and `gh pr create` opens the pull request when gh is installed and
logged in; otherwise the body and the exact command are printed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from tabulate import tabulate

from kgit.archive import measure, remotes
from kgit.archive import trailers as tr
from kgit.archive.attempt import Attempt
from kgit.archive.figures import GPU_WOULD_ADD, INTERPRETER_MEANING
from kgit.archive.figures import timed as timed_for_speed
from kgit.archive.notes import Measurement
from kgit.archive.refs import ExperimentRef
from kgit.archive.repo import Repo
from kgit.costs import cost_text
from kgit.errors import KgitError
from kgit.review import campaign as review

REVIEW_PREFIX = "kgit-review/"
_SQUASH_OF = re.compile(r"Kgit-Squash-Of: ([0-9a-f]{40})")


@dataclass
class Proposal:
    branch: str  # the review branch, without refs/heads/
    sha: str  # its tip: the squashed best attempt
    attempt: str  # the archive attempt it squashes
    base_branch: str
    title: str
    body: str
    body_file: str
    command: list  # the gh command that opens (or would open) the pull request
    stack: list = field(default_factory=list)  # (experiment, squashed sha) oldest first
    opened: bool = False
    url: str = ""
    why_not_opened: str = ""
    target_note: str = ""  # why base_branch was chosen, when kgit chose it

    def to_json(self) -> dict:
        return {**vars(self), "command": shlex.join(self.command)}


def propose(repo: Repo, task, experiment: str, remote: str = "origin", base_branch: str | None = None,
            gh: str = "gh") -> Proposal:
    campaign = review.load(repo, task)
    exp = campaign.experiments.get(_number(experiment))
    if exp is None:
        raise KgitError(f"there is no experiment {experiment!r}; `kgit log` lists them (the exp column).")
    best = exp.best
    if best is None:
        raise KgitError(f"experiment {exp.number} has no correct attempt, so there is nothing to propose; "
                        f"`kgit lineage {exp.branch}` and `kgit show {exp.branch}` show what happened.")
    if not remotes.url(repo, remote):
        raise KgitError(f"no git remote named {remote!r}; add one (`git remote add {remote} URL`) or name "
                        "another with --remote.")
    target_note = ""
    if not base_branch:
        base_branch, target_note = _default_base_branch(repo, campaign, remote)
    tip = _remote_tip(repo, remote, base_branch)

    steps = [a for a in review.lineage(campaign.attempts, best.sha) if not a.is_baseline]
    parent = steps[0].base if steps else campaign.baseline.sha
    merged = _squashed_on(repo, tip)
    while steps:
        if repo.is_ancestor(steps[0].sha, tip):
            parent = steps.pop(0).sha
        elif steps[0].sha in merged:  # an earlier `kgit pr` of this step was merged
            parent = merged[steps.pop(0).sha]
        else:
            break
    if not steps:
        raise KgitError(f"{remote}/{base_branch} already holds experiment {exp.number}'s best attempt "
                        f"({best.sha[:10]}); there is nothing left to review.")
    bodies = _bodies(repo, [a.sha for a in exp.attempts])
    figures = Figures.of(campaign, exp)
    overall = figures.vs_baseline(best)
    title = tr.scrub(f"kgit #{exp.number}: {review.short(exp.hypothesis, 60)}"
                     + (f" ({overall:.2f}x vs baseline)" if overall else ""))
    stack = []
    for step in steps:
        intro = tr.scrub(f"kgit #{step.experiment}: {review.short(step.hypothesis, 60)}")
        message = tr.Message(title if step is steps[-1] else intro,
                             [tr.scrub(f"Squashed from attempt {step.sha} ({step.branch}, attempt "
                                       f"{step.attempt}); every attempt stays in the kgit archive."),
                              tr.scrub(step.hypothesis)],
                             tr.lines({"squash_of": step.sha})).render(ok=False)
        parent = repo.commit_tree(step.tree, [parent], message)
        stack.append((step.experiment, parent))
    branch = f"{REVIEW_PREFIX}{exp.number}-{ExperimentRef.parse(exp.branch).slug}"
    # The review branch is kgit's own: rerunning `kgit pr` replaces it with fresh commits.
    repo.update_ref(f"refs/heads/{branch}", parent, reason=f"kgit pr {exp.number}")
    remotes.push(repo, remote, f"{parent}:refs/heads/{branch}", force=True)

    body = pr_body(campaign, exp, bodies, remote=remote, branch=branch, squashed=parent,
                   stack=stack, base_branch=base_branch, figures=figures)
    path = repo.state / "pr" / f"{exp.number}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    command = [gh, "pr", "create", "--base", base_branch, "--head", branch, "--title", title,
               "--body-file", str(path)]
    proposal = Proposal(branch=branch, sha=parent, attempt=best.sha, base_branch=base_branch, title=title,
                        body=body, body_file=str(path), command=command, stack=stack, target_note=target_note)
    _open(repo, proposal, gh)
    return proposal


def _number(text: str) -> int:
    text = str(text).strip().lstrip("#")
    found = ExperimentRef.match(text)
    if found:
        return found.number
    try:
        return int(text)
    except ValueError:
        raise KgitError(f"{text!r} is not an experiment: give its number (2) or its branch (kgit/2-...).") from None


def _default_base_branch(repo: Repo, campaign, remote: str) -> tuple[str, str]:
    """(branch, why) for the pull request's target when none was named.

    The branch `kgit init` committed the baseline on (its Kgit-Branch trailer), if the
    remote has it; otherwise the remote's default branch (a local `master` against
    GitHub's `main`), and the reason says so.
    """
    local = campaign.baseline.branch
    local = local if local and local != "HEAD" else ""
    if local and remotes.remote_sha(repo, remote, f"refs/heads/{local}"):
        return local, ""
    default = remotes.default_branch(repo, remote)
    if default:
        why = (f"{remote} has no branch {local}, so the pull request targets {remote}'s default branch {default}"
               if local else f"the baseline was committed on no branch, so the pull request targets "
                             f"{remote}'s default branch {default}")
        return default, why + "; name another with --base-branch"
    return local or "main", ""


def _remote_tip(repo: Repo, remote: str, branch: str) -> str:
    tip = remotes.remote_sha(repo, remote, f"refs/heads/{branch}")
    if tip is None:
        raise KgitError(f"{remote} has no branch {branch}; push it first (`git push {remote} {branch}`) "
                        "or name the pull request's target with --base-branch.")
    if not repo.has_commit(tip):  # the ancestry check needs the remote's commits here
        remotes.fetch(repo, remote, f"refs/heads/{branch}")
    return tip


def _squashed_on(repo: Repo, tip: str) -> dict[str, str]:
    """Attempt sha -> the commit on the target branch that carries it (Kgit-Squash-Of).

    A pull request merged with a merge commit keeps kgit's commits; a squash merge keeps
    their messages in its own, so the trailer is searched anywhere in the message.
    """
    found: dict = {}
    for sha, message in repo.messages(tip, grep="Kgit-Squash-Of: "):
        for attempt in _SQUASH_OF.findall(message):
            found.setdefault(attempt, sha)  # newest first: the latest merge wins
    return found


def _bodies(repo: Repo, shas: list[str]) -> dict[str, str]:
    """The message bodies of several commits from one git call."""
    return repo.bodies(shas)


def _open(repo: Repo, proposal: Proposal, gh: str):
    """Run gh when it is installed and logged in; otherwise say why, and leave the command to the user."""
    if not shutil.which(gh):
        proposal.why_not_opened = f"{gh} is not installed"
        return
    env = dict(os.environ)
    status = subprocess.run([gh, "auth", "status"], cwd=repo.root, capture_output=True, text=True, env=env)
    if status.returncode != 0:
        proposal.why_not_opened = f"{gh} is not logged in (`{gh} auth login`)"
        return
    done = subprocess.run(proposal.command, cwd=repo.root, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise KgitError(f"`{gh} pr create` failed: {(done.stderr or done.stdout).strip()[:600]}\nThe branch "
                        f"{proposal.branch} is pushed; fix that and run:\n{shlex.join(proposal.command)}")
    proposal.opened = True
    proposal.url = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


# -- the body ---------------------------------------------------------------------------
@dataclass
class Figures:
    """The one measurement of the baseline and of the PR base that every figure of a
    pull request (title, results table, attempts table) is computed from."""

    best: Attempt
    base: Attempt | None  # the PR base's attempt
    base_m: Measurement | None
    baseline: Attempt
    baseline_m: Measurement | None

    @classmethod
    def of(cls, campaign, exp) -> Figures:
        best = exp.best
        base = next((a for a in campaign.attempts if a.sha == exp.base), None)
        return cls(best, base, review.measurement_on(base, best) if base else None,
                   campaign.baseline, review.measurement_on(campaign.baseline, best))

    def _same_run(self, attempt) -> bool:
        return (attempt.device, attempt.harness) == (self.best.device, self.best.harness)

    def vs_base(self, attempt) -> float | None:
        """None for an interpreter timing: it is no speed figure, so no ratio of it is shown."""
        if not timed_for_speed(attempt):
            return None
        if self.base_m and self._same_run(attempt):
            return measure.ratio(self.base_m, attempt.geomean_us, attempt.times)
        return attempt.speedup  # measured elsewhere: its own trailer, against a base timing from there

    def vs_baseline(self, attempt) -> float | None:
        if not timed_for_speed(attempt):
            return None
        if self.baseline_m and self._same_run(attempt):
            return measure.ratio(self.baseline_m, attempt.geomean_us, attempt.times)
        return attempt.speedup_baseline

    def statement(self) -> str:
        parts = [f"the baseline `{self.baseline.sha[:10]}` {_source(self.baseline_m)}"]
        if self.base is not None and self.base.sha != self.baseline.sha:
            parts.append(f"the PR base `{self.base.sha[:10]}` {_source(self.base_m)}")
        return ("Every speedup in this pull request (title, results, attempts) compares against one "
                "measurement each: " + " and ".join(parts) + ".")


def _source(m: Measurement | None) -> str:
    if not m:
        return "(never measured on this device: the figures are the commits' own)"
    if m.source == "commit":
        return "as measured by its own commit"
    when = dt.datetime.fromtimestamp(m.when, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if m.when else ""
    tag = m.device_tag or m.tag or "a note"
    return f"as re-measured in refs/notes/kgit ({tag}{', ' + when if when else ''}, {m.geomean_us or 0:.2f} us)"


def pr_body(campaign, exp, bodies: dict, *, remote: str, branch: str, squashed: str, stack: list,
            base_branch: str, figures: Figures | None = None) -> str:
    best = exp.best
    figures = figures or Figures.of(campaign, exp)
    lines = ["## Hypothesis", "", exp.hypothesis, ""]
    plan = _plan(bodies.get(best.sha, ""))
    if plan:
        lines += ["### Plan and notes", "", plan, ""]
    if timed_for_speed(best):
        lines += [f"## Results on {best.device}", "", _results_table(figures), "",
                  f"Measured with `{best.timing}` timing, harness `{best.harness or 'unknown'}`; "
                  "speedup = old time / new time, above 1 is faster. " + figures.statement(), ""]
    else:
        lines += [f"## Correctness on {best.device}", "", _results_table(figures, ratios=False), "",
                  f"Correct on every test shape. Every timing here comes from {INTERPRETER_MEANING}: "
                  "the times are listed, not compared, and this pull request claims no speedup. "
                  + GPU_WOULD_ADD, ""]
    if len(stack) > 1:
        lines += ["## Stacked experiments", "",
                  f"This experiment builds on others that `{base_branch}` does not hold yet, so this pull request "
                  "carries one commit per experiment on the lineage:", ""]
        lines += [f"- #{number}: `{sha[:10]}`" for number, sha in stack]
        lines.append("")
    lines += ["## Attempts", "", _attempts_table(exp, bodies, figures), ""]
    cost = sum(a.cost or 0.0 for a in exp.attempts)
    tokens = sum(a.tokens or 0 for a in exp.attempts)
    lines += ["## Model and cost", "",
              f"Model: {exp.models}; LLM cost {cost_text(cost, exp.unpriced, 3, 'attempt')} "
              f"({int(tokens)} tokens); "
              f"evaluation time {exp.eval_s:.0f} s over {len(exp.attempts)} attempt(s).", ""]
    lines += ["## Reproduce", "", "```",
              f"git fetch {remote} {branch}",
              f"kgit eval {squashed}   # the same tree as archive attempt {best.sha}",
              f"kgit show {best.sha}",
              "```", "",
              f"Every attempt, failed ones included, stays on `{exp.branch}` in the kgit archive.", ""]
    return "\n".join(lines)


def _plan(body: str) -> str:
    """The commit body without its trailer block and error excerpt."""
    paragraphs = tr.strip_trailers(body)
    keep = [p.strip() for p in paragraphs if p.strip() and not p.startswith(("Hypothesis:", "Error excerpt:"))]
    return "\n\n".join(keep)


def _results_table(figures: Figures, ratios: bool = True) -> str:
    """Per shape: the baseline's, the PR base's and this PR's times, and (`ratios`) the speedups."""
    best, base_m, baseline_m = figures.best, figures.base_m, figures.baseline_m
    before = base_m.times if base_m else {}
    first = baseline_m.times if baseline_m else {}
    rows = []
    for key, us in best.times.items():
        b, f = before.get(key), first.get(key)
        rows.append([key, _us_cell(f), _us_cell(b), f"{us:.2f}"] + ([_speedup_cell(b, us), _speedup_cell(f, us)] if ratios else []))
    g_base = base_m.geomean_us if base_m else None
    g_first = baseline_m.geomean_us if baseline_m else None
    # The geomean row's ratios are the title's and the attempts table's (measure.ratio).
    rows.append(["**geomean**", _us_cell(g_first), _us_cell(g_base), f"{best.geomean_us:.2f}"]
                + ([_ratio_cell(figures.vs_base(best)), _ratio_cell(figures.vs_baseline(best))] if ratios else []))
    headers = ["shape", "baseline us", "PR base us", "this PR us"] + (["vs PR base", "vs baseline"] if ratios else [])
    return tabulate(rows, headers=headers, tablefmt="github")


def _attempts_table(exp, bodies: dict, figures: Figures) -> str:
    rows = []
    for a in exp.attempts:
        why = "" if a.ok else _why(a, bodies.get(a.sha, ""))
        rows.append([a.attempt, f"`{a.sha[:10]}`", a.status, _us_cell(a.geomean_us), _ratio_cell(figures.vs_base(a) if a.ok else None),
                     why.replace("|", "/")])
    return tabulate(rows, headers=["attempt", "sha", "status", "geomean us", "vs PR base", "why it failed"],
                    tablefmt="github")


def _why(attempt, body: str) -> str:
    if attempt.reason:
        return attempt.reason
    for paragraph in body.split("\n\n"):
        if paragraph.startswith("Error excerpt:"):
            # A traceback ends with the exception itself: its last line says the most.
            lines = [line.strip() for line in paragraph.splitlines()[1:] if line.strip()]
            if lines:
                return review.short(lines[-1], 140)
    return attempt.status


def _us_cell(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio_cell(ratio) -> str:
    return "-" if not ratio else f"{ratio:.2f}x"


def _speedup_cell(before, after) -> str:
    return "-" if not before or not after else f"{before / after:.2f}x"
