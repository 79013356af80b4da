"""`kgit evolve`: select -> design -> write -> evaluate -> commit, within budgets.

Everything is derived from git, so a second run resumes: experiment numbers continue,
and trees and configurations already measured are not measured again. Only the
driving process writes the archive (under `repo.lock` for the whole run, and a thread
lock around each commit); hypotheses of one iteration may be in flight together
(`evolve.jobs`), their model calls and evaluations running in threads.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from tabulate import tabulate

from kgit import config as config_mod
from kgit.evaluation import backends
from kgit.evaluation.evaluated import Evaluation
from kgit import workflow as experiments
from kgit.archive import trailers as tr
from kgit.archive.refs import ExperimentRef
from kgit.archive.repo import Repo
from kgit.errors import KgitError, LLMError, LLMUnavailable
from kgit import problems as problem_mod
from kgit_harness.result import STATUSES
from kgit.archive import figures, measure, notebook, trees
from kgit.scientist import context as context_mod
from kgit.scientist import protocol
from kgit.scientist import write as write_mod
from kgit.scientist.answers import Selection
from kgit.scientist.llm import Client, Reply
from kgit.costs import cost_text

ERROR_CHARS = 3000
# Interpreter timing where nobody ranks on it (the archive ranks on a GPU): one warm-up and
# three repetitions per CPU benchmark shape, enough to catch a kernel that hangs or is
# absurdly slow; max_time_s this small ends each shape at min_reps.
SCREENING_TIMING = config_mod.TimingConfig(target_rse=0.5, max_time_s=0.001, min_reps=3, warmup=1)


@dataclass
class Row:
    sha: str
    branch: str
    experiment: int
    attempt: int
    status: str
    geomean: float | None
    speedup: float | None
    model: str
    tokens: int | None
    cost: float | None
    reused: str = ""


@dataclass
class Summary:
    rows: list = field(default_factory=list)
    iterations: int = 0
    stop: str = ""
    cost: float = 0.0
    tokens: int = 0
    unpriced_calls: int = 0
    calls: int = 0  # model calls answered (cached ones included)
    model_failures: list = field(default_factory=list)  # one line per model call that got no answer
    models: list = field(default_factory=list)  # the stages' models; ["offline"] for an offline run
    skipped: list = field(default_factory=list)  # reasons of iterations that produced no plan
    interrupted: bool = False
    best_before: object = None
    best_after: object = None
    correctness_only: bool = False  # the evaluation ran in the interpreter: no timing was a speed figure
    rule: str = ""  # how `best` was chosen (kgit/archive/figures.py)


def with_overrides(config, *, iterations=None, model=None, api_base=None, max_cost=None, jobs=None):
    """The configuration with the command line's settings on top (`--model` sets every stage)."""
    llm = config.llm
    if model:
        llm = dataclasses.replace(llm, model=model, select_model=None, design_model=None, write_model=None)
    if api_base:
        llm = dataclasses.replace(llm, api_base=api_base)
    ev = config.evolve
    if iterations is not None:
        ev = dataclasses.replace(ev, iterations=iterations)
    if max_cost is not None:
        ev = dataclasses.replace(ev, max_cost_usd=max_cost)
    if jobs is not None:
        ev = dataclasses.replace(ev, jobs=jobs)
    out = dataclasses.replace(config, llm=llm, evolve=ev)
    out.validate("")
    return out


class Run:
    """One `kgit evolve` run; `evaluate(sha)` (an evaluator: it answers the harness's result document)
    is the one evaluation entry point."""

    def __init__(self, repo: Repo, config, *, evaluate=None, client=None, progress=None, clock=time.monotonic):
        self.repo, self.config = repo, config
        self.task = problem_mod.load_task(repo.root / config.problem)
        self.editable = self.task.files
        self.stopping = threading.Event()
        self.client = client or Client(config.llm, repo.state / "cache" / "llm", manual_dir=repo.state / "manual",
                                       progress=progress, stopping=self.stopping)
        self.scientist = protocol.make(self.client)
        self.progress = progress or (lambda line: None)
        self.clock = clock
        self.started = clock()
        self.summary = Summary(models=sorted({self.client.model(s) for s in ("select", "design", "write")}))
        self.commit_lock = threading.Lock()
        self.known: dict[str, tuple[str, Evaluation]] = {}  # tree -> (sha, result) of evaluated attempts
        self.measured_on: tuple | None = None  # (device, harness, evaluator) of this run's latest evaluation
        self.ctx = protocol.build(repo, config, self.task, repo.root / config.problem, repo.read())
        # In the interpreter, while the archive ranks on a GPU (kgit remeasure notes), this run's
        # timings rank nothing: each shape is only screened (SCREENING_TIMING).
        env = self.ctx.environment
        self.screening = not env.on_gpu and env.ranked_on is not None
        screening = dataclasses.replace(SCREENING_TIMING, protocol=config.timing.protocol)
        timed = dataclasses.replace(config, timing=screening) if self.screening else config
        # One evaluator for the run: its device pool is what lets `jobs` hypotheses share the GPUs.
        self.evaluate = evaluate or backends.get_evaluator(repo, timed, warm=True)

    # -- the run ---------------------------------------------------------------------
    def run(self) -> Summary:
        with self.repo.lock("evolve"):
            self.repo.clean_worktrees()
            attempts = self.repo.read()
            if not attempts:
                raise KgitError(f"{self.repo.root} has no kgit/baseline yet; run `kgit init --problem NAME` first.")
            self.summary.best_before = experiments.best(attempts)
            self._remember(attempts)
            if not self.ctx.environment.on_gpu:
                self.summary.correctness_only = True
                self.progress("no GPU: candidates run in Triton's interpreter on the CPU, so this run checks "
                              "correctness only; its timings are not ranked or shown to the model as speed."
                              + (f" The attempts rank on {self.ctx.environment.ranked_on}, so each CPU benchmark "
                                 f"shape is only screened: {SCREENING_TIMING.warmup} warm-up and "
                                 f"{SCREENING_TIMING.min_reps} timed repetitions (enough to catch a hang or an "
                                 "absurdly slow kernel), not the configured timing." if self.screening else ""))
            # With evolve.jobs > 1, one pool of hypothesis threads for the whole run.
            self.pool = ThreadPoolExecutor(max_workers=self.config.evolve.jobs, thread_name_prefix="kgit-hypothesis")
            self.in_flight, finished = [], False
            try:
                for number in range(1, self.config.evolve.iterations + 1):
                    stop = self._budget_stop()
                    if stop:
                        self.summary.stop = stop
                        break
                    if not self.iteration(number):
                        break
                    self.summary.iterations = number
                    if self.summary.model_failures and not self.summary.calls:
                        break  # no model call has answered yet: the next iteration would fail the same way
                else:
                    finished = True
                try:
                    self._settle(0)  # the hypotheses still running, before the run's last word
                except BaseException:
                    self.stopping.set()
                    raise
                if finished:
                    self.summary.stop = (self._budget_stop() or
                                         f"ran {self.config.evolve.iterations} iteration(s) (evolve.iterations / -n)")
            except KeyboardInterrupt:
                self.stopping.set()
                self.summary.interrupted = True
                self.summary.stop = "interrupted (Ctrl-C); every commit made so far is kept"
            finally:
                self.pool.shutdown(wait=True)
                # The spare judge/runner pairs the run's evaluator kept started (docs/evaluators.md).
                getattr(self.evaluate, "close", lambda: None)()
            final = self.repo.read()
            self.summary.best_after = experiments.best(final)
            self.summary.rule = figures.rule(final)
        if self.summary.model_failures and not self.summary.calls and not self.summary.interrupted:
            raise LLMError(f"every model call of this run failed ({len(self.summary.model_failures)} call(s); "
                           f"the attempts made are in the archive): {self.summary.model_failures[0]}")
        return self.summary

    def iteration(self, number: int) -> bool:
        """One select -> design -> implement round; False when the search cannot go on."""
        tag = f"[{number}/{self.config.evolve.iterations}]"
        attempts = self.repo.read()
        best = experiments.best(attempts)
        try:
            selection, replies, note = self.scientist.select(self.ctx, attempts, best)
        except LLMUnavailable as e:
            selection, replies = Selection(best.sha, None, "fallback to the best attempt"), []
            note = f"the selector did not answer: {e}"
            self.summary.model_failures.append(" ".join(str(e).split()))
            self.summary.skipped.append(f"iteration {number}: select fell back to the best attempt ({e})")
        self._account(replies)
        self._line(tag, "select", "select", f"base {selection.base[:10]}" +
                   (f", reference {selection.reference[:10]}" if selection.reference else "") +
                   (f" ({note})" if note else ""))
        try:
            designed = self.scientist.design(self.ctx, attempts, selection)
        except LLMUnavailable as e:
            designed = protocol.Designed(None, [], f"the designer did not answer: {e}")
            self.summary.model_failures.append(" ".join(str(e).split()))
        plans, design_replies, error = designed.plans, designed.replies, designed.error
        self._account(design_replies)
        if designed.lessons is not None:
            notebook.write(self.repo, designed.lessons, f"design of iteration {number} ({self.client.model('design')})")
        if plans is None:
            self.summary.skipped.append(f"iteration {number}: {error}")
            self._line(tag, "design", "design", f"skipped: {error}")
            return True
        if not plans:
            self.summary.stop = ("the offline strategist has measured every configuration of the marked tunables; "
                                 "mark more values (docs/tunables.md) or use an LLM (--model)")
            self._line(tag, "design", "design", "search space exhausted")
            return False
        if designed.fewer_because:
            self._line(tag, "design", "design", f"{len(plans)} of up to {self.config.evolve.pick} plan(s): "
                                                f"{designed.fewer_because}")
        base_files = trees.commit_files(self.repo, selection.base, self.editable)
        reference_files = (trees.commit_files(self.repo, selection.reference, self.editable)
                           if selection.reference and selection.reference != selection.base else {})
        iteration = protocol.make_iteration(self.ctx, attempts, selection, plans, base_files, reference_files)
        self._line(tag, "design", "design", f"{len(plans)} plan(s): " + "; ".join(
            p.title + (f" (from {p.base[:10]})" if p.base and p.base != selection.base else "") for p in plans))
        shared = replies + design_replies
        if self.config.evolve.jobs == 1:
            for plan in plans:
                self.hypothesis(tag, iteration, plan, shared, len(plans))
        else:
            try:
                # Submitting inside the try: a Ctrl-C between two submits must set the stop
                # event too, or the pool would wait forever on a writer waiting for its answer.
                for plan in plans:
                    self.in_flight.append(self.pool.submit(self.hypothesis, tag, iteration, plan, shared, len(plans)))
                # The next iteration is selected and designed as soon as a hypothesis thread is
                # free, not once every hypothesis of this one is done: one slow candidate then
                # holds one slot, and the others take the next evaluations (docs/evolve.md).
                self._settle(self.config.evolve.jobs - 1 if not self.config.evolve.profile else 0)
            except BaseException:
                # Any failure (Ctrl-C, an evaluator outage, a fatal model error) stops the
                # other hypotheses at their next attempt instead of letting them run on.
                self.stopping.set()
                raise
        if self.config.evolve.profile:  # issue 14: hardware counters of the best attempt so far
            from kgit.evaluation import profile as profile_mod

            self._line(tag, "profile", "design", profile_mod.after_iteration(
                self.repo, self.config, experiments.best(self.repo.read())))
        return True

    def _settle(self, most: int):
        """Wait until at most `most` hypotheses are still running; a failure in any is raised here."""
        while True:
            done = [f for f in self.in_flight if f.done()]
            for f in done:
                self.in_flight.remove(f)
                f.result()  # re-raises what the hypothesis raised
            if len(self.in_flight) <= most:
                return
            wait(self.in_flight, return_when=FIRST_COMPLETED)

    # -- one hypothesis: the writer's attempts ------------------------------------------
    def hypothesis(self, tag: str, iteration: protocol.Iteration, plan, shared: list[Reply], shares: int):
        selection = iteration.selection
        base = plan.base or selection.base
        reference = selection.reference if selection.reference != base else None
        files = iteration.base_files if base == selection.base else trees.commit_files(self.repo, base, self.editable)
        state = {"branch": None, "parent": base}
        error = ""
        for attempt in range(1, self.config.evolve.attempts + 1):
            if self.stopping.is_set() or self._budget_stop():
                return
            unanswered = False
            try:
                new_files, edit_error, reply = self.scientist.write(self.ctx, iteration, plan, files, error, attempt)
            except LLMUnavailable as e:
                # Recorded like edits that did not apply (an empty commit carrying the error);
                # this hypothesis stops, the run goes on.
                new_files, edit_error, reply, unanswered = None, f"the writer did not answer: {e}", None, True
                self.summary.model_failures.append(" ".join(str(e).split()))
            replies = [reply] if reply else []
            if attempt == 1:
                replies += _share(shared, shares)
            self._account([reply] if reply else [])
            parent = state["parent"]
            self._line(tag, "write", "write", f"{plan.title} (base {base[:10]}), attempt {attempt}: " +
                       ("evaluating" if new_files is not None else "the edits did not apply"))
            result, tree, reused = self._result(parent, new_files, edit_error, base)
            notes = [write_mod.notes(reply.text) if reply else "",
                     f"Not measured again: this tree equals attempt {reused[:10]}, whose result is repeated here."
                     if reused else ""]
            sha = self._commit(state, selection, plan, reference, tree, result, "\n\n".join(n for n in notes if n),
                               replies, reused)
            self._line(tag, "write", "write", f"{state['branch']} attempt {attempt}: {result.status}"
                       + (f" ({result.reason})" if result.reason else ""))
            # A stopped attempt is a measurement (correct, clearly slower than the base), not a
            # failure the writer could fix: asking for a fix would only repeat or perturb it.
            if result.ok or result.status == "stopped" or unanswered:
                return
            if new_files is not None:
                files = new_files
            error = _feedback(result)
            state["parent"] = sha

    def _result(self, parent: str, new_files, edit_error, base: str | None = None) -> tuple[Evaluation, str, str]:
        """(result, tree, sha whose result is reused or "") of one candidate: rejected, reused, or evaluated."""
        parent_tree = trees.tree_of(self.repo, parent)
        if new_files is None:
            return _rejected("edits did not apply", edit_error), parent_tree, ""
        tree = trees.build_tree(self.repo, parent, new_files)
        if tree == parent_tree:
            return _rejected("no change", "the edits leave the files exactly as they were; change the code "
                                          "the plan describes."), tree, ""
        with self.commit_lock:
            seen = self.known.get(tree)
            # A result stands for this run only if this run's evaluator would measure it the same way.
            if seen is not None and (seen[1].device, seen[1].harness, seen[1].evaluator) == self.measured_on:
                return Evaluation.of(seen[1].to_document()), tree, seen[0]  # a copy: the commit may change it
        candidate = self.repo.commit_tree(tree, [parent], "kgit: candidate for evaluation\n")
        race = self._race(base) if base else None
        result = Evaluation.of(self.evaluate(candidate, race=race) if race else self.evaluate(candidate))
        if result.device:
            with self.commit_lock:
                self.measured_on = (result.device, result.harness, result.evaluator)
        return result, tree, ""

    def _race(self, base: str) -> dict | None:
        """The base's GPU times for the judge to race a candidate against (harness/racing.py), or None.

        Only once this run has measured on a GPU, with an evaluator that can race, and only
        against the base's own measurement on that device and harness, through that evaluator.
        """
        if not self.config.evolve.race or not getattr(self.evaluate, "races", False):
            return None
        with self.commit_lock:
            measured_on = self.measured_on
        if measured_on is None or figures.is_interpreter(None, measured_on[0]):
            return None
        attempt = next((a for a in self.repo.read() if a.sha == base), None)
        found = measure.comparable(attempt, *measured_on) if attempt is not None else None
        if not found or found.get("status") not in (None, "ok") or not found.get("times"):
            return None
        noise = figures.measurement_noise(attempt, found)
        # The stored noise is the geomean's (per-shape errors in quadrature / k); the race
        # compares shape by shape, so it gets the per-shape error that noise implies.
        return {"name": base[:10], "times": dict(found["times"]),
                "noise": None if noise is None else noise * math.sqrt(len(found["times"]))}

    def _commit(self, state, selection, plan, reference, tree, result, notes, replies, reused) -> str:
        model = self.client.model("write")
        cost, tokens = _totals(replies)
        with self.commit_lock:
            if state["branch"] is None:
                attempts = self.repo.read()
                number = experiments.next_experiment(self.repo, attempts)
                slug = tr.slugify(plan.title) + _base_suffix(attempts, state["parent"])
                state["branch"] = ExperimentRef(number, slug).branch
                self.repo.create_branch(state["branch"], state["parent"], plan.title, reference)
            outcome = experiments.commit_attempt(
                self.repo, self.config, branch=state["branch"], tree=tree, parent=state["parent"], result=result,
                notes=notes, plan=f"{plan.text()}\n\nBase chosen because: {selection.reason}",
                expected_gain=plan.expected_gain, author=f"kgit ({model})", model=model, cost=cost, tokens=tokens)
            # A stopped result says "slower than this base", not what the tree measures: never reused.
            result = outcome.result
            if not reused and result.status not in ("rejected", "stopped"):
                self.known[tree] = (outcome.sha, result)
            attempt = next(a for a in self.repo.read() if a.sha == outcome.sha)
            self.summary.rows.append(Row(outcome.sha, state["branch"], attempt.experiment, attempt.attempt,
                                         result.status, result.geomean_us, outcome.speedup, model,
                                         tokens, cost, reused="same tree" if reused else ""))
        return outcome.sha

    # -- budgets, costs, progress -----------------------------------------------------
    def _budget_stop(self) -> str:
        ev = self.config.evolve
        if ev.max_cost_usd is not None and self.summary.cost >= ev.max_cost_usd:
            return f"spent ${self.summary.cost:.4f} of --max-cost ${ev.max_cost_usd:.4f}"
        if ev.max_wall_s is not None and self.clock() - self.started >= ev.max_wall_s:
            return f"wall-time budget of {ev.max_wall_s:g} s (evolve.max_wall_s) reached"
        return ""

    def _account(self, replies: list[Reply]):
        with self.commit_lock:
            for r in replies:
                self.summary.calls += 1
                if r.cost is None:
                    self.summary.unpriced_calls += 1
                else:
                    self.summary.cost += r.cost
                self.summary.tokens += r.tokens or 0

    def _line(self, tag, stage, client_stage, text):
        model = self.client.model(client_stage)
        spent = ("no model calls" if protocol.is_offline(model) else "no calls" if not self.summary.calls else
                 f"{self.summary.tokens} tok, {cost_text(self.summary.cost, self.summary.unpriced_calls)}")
        self.progress(f"{tag} {stage:<6} {model} ({spent} so far): {text}")

    def _remember(self, attempts):
        """Results of trees measured before this run, rebuilt from their trailers."""
        for a in attempts:
            if a.status in ("rejected", "unknown", "stopped") or a.tree in self.known:
                continue
            try:
                self.known[a.tree] = (a.sha, _result_from(a))
            except ValueError:  # a hand-edited commit: "ok" with no geomean is no result to repeat
                continue


def _base_suffix(attempts, base: str) -> str:
    """"-on-N" when the experiment starts from experiment N: the same change tried from
    different bases (the offline strategist's habit) then gets different branch names."""
    found = experiments.find(attempts, base)
    return f"-on-{found.experiment}" if found is not None and found.experiment > 0 else ""


def _share(replies: list[Reply], shares: int) -> list[Reply]:
    """A hypothesis's part of the iteration's select and design calls, so the commits add up to the run."""
    return [Reply("", r.model, None if r.tokens is None else r.tokens // shares,
                  None if r.cost is None else r.cost / shares, r.cached) for r in replies]


def _totals(replies: list[Reply]) -> tuple[float | None, int | None]:
    if not replies:
        return None, None
    cost = None if any(r.cost is None for r in replies) else sum(r.cost for r in replies)
    known = [r.tokens for r in replies if r.tokens is not None]
    return cost, (sum(known) if known else None)


def _rejected(reason: str, error: str) -> Evaluation:
    return Evaluation.new("rejected", reason=reason, error=error, eval_s=0.0)


def _result_from(a) -> Evaluation:
    """A result rebuilt from an attempt's trailers (what reusing its measurement needs)."""
    fields = tr.to_result(a)
    status = fields.pop("status")
    error = None if a.ok else (f"the same tree was measured as {a.sha[:10]} ({a.status}); "
                               f"`git show {a.sha[:10]}` has its error excerpt.")
    reused = Evaluation.new(status if status in STATUSES else "crash", **{**fields, "eval_s": 0.0}, error=error)
    reused.worker = measure.worker_of(a.evaluator)  # its figures stay those of the evaluator that took them
    return reused


def _feedback(result: Evaluation) -> str:
    """What the writer is told about a failed attempt."""
    status = result.status
    head = {"rejected": "Your edits could not be used", "compile-error": "The kernel did not compile",
            "incorrect": "The kernel ran but gave wrong results", "runtime-error": "The kernel failed at run time",
            "timeout": "The evaluation timed out", "crash": "The evaluation process crashed",
            "unsupported": "The kernel cannot run on this machine"}.get(status, status)
    reason = f" ({result.reason})" if result.reason else ""
    error = context_mod.candidate_error(result.error or "").strip()
    lacks = result.result.extra.get("lacks")
    machine = (f"\n\nThis machine, by the harness's own probe: {'; '.join(map(str, lacks))}."
               if isinstance(lacks, list) and lacks else "")
    return f"{head}{reason}.\n\n{error[-ERROR_CHARS:]}{machine}"


# -- entry points --------------------------------------------------------------------
def evolve(repo: Repo, config, *, evaluate=None, client=None, progress=None) -> Summary:
    return Run(repo, config, evaluate=evaluate, client=client, progress=progress).run()


def dry_run(repo: Repo, config, *, client=None) -> str:
    """The prompts the next iteration would send (or the offline plans), with no model call."""
    # No evaluator: a dry run must not start a Ray cluster or probe GPUs.
    run = Run(repo, config, client=client, evaluate=lambda sha: None)
    attempts = repo.read()
    best = experiments.best(attempts)
    if best is None:
        raise KgitError(f"{repo.root} has no kgit/baseline yet; run `kgit init --problem NAME` first.")
    return "\n\n".join(run.scientist.preview(run.ctx, attempts, best))


def summary_text(summary: Summary) -> str:
    rows = [[r.experiment, r.attempt, r.branch, r.sha[:10], r.status + (f" ({r.reused})" if r.reused else ""),
             "" if r.geomean is None else f"{r.geomean:.1f}",
             # An interpreter ratio is no speed figure: shown to nobody as one.
             "" if r.speedup is None or summary.correctness_only else f"{r.speedup:.2f}x",
             "" if r.tokens is None else r.tokens,
             "unpriced" if r.cost is None and not protocol.is_offline(r.model) else "" if r.cost is None
             else f"{r.cost:.4f}"]
            for r in summary.rows]
    lines = [tabulate(rows, headers=["exp", "att", "branch", "sha", "status", "geomean us", "vs base", "tokens",
                                     "cost usd"], tablefmt="simple") if rows else "no attempts were made."]
    lines.append(f"\n{len(summary.rows)} attempt(s) in {summary.iterations} iteration(s); "
                 f"{sum(r.status == 'ok' for r in summary.rows)} correct. Stopped: {summary.stop}.")
    if all(protocol.is_offline(m) for m in summary.models):
        lines.append("model use: none (offline)")
    else:
        lines.append(f"model use: {summary.calls} call(s) to {', '.join(summary.models)}, "
                     f"{summary.tokens or 'no'} tokens counted, {cost_text(summary.cost, summary.unpriced_calls)}" +
                     ("; a call without a price (a model litellm's table lacks, or the manual model) is not "
                      "counted by --max-cost" if summary.unpriced_calls else "") +
                     (f"; {len(summary.model_failures)} call(s) got no answer" if summary.model_failures else ""))
    for reason in summary.skipped:
        lines.append(f"skipped {reason}")
    before, after = summary.best_before, summary.best_after
    if after is not None:
        gained = "" if before is None or before.sha == after.sha else f" (was {before.sha[:10]})"
        if summary.correctness_only:
            lines.append(f"best: {after.sha[:10]} {after.branch}{gained}: {summary.rule}")
        else:
            lines.append(f"best: {after.sha[:10]} {after.branch} {after.geomean:.1f} us, "
                         f"{after.speedup_baseline or 1:.2f}x vs baseline{gained} ({summary.rule})")
    if summary.correctness_only:
        lines.append("checked correctness only: the candidates ran in Triton's interpreter on the CPU; "
                     "measure them on a GPU with `kgit remeasure --all` there.")
    return "\n".join(lines)
