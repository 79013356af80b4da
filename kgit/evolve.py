"""`kgit evolve`: select -> design -> write -> evaluate -> commit, within budgets.

Everything is derived from git, so a second run resumes: experiment numbers continue,
and trees and configurations already measured are not measured again; plans a run
designed but did not finish (a budget, a rate limit, an unanswered writer, Ctrl-C, an
error) are kept for the next one (kgit/scientist/pending.py). Only the driving process
writes the archive (under `repo.lock` for the whole run, and a thread lock around each
commit); hypotheses of one iteration may be in flight together (`evolve.jobs`), their
model calls and evaluations running in threads. Every model call goes through one
Ledger (kgit/scientist/ledger.py): checked against `--max-cost` before it is made,
recorded in the archive's cost log once answered.
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
from kgit import live, workflow
from kgit import problems as problem_mod
from kgit.archive import costlog, figures, measure, notebook, trees
from kgit.archive import trailers as tr
from kgit.archive.attempt import Attempt
from kgit.archive.refs import ExperimentRef
from kgit.archive.repo import Repo
from kgit.costs import amount, cost_text, usd
from kgit.errors import INTERRUPTED_MESSAGE, KgitError, LLMError, LLMRateLimited, LLMUnavailable
from kgit.evaluation import backends, gpus
from kgit.evaluation.evaluated import Evaluation
from kgit.scientist import context as context_mod
from kgit.scientist import pending, protocol
from kgit.scientist import write as write_mod
from kgit.scientist.answers import Selection
from kgit.scientist.ledger import BudgetReached, Ledger
from kgit.scientist.llm import Client, Reply
from kgit_harness import racing
from kgit_harness.result import STATUSES

ERROR_CHARS = 3000
# Interpreter timing where nobody ranks on it (the archive ranks on a GPU): one warm-up and
# three repetitions per CPU benchmark shape, enough to catch a kernel that hangs or is
# absurdly slow; max_time_s this small ends each shape at min_reps.
SCREENING_TIMING = config_mod.TimingConfig(target_rse=0.5, max_time_s=0.001, min_reps=3, warmup=1)


NO_ANSWER = "no answer"  # a writer's status in the summary when the model gave none: nothing is committed


@dataclass
class Row:
    sha: str  # "" for a writer that got no answer (no commit)
    branch: str
    experiment: int | None
    attempt: int | None
    status: str
    geomean_us: float | None
    speedup: float | None
    model: str
    tokens: int | None
    cost: float | None
    reused: str = ""  # said after the status: "same tree" (a result repeated), "kept for the next run"


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
    best_before: Attempt | None = None
    best_after: Attempt | None = None
    correctness_only: bool = False  # the evaluation ran in the interpreter: no timing was a speed figure
    rule: str = ""  # how `best` was chosen (kgit/archive/figures.py)
    run: str = ""  # this run's name in the cost log and the commits' Kgit-Run
    kept: int = 0  # plans not finished, kept for the next run (kgit/scientist/pending.py)
    resumed: int = 0  # plans an earlier run kept that this one took up
    error: str = ""  # the error that ended the run, if one did


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
        self.costs = costlog.Log(repo)
        # The scientist calls the model through the ledger: the budget before each call, the cost log after.
        self.ledger = Ledger(self.client, self.costs, config.evolve.max_cost_usd, on_call=self._account)
        self.scientist = protocol.make(self.ledger)
        self.progress = progress or (lambda line: None)
        self.clock = clock
        self.started = clock()
        self.summary = Summary(models=sorted({self.client.model(s) for s in ("select", "design", "write")}),
                               run=self.costs.run)
        self.commit_lock = threading.Lock()
        self.known: dict[str, tuple[str, Evaluation]] = {}  # tree -> (sha, result) of evaluated attempts
        self.measured_on: tuple | None = None  # (device, harness, evaluator) of this run's latest evaluation
        self.halt = ""  # why no more model calls are made (the budget, a rate limit)
        self.batches: list[pending.Batch] = []  # every batch of plans this run holds, finished or not
        self.waiting: list[pending.Batch] = []  # batches kept by an earlier run, not taken up yet
        self.later: list[pending.Batch] = []  # kept batches this run cannot carry out (the other kind of designer)
        # The machine's GPUs, found here and handed to the scientist (which never looks itself).
        host = gpus.discover() if config.evaluator.backend == "local" else None
        self.ctx = protocol.build(repo, config, self.task, repo.root / config.problem, repo.read(), host)
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
        """The run's summary; a KgitError that ends it carries the summary as `error.summary`."""
        failure = None
        with self.repo.lock("evolve"):
            self.repo.clean_worktrees()
            attempts = self.repo.read()
            if not attempts:
                raise KgitError(f"{self.repo.root} has no kgit/baseline yet; run `kgit init --problem NAME` first.")
            self.summary.best_before = workflow.best(attempts)
            self._remember(attempts)
            if not self.ctx.environment.on_gpu:
                self.summary.correctness_only = True
                self.progress("no GPU: candidates run in Triton's interpreter on the CPU, so this run checks "
                              "correctness only; its timings are not ranked or shown to the model as speed."
                              + (f" The attempts rank on {self.ctx.environment.ranked_on}, so each CPU benchmark "
                                 f"shape is only screened: {SCREENING_TIMING.warmup} warm-up and "
                                 f"{SCREENING_TIMING.min_reps} timed repetitions (enough to catch a hang or an "
                                 "absurdly slow kernel), not the configured timing." if self.screening else ""))
            self._take_pending(attempts)
            # Spare judge/runner pairs start now, while the model selects and designs.
            getattr(self.evaluate, "prestart", lambda jobs: None)(self.config.evolve.jobs)
            # With evolve.jobs > 1, one pool of hypothesis threads for the whole run.
            self.pool = ThreadPoolExecutor(max_workers=self.config.evolve.jobs, thread_name_prefix="kgit-hypothesis")
            self.in_flight: list = []
            finished = False
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
                        # No model call has answered yet: the next iteration would fail the same way.
                        self.summary.stop = "no model call has answered (the error below)"
                        break
                else:
                    finished = True
                try:
                    self._settle(0)  # the hypotheses still running, before the run's last word
                except BaseException:
                    self.stopping.set()
                    raise
                if finished or not self.summary.stop:
                    self.summary.stop = (self._budget_stop() or self.summary.stop or
                                         f"ran {self.config.evolve.iterations} iteration(s) (evolve.iterations / -n)")
            except KeyboardInterrupt:
                self.stopping.set()
                self.summary.interrupted = True
                self.summary.stop = INTERRUPTED_MESSAGE
            except KgitError as e:
                self.stopping.set()
                failure = e
                self.summary.error = " ".join(str(e).split())
                self.summary.stop = "stopped by an error (below); every commit made so far is kept"
            finally:
                self.pool.shutdown(wait=True)
                # The spare judge/runner pairs the run's evaluator kept started (docs/evaluators.md).
                getattr(self.evaluate, "close", lambda: None)()
                # Plans designed (and paid for) but not finished wait for the next run.
                self.summary.kept = pending.save(self.repo.state, self.later + self.waiting + self.batches)
            final = self.repo.read()
            self.summary.best_after = workflow.best(final)
            self.summary.rule = figures.ranking_rule(final)
        if failure is None and self.summary.model_failures and not self.summary.calls and not self.summary.interrupted:
            failure = LLMError(f"every model call of this run failed ({len(self.summary.model_failures)} call(s); "
                               f"the attempts made are in the archive): {self.summary.model_failures[0]}")
        if failure is not None:
            failure.summary = self.summary  # so the run's summary is printed however it ended
            raise failure
        return self.summary

    def _take_pending(self, attempts):
        """The plans an earlier run kept: those this run can carry out, checked against the archive."""
        ready, later, notes = pending.resumable(self.repo, attempts, protocol.is_offline(self.client.model("design")),
                                                self.config.evolve.attempts)
        for note in notes:
            self.progress(f"pending plans: {note}")
        self.waiting, self.later = ready, later

    def iteration(self, number: int) -> bool:
        """One select -> design -> implement round (or plans kept by an earlier run); False when the
        search cannot go on."""
        tag = f"[{number}/{self.config.evolve.iterations}]"
        if self.waiting:
            return self.resume(tag, self.waiting.pop(0))
        attempts = self.repo.read()
        selected = self._select(tag, number, attempts)
        if selected is None:
            return False
        selection, replies = selected
        designed = self._design(tag, number, attempts, selection)
        if designed is None:
            return False
        if designed.plans is None:
            self.summary.skipped.append(f"iteration {number}: {designed.error}")
            self._line(tag, "design", "design", f"skipped: {designed.error}")
            return True
        if not designed.plans:
            self.summary.stop = designed.none_because or "the designer proposed no plan"
            self._line(tag, "design", "design", f"no plan: {self.summary.stop}")
            return False
        self._announce_plans(tag, designed, selection)
        return self._carry_out(tag, self._batch(selection, designed, replies), attempts)

    def _select(self, tag: str, number: int, attempts) -> tuple[Selection, list] | None:
        """The base (and reference) to build on, and the replies that chose it; None when no more
        model calls may be made."""
        best = workflow.best(attempts)
        try:
            selection, replies, note = self.scientist.select(self.ctx, attempts, best)
        except (BudgetReached, LLMRateLimited) as e:
            self._stop_calls(tag, "select", e)
            return None
        except LLMUnavailable as e:
            selection, replies = Selection(best.sha, None, "fallback to the best attempt"), []
            note = f"the selector did not answer ({e}); falling back to the best attempt"
            self.summary.model_failures.append(" ".join(str(e).split()))
            self.summary.skipped.append(f"iteration {number}: select fell back to the best attempt ({e})")
        self._line(tag, "select", "select", f"base {selection.base[:10]}" +
                   (f", reference {selection.reference[:10]}" if selection.reference else "") +
                   (f" ({note})" if note else ""))
        return selection, replies

    def _design(self, tag: str, number: int, attempts, selection: Selection) -> protocol.Designed | None:
        """The designer's plans for `selection` (its lessons kept in the lab notebook); None when no
        more model calls may be made."""
        try:
            designed = self.scientist.design(self.ctx, attempts, selection)
        except (BudgetReached, LLMRateLimited) as e:
            self._stop_calls(tag, "design", e)
            return None
        except LLMUnavailable as e:
            designed = protocol.Designed(None, [], f"the designer did not answer ({e}); this iteration is skipped")
            self.summary.model_failures.append(" ".join(str(e).split()))
        if designed.lessons is not None:
            notebook.write(self.repo, designed.lessons, f"design of iteration {number} ({self.client.model('design')})")
        return designed

    def _announce_plans(self, tag: str, designed: protocol.Designed, selection: Selection) -> None:
        plans = designed.plans
        if designed.fewer_because:
            self._line(tag, "design", "design", f"{len(plans)} of up to {self.config.evolve.pick} plan(s): "
                                                f"{designed.fewer_because}")
        self._line(tag, "design", "design", f"{len(plans)} plan(s): " + "; ".join(
            p.title + (f" (from {p.base[:10]})" if p.base and p.base != selection.base else "") for p in plans))

    def _batch(self, selection: Selection, designed: protocol.Designed, replies: list) -> pending.Batch:
        """The plans to carry out, each with its share of the iteration's select and design calls,
        so that the commits add up to the run."""
        plans = designed.plans
        share_cost, share_tokens = _totals(_share(replies + designed.replies, len(plans)))
        return pending.Batch(selection, plans, [
            pending.Open(p, p.base or selection.base, p.base or selection.base, share_cost=share_cost,
                         share_tokens=share_tokens) for p in plans],
            offline=protocol.is_offline(self.client.model("design")))

    def resume(self, tag: str, batch: pending.Batch) -> bool:
        """Carry out plans an earlier run designed and kept (no select or design call)."""
        self.summary.resumed += len(batch.open)
        self._line(tag, "design", "design", f"{len(batch.open)} plan(s) kept by an earlier run, designed and paid "
                                            "for then: " + "; ".join(h.plan.title for h in batch.open))
        return self._carry_out(tag, batch, self.repo.read())

    def _carry_out(self, tag: str, batch: pending.Batch, attempts) -> bool:
        """The writers of one batch: in this thread, or in the pool with evolve.jobs > 1."""
        selection = batch.selection
        with self.commit_lock:
            self.batches.append(batch)
        base_files = trees.commit_files(self.repo, selection.base, self.editable)
        reference_files = (trees.commit_files(self.repo, selection.reference, self.editable)
                           if selection.reference and selection.reference != selection.base else {})
        iteration = protocol.make_iteration(self.ctx, attempts, selection, batch.plans, base_files, reference_files)
        if self.config.evolve.jobs == 1:
            for h in list(batch.open):
                self.hypothesis(tag, iteration, batch, h)
        else:
            try:
                # Submitting inside the try: a Ctrl-C between two submits must set the stop
                # event too, or the pool would wait forever on a writer waiting for its answer.
                for h in list(batch.open):
                    self.in_flight.append(self.pool.submit(self.hypothesis, tag, iteration, batch, h))
                # The next iteration is selected and designed as soon as a hypothesis thread is
                # free, not once every hypothesis of this one is done: one slow candidate then
                # holds one slot, and the others take the next evaluations (docs/evolve.md).
                self._settle(self.config.evolve.jobs - 1 if not self.config.evolve.profile else 0)
            except BaseException:
                # Any failure (Ctrl-C, an evaluator outage, a fatal model error) stops the
                # other hypotheses at their next attempt instead of letting them run on.
                self.stopping.set()
                raise
        if self.config.evolve.profile:  # hardware counters of the best attempt so far (docs/targets.md)
            from kgit.evaluation import profile as profile_mod

            self._line(tag, "profile", "design", profile_mod.after_iteration(
                self.repo, self.config, workflow.best(self.repo.read())))
        return True

    def _stop_calls(self, tag: str, stage: str, reason: BaseException) -> bool:
        """No more model calls this run (the budget, a rate limit); False: no further iteration."""
        self._halt(reason)
        self._line(tag, stage, stage, f"stopped: {self.halt}")
        return False

    def _halt(self, reason: BaseException):
        """Start no more model calls (hypotheses in flight find out at their next attempt)."""
        with self.commit_lock:
            if not self.halt:
                self.halt = (str(reason) if isinstance(reason, BudgetReached) else
                             f"{reason}; the run stops rather than meet the same limit on every call")

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
    def hypothesis(self, tag: str, iteration: protocol.Iteration, batch: pending.Batch, h: pending.Open):
        """Carry out plan `h` from where it stands; it leaves `batch.open` once finished, and stays
        there (for the next run) when the run stops or the writer gets no answer."""
        selection, plan, base = iteration.selection, h.plan, h.base
        reference = selection.reference if selection.reference != base else None
        files = (iteration.base_files if h.parent == selection.base else
                 trees.commit_files(self.repo, h.parent, self.editable))
        state = {"branch": h.branch, "parent": h.parent}
        for attempt in range(h.attempt, self.config.evolve.attempts + 1):
            if self.stopping.is_set() or self._budget_stop():
                return
            try:
                new_files, edit_error, reply = self.scientist.write(self.ctx, iteration, plan, files, h.feedback,
                                                                    attempt)
            except (BudgetReached, LLMRateLimited) as e:
                self._halt(e)
                self._line(tag, "write", "write", f"{plan.title}, attempt {attempt}: "
                           + ("not asked" if isinstance(e, BudgetReached) else "rate limited")
                           + f" ({e}); the plan is kept for the next run")
                return
            except LLMUnavailable as e:
                # Nothing happened to the kernel: no commit. The plan waits for the next run.
                self.summary.model_failures.append(" ".join(str(e).split()))
                self._line(tag, "write", "write", f"{plan.title}, attempt {attempt}: {NO_ANSWER} ({e}); the plan "
                                                  "is kept for the next run")
                self._no_answer(state["branch"], attempt)
                return
            replies = [reply] if reply else []
            if not h.shared and (h.share_cost is not None or h.share_tokens):
                replies.append(Reply("", self.client.model("design"), h.share_tokens, h.share_cost))
            cut = bool(reply and reply.truncated)
            parent = state["parent"]
            self._line(tag, "write", "write", f"{plan.title} (base {base[:10]}), attempt {attempt}: " +
                       ("evaluating" if new_files is not None else
                        "the answer was cut at the output limit" if cut else "the edits did not apply"))
            result, tree, reused = self._result(parent, new_files, edit_error, base, cut,
                                                label=f"{tag} {plan.title}, attempt {attempt}")
            notes = [write_mod.notes(reply.text) if reply else "",
                     f"Not measured again: this tree equals attempt {reused[:10]}, whose result is repeated here."
                     if reused else ""]
            sha = self._commit(state, selection, plan, reference, tree, result, "\n\n".join(n for n in notes if n),
                               replies, reused)
            state["parent"] = sha
            h.branch, h.parent, h.attempt, h.shared = state["branch"], sha, attempt + 1, True
            self._line(tag, "write", "write", f"{state['branch']} attempt {attempt}: {result.status}"
                       + (f" ({result.reason})" if result.reason else ""))
            # A stopped attempt is a measurement (correct, clearly slower than the base), not a
            # failure the writer could fix: asking for a fix would only repeat or perturb it.
            if result.ok or result.status == "stopped":
                break
            if new_files is not None:
                files = new_files
            h.feedback = _feedback(result)
        with self.commit_lock:
            batch.open.remove(h)

    def _no_answer(self, branch: str | None, attempt: int):
        with self.commit_lock:
            number = ExperimentRef.parse(branch).number if branch else None
            self.summary.rows.append(Row("", branch or "-", number, attempt, NO_ANSWER, None, None,
                                         self.client.model("write"), None, None, reused="kept for the next run"))

    def _result(self, parent: str, new_files, edit_error, base: str | None = None, cut: bool = False,
                label: str = "evaluating") -> tuple[Evaluation, str, str]:
        """(result, tree, sha whose result is reused or "") of one candidate: rejected, reused, or evaluated
        (its stage on the live line under `label`, where the progress keeps one)."""
        parent_tree = trees.tree_of(self.repo, parent)
        if new_files is None:
            return (_rejected("answer cut at the output limit" if cut else "edits did not apply", edit_error),
                    parent_tree, "")
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
        with live.evaluation(self.progress, label, self.config.evaluator.timeout_s) as watch:
            given = {"race": race} if race else {}
            if watch is not None and getattr(self.evaluate, "watches", False):
                given["watch"] = watch
            result = Evaluation.of(self.evaluate(candidate, **given))
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
        attempts = self.repo.read()
        attempt = next((a for a in attempts if a.sha == base), None)
        found = measure.comparable(attempt, *measured_on) if attempt is not None else None
        if not found or found.status not in (None, "ok") or not found.times:
            return None
        noise = figures.measurement_noise(attempt, found)
        # The stored noise is the geomean's (per-shape errors in quadrature / k); the race
        # compares shape by shape, so it gets the per-shape error that noise implies.
        race = {"name": base[:10], "times": dict(found.times),
                "noise": None if noise is None else noise * math.sqrt(len(found.times))}
        spread = racing.campaign_spread(_shape_ratios(attempts, measured_on))
        if spread is not None:
            race["spread"] = spread
        return race

    def _commit(self, state, selection, plan, reference, tree, result, notes, replies, reused) -> str:
        model = self.client.model("write")
        cost, tokens = _totals(replies)
        with self.commit_lock:
            if state["branch"] is None:
                attempts = self.repo.read()
                number = workflow.next_experiment(self.repo, attempts)
                slug = tr.slugify(plan.title) + _base_suffix(attempts, state["parent"])
                state["branch"] = ExperimentRef(number, slug).branch
                self.repo.create_branch(state["branch"], state["parent"], plan.title, reference)
            outcome = workflow.commit_attempt(
                self.repo, self.config, branch=state["branch"], tree=tree, parent=state["parent"], result=result,
                notes=notes, plan=f"{plan.text()}\n\nBase chosen because: {selection.reason}",
                expected_gain=plan.expected_gain, author=f"kgit ({model})", model=model, cost=cost, tokens=tokens,
                run=self.costs.run)
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
        if self.halt:
            return self.halt
        if ev.max_cost_usd is not None and self.summary.cost >= ev.max_cost_usd:
            return f"spent {usd(self.summary.cost)} of --max-cost {usd(ev.max_cost_usd)}"
        if ev.max_wall_s is not None and self.clock() - self.started >= ev.max_wall_s:
            return f"wall-time budget of {ev.max_wall_s:g} s (evolve.max_wall_s) reached"
        return ""

    def _account(self, reply: Reply):
        """One answered model call (the ledger's hook), cached answers included."""
        with self.commit_lock:
            self.summary.calls += 1
            if reply.cost is None:
                self.summary.unpriced_calls += 1
            else:
                self.summary.cost += reply.cost
            self.summary.tokens += reply.tokens or 0

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


def _shape_ratios(attempts: list[Attempt], measured_on: tuple) -> list[list[float]]:
    """Per fully timed attempt of the archive, its time over its base's on each shape both timed,
    on the device, harness and evaluator `measured_on`: how far apart one candidate's shapes
    lie, for racing (racing.campaign_spread)."""
    timed = {}
    for attempt in attempts:  # once each: a base with many children is read once
        found = measure.comparable(attempt, *measured_on)
        if found and found.status in (None, "ok"):
            timed[attempt.sha] = found
    ratios = []
    for attempt in attempts:
        mine = timed.get(attempt.sha)
        theirs = timed.get(attempt.parents[0]) if attempt.parents else None
        if mine and theirs:
            ratios.append([mine.times[k] / theirs.times[k] for k in mine.times if theirs.times.get(k)])
    return ratios


def _base_suffix(attempts, base: str) -> str:
    """"-on-N" when the experiment starts from experiment N: the same change tried from
    different bases (the offline strategist's habit) then gets different branch names."""
    found = workflow.find(attempts, base)
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
    best = workflow.best(attempts)
    if best is None:
        raise KgitError(f"{repo.root} has no kgit/baseline yet; run `kgit init --problem NAME` first.")
    from kgit.scientist.knowledge import describe

    chosen = (f"knowledge: {config.evolve.knowledge}; the problem's traits, which choose the sections of auto: "
              f"{describe(run.ctx.traits)}")
    return "\n\n".join([chosen, *run.scientist.preview(run.ctx, attempts, best)])


def summary_json(summary: Summary) -> dict:
    """`kgit evolve --json`: the run's figures and its attempts (commits); cost_usd is null when no
    call had a price: unknown, not free."""
    return {"stop": summary.stop, "run": summary.run, "calls": summary.calls, "tokens": summary.tokens,
            "unpriced_calls": summary.unpriced_calls,
            "cost_usd": None if summary.unpriced_calls and not summary.cost else summary.cost,
            "kept_for_next_run": summary.kept, "resumed": summary.resumed, "error": summary.error or None,
            "attempts": [vars(r) for r in summary.rows if r.sha],
            "no_answer": [{"branch": r.branch, "attempt": r.attempt} for r in summary.rows if not r.sha]}


def summary_text(summary: Summary) -> str:
    rows = [["-" if r.experiment is None else r.experiment, "-" if r.attempt is None else r.attempt, r.branch,
             r.sha[:10] or "-", r.status + (f" ({r.reused})" if r.reused else ""),
             "" if r.geomean_us is None else f"{r.geomean_us:.1f}",
             # An interpreter ratio is no speed figure: shown to nobody as one.
             "" if r.speedup is None or summary.correctness_only else f"{r.speedup:.2f}x",
             "" if r.tokens is None else r.tokens,
             "" if not r.sha else "unpriced" if r.cost is None and not protocol.is_offline(r.model) else
             "" if r.cost is None else amount(r.cost)]
            for r in summary.rows]
    committed = [r for r in summary.rows if r.sha]
    headers = ["exp", "att", "branch", "sha", "status", "geomean us", "vs base", "tokens", "cost usd"]
    if summary.correctness_only:  # no ratio to show: the column goes
        rows = [row[:6] + row[7:] for row in rows]
        headers = headers[:6] + headers[7:]
    lines = [tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
             if rows else "no attempts were made."]
    lines.append(f"\n{len(committed)} attempt(s) in {summary.iterations} iteration(s); "
                 f"{sum(r.status == 'ok' for r in committed)} correct. Stopped: {summary.stop}.")
    if all(protocol.is_offline(m) for m in summary.models):
        lines.append("model use: none (offline)")
    else:
        lines.append(f"model use: {summary.calls} call(s) to {', '.join(summary.models)}, "
                     f"{summary.tokens or 'no'} tokens counted, {cost_text(summary.cost, summary.unpriced_calls)}" +
                     ("; a call without a price (a model litellm's table lacks, or the manual model) is not "
                      "counted by --max-cost" if summary.unpriced_calls else "") +
                     (f"; {len(summary.model_failures)} call(s) got no answer" if summary.model_failures else "") +
                     (f"; every call is in the cost log as run {summary.run} (kgit log, kgit report)"
                      if summary.calls and summary.run else ""))
    if summary.resumed:
        lines.append(f"took up {summary.resumed} plan(s) an earlier run had designed (and paid for) but not finished")
    if summary.kept:
        lines.append(f"kept for the next run: {summary.kept} plan(s) designed but not finished "
                     "(.git/kgit/pending-plans.json); the next `kgit evolve` carries them out before it designs "
                     "anything new")
    for reason in summary.skipped:
        lines.append(f"skipped {reason}")
    before, after = summary.best_before, summary.best_after
    if after is not None:
        gained = "" if before is None or before.sha == after.sha else f" (was {before.sha[:10]})"
        if summary.correctness_only:
            lines.append(f"latest correct attempt: {after.sha[:10]} {after.branch}{gained}; nothing is ranked by "
                         "speed: the archive has no GPU timings")
        else:
            lines.append(f"best: {after.sha[:10]} {after.branch} {after.geomean_us:.1f} us, "
                         f"{after.speedup_baseline or 1:.2f}x vs baseline{gained} ({summary.rule})")
    if summary.correctness_only:
        lines.append("checked correctness only: the candidates ran in Triton's interpreter on the CPU; "
                     "measure them on a GPU with `kgit remeasure --all` there.")
    return "\n".join(lines)
