"""Reviewing a campaign: experiments with their outcome, lineage, totals, reference lines,
per-shape comparisons of two attempts, and the markdown report.

Everything here is read from one `Repo.read()`; the HTML report (report_html.py), the
plots (plots.py) and the pull-request body (pr.py) are views of the same `Campaign`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tabulate import tabulate

from kgit import problems as problem_mod
from kgit.archive import figures, measure
from kgit.archive.notes import Measurement
from kgit.archive.repo import BASELINE_TAG, Attempt, Repo
from kgit.costs import cost_text, unpriced
from kgit.errors import KgitError
from kgit.review import spending as spending_mod
from kgit.review.text import num as _num
from kgit.workflow import best as best_of
from kgit.workflow import find, resolve
from kgit_harness import peaks
from kgit_harness.result import geomean


@dataclass
class Experiment:
    """One hypothesis (branch) and its attempts, oldest first."""

    number: int
    attempts: list
    parent: int | None = None  # experiment whose attempt was the base; 0 = baseline, None = unknown
    # The best attempt's speed against its base on the campaign's device, when both were timed
    # there for speed (`Campaign.experiment_ratio`); None otherwise.
    ratio: float | None = None
    timed: bool = True  # whether the best attempt has a speed figure (a GPU timing) at all

    @property
    def first(self) -> Attempt:
        return self.attempts[0]

    branch = property(lambda self: self.first.branch)
    hypothesis = property(lambda self: self.first.hypothesis)
    base = property(lambda self: self.first.base)

    @property
    def best(self) -> Attempt | None:
        return best_of(self.attempts)

    @property
    def cost(self) -> float:
        return sum(a.cost or 0.0 for a in self.attempts)

    @property
    def unpriced(self) -> int:
        """Attempts whose model calls had no price: their cost is unknown, not zero."""
        return sum(unpriced(a) for a in self.attempts)

    @property
    def cost_label(self) -> str:
        return cost_text(self.cost, self.unpriced, 3, "attempt") if self.cost or self.unpriced else "-"

    @property
    def eval_s(self) -> float:
        return sum(a.eval_s or 0.0 for a in self.attempts)

    @property
    def models(self) -> str:
        return ", ".join(sorted({a.model for a in self.attempts if a.model})) or "-"

    @property
    def status(self) -> str:
        """improved, not-faster, correct (no speed figure to compare), or the last attempt's
        failure (incorrect, compile-error, ...)."""
        best = self.best
        if best is None:
            return self.attempts[-1].status
        if not self.timed or self.ratio is None:
            return "correct"
        return "improved" if self.ratio > 1.0 else "not-faster"

    @property
    def outcome(self) -> str:
        best = self.best
        if best is None:
            return f"failed ({self.attempts[-1].status})"
        if not self.timed:
            return f"correct, attempt {best.attempt} (not timed on a GPU)"
        if self.ratio is None:
            return f"correct, attempt {best.attempt} (its base has no timing to compare with)"
        word = "improved" if self.status == "improved" else "not faster"
        return f"{word}: {self.ratio:.2f}x vs base, attempt {best.attempt}"


@dataclass
class Campaign:
    baseline: Attempt
    experiments: dict  # number -> Experiment
    attempts: list
    best: Attempt
    best_path: list  # attempts from the baseline to the best, one per experiment
    device: str  # the ranking device (a re-measuring GPU, else the best's own): the plots compare timings on it only
    baseline_times: dict  # the baseline's per-shape times on that device (us), {} if never measured there
    baseline_geomean: float | None
    references: dict = field(default_factory=dict)  # label -> geomean us on `device`
    notebook: list = field(default_factory=list)  # the designer's current lessons (kgit/archive/notebook.py)
    harness: str | None = None  # the harness whose timings on `device` rank (None: the commits' own)
    evaluator: str | None = None  # and the evaluator (backend@host) that took them, when known
    spending: spending_mod.Spending | None = None  # every model call, the cost log's included (None: commits only)

    @property
    def spent(self) -> spending_mod.Spending:
        """What the model calls cost: from the cost log where it was read (`load`), else the commits."""
        return self.spending or spending_mod.of([], self.attempts)

    @property
    def timed(self) -> bool:
        """Whether the campaign has speed figures: a GPU ranks it, or its best attempt was timed on one.
        Without them, timings are shown with their meaning and never as a ratio or a ranking."""
        return self.harness is not None or figures.timed(self.best)

    @property
    def totals(self) -> dict:
        tried = [a for a in self.attempts if not a.is_baseline]
        ok = [a for a in tried if a.ok]
        return {
            "experiments": len(self.experiments), "attempts": len(tried), "correct": len(ok),
            "success_rate": len(ok) / len(tried) if tried else None,
            **self.spent.to_json(), "gpu_s": sum(a.eval_s or 0.0 for a in self.attempts),
            "best_speedup": self.best_speedup(), "best_geomean_us": self.geomean_of(self.best),
            "best_sha": self.best.sha, "device": self.device, "timed": self.timed,
        }

    def measurement_of(self, attempt: Attempt) -> Measurement | None:
        """The attempt's timing on the campaign's device: its commit's, or a re-measurement's (a note)."""
        if self.harness is None:
            return attempt.measurement() if attempt.ok and attempt.device == self.device else None
        return measure.comparable(attempt, self.device, self.harness, self.evaluator)

    def geomean_of(self, attempt: Attempt) -> float | None:
        """The attempt's geomean on the campaign's device (from a note where the GPU re-measured it)."""
        if attempt.is_baseline and attempt.device != self.device:
            return self.baseline_geomean
        if self.harness is None:
            return attempt.geomean_us
        found = self.measurement_of(attempt)
        return found.geomean_us if found else None

    def speedup_of(self, attempt: Attempt) -> float | None:
        """The attempt's speedup over the baseline on the campaign's device; None where that
        device's timing is the interpreter's, which is no speed figure."""
        if self.harness is None:
            if attempt.is_baseline:
                return 1.0 if self.timed else None
            return attempt.speedup_baseline if figures.timed(attempt) else None
        us = self.geomean_of(attempt)
        return self.baseline_geomean / us if us and self.baseline_geomean else None

    def best_speedup(self) -> float | None:
        """The best attempt's speedup over the baseline; None when the campaign has no speed figures."""
        return (self.speedup_of(self.best) or 1.0) if self.timed else None

    def experiment_ratio(self, e: Experiment) -> float | None:
        """Experiment `e`'s best attempt against its base on the campaign's device, or None."""
        best = e.best
        if best is None:
            return None
        if self.harness is None:
            return best.speedup if figures.timed(best) else None
        base = next((a for a in self.attempts if a.sha == e.base), None)
        us, base_us = self.geomean_of(best), self.geomean_of(base) if base is not None else None
        return base_us / us if us and base_us else None

    def shape_speedups(self) -> list[tuple[str, float, float, float]]:
        """(shape, baseline us, best us, speedup) for the best attempt's shapes; none without speed figures."""
        if not self.timed:
            return []
        rows = []
        found = self.measurement_of(self.best)
        times = self.best.times if self.harness is None else (found.times if found else {})
        for key, us in times.items():
            before = self.baseline_times.get(key)
            if before and us:
                rows.append((key, before, us, before / us))
        return rows


# -- reading ----------------------------------------------------------------------------
def here(path=".") -> tuple[Repo, object]:
    """The kernel repository around `path` and its problem's task (for reference lines)."""
    from kgit.workflow import load as load_repo

    repo, config = load_repo(path)
    return repo, problem_mod.load_task(repo.root / config.problem)


def to_json(campaign: Campaign) -> dict:
    return {**campaign.totals, "references_us": campaign.references, "notebook": campaign.notebook,
            "best_path": [a.sha for a in campaign.best_path],
            "experiments": [{"number": e.number, "branch": e.branch, "hypothesis": e.hypothesis, "parent": e.parent,
                             "status": e.status, "outcome": e.outcome, "attempts": len(e.attempts),
                             "best": e.best.sha if e.best else None, "cost_usd": e.cost, "eval_s": e.eval_s,
                             "models": e.models} for e in campaign.experiments.values()]}


def load(repo: Repo, task=None) -> Campaign:
    """The campaign of `repo`'s archive; `task` (a harness Task) adds its reference lines."""
    from kgit.archive import notebook

    attempts = repo.read()
    campaign = from_attempts(attempts, _baseline(repo, attempts), task)
    campaign.notebook = notebook.lessons(repo)
    campaign.spending = spending_mod.load(repo, attempts)
    return campaign


def from_attempts(attempts: list, baseline: Attempt, task=None) -> Campaign:
    by_number: dict[int, list] = {}
    for a in attempts:
        if not a.is_baseline and a.experiment > 0:
            by_number.setdefault(a.experiment, []).append(a)
    experiments = {n: Experiment(n, sorted(group, key=lambda a: a.attempt)) for n, group in sorted(by_number.items())}
    by_sha = {a.sha: a for a in attempts}
    for e in experiments.values():
        base = by_sha.get(e.base) if e.base else None
        # A base always existed before its experiment; anything else (a hand-edited
        # trailer) would make the tree cyclic, so it counts as unknown.
        e.parent = max(base.experiment, 0) if base is not None and base.experiment < e.number else None
    best = best_of(attempts) or baseline
    # Where a GPU re-measured the archive (`kgit remeasure`), its figures rank and are shown,
    # not the commits' own (often the CPU interpreter's).
    group = figures.gpu_group(attempts)
    ranked_elsewhere = group is not None and (group.device, group.harness, group.evaluator) != (
        best.device, best.harness, best.evaluator or None)
    device, harness, evaluator = ((group.device, group.harness, group.evaluator) if ranked_elsewhere
                                  else (best.device, None, None))
    base_m = (measure.comparable(baseline, device, harness, evaluator) if ranked_elsewhere
              else measurement_on(baseline, best))
    campaign = Campaign(baseline=baseline, experiments=experiments, attempts=attempts, best=best,
                        best_path=lineage(attempts, best.sha), device=device,
                        baseline_times=dict(base_m.times) if base_m else {},
                        baseline_geomean=base_m.geomean_us if base_m else None, harness=harness, evaluator=evaluator)
    for e in experiments.values():
        e.ratio = campaign.experiment_ratio(e)
        e.timed = e.best is not None and (campaign.measurement_of(e.best) is not None if harness else figures.timed(e.best))
    if task is not None:
        campaign.references = references(task, best)
    return campaign


def _baseline(repo: Repo, attempts: list) -> Attempt:
    sha = repo.baseline()
    found = find(attempts, sha) if sha else None
    if found is None:
        raise KgitError(f"{repo.root} has no kgit archive yet ({BASELINE_TAG} is missing); "
                        "run `kgit init --problem NAME` first.")
    return found


def measurement_on(attempt: Attempt, like: Attempt) -> Measurement | None:
    """`attempt`'s timing on the device, harness and evaluator that measured `like`, else on that device."""
    found = measure.comparable(attempt, like.device, like.harness, like.evaluator or None)
    if found:
        return found
    same_device = [m for m in attempt.measurements() if m.device == like.device]
    return same_device[-1] if same_device else None


def lineage(attempts: list, sha: str) -> list[Attempt]:
    """The chain baseline -> ... -> `sha`: each step is the attempt the next experiment started from."""
    by_sha = {a.sha: a for a in attempts}
    chain, seen = [], set()
    current = by_sha.get(sha)
    while current is not None and current.sha not in seen:
        chain.append(current)
        seen.add(current.sha)
        if current.is_baseline or not current.base:
            break
        current = by_sha.get(current.base)
    return chain[::-1]


def references(task, best: Attempt) -> dict[str, float]:
    """Reference geomeans (us) for the best attempt's device: task.yml's `references`
    entries whose device name matches, and the speed of light where the device is known."""
    out = {}
    device = (best.device or "").lower()
    for name, lines in (task.references or {}).items():
        if name.lower() in device:
            out.update({str(label): float(us) for label, us in lines.items()})
    sol = speed_of_light_geomean(task, best)
    if sol:
        out["speed of light"] = sol
    return out


def speed_of_light_geomean(task, attempt: Attempt) -> float | None:
    """Geomean over the attempt's shapes of the datasheet bound max(flops/peak, bytes/bandwidth)."""
    peak = peaks.lookup(attempt.device)
    if peak is None or attempt.timing == "interpreter" or not attempt.times:
        return None
    shapes = {problem_mod.shape_key(s): s for s in task.benchmarks}
    bounds = []
    for key in attempt.times:
        if key not in shapes:
            return None
        flops, nbytes = task.work(shapes[key])
        bound = peaks.speed_of_light_us(flops, nbytes, peak)
        if not bound:
            return None
        bounds.append(bound)
    return geomean(bounds)


# -- kgit diff -----------------------------------------------------------------------------
def compare(repo: Repo, rev_a: str, rev_b: str) -> dict:
    """Per-shape timings of two attempts on one device, and the code diff from A to B.

    B's figures come from its commit or a note on A's device and harness, so the two
    columns are comparable; without such a measurement the result says so.
    """
    attempts = repo.read()
    a, b = (_attempt(repo, attempts, rev) for rev in (rev_a, rev_b))
    # On A's device first, else on B's: a baseline measured on a laptop and re-measured
    # on the GPU as a note still compares with GPU attempts.
    pairs = [(a.measurement() if a.ok else None, measure.comparable(b, a.device, a.harness, a.evaluator or None),
              a.device),
             (measure.comparable(a, b.device, b.harness, b.evaluator or None), b.measurement() if b.ok else None,
              b.device)]
    m_a, m_b, device = next((p for p in pairs if p[0] and p[1]), (None, None, a.device))
    rows = []
    if m_a and m_b:
        for key, before in m_a.times.items():
            after = m_b.times.get(key)
            rows.append({"shape": key, "a_us": before, "b_us": after,
                         "speedup": before / after if after else None})
    ratio = measure.ratio(m_a, m_b.geomean_us if m_b else None, m_b.times if m_b else {})
    # Two interpreter timings compare nothing about speed: shown side by side, never as a ratio.
    interpreter = m_a is not None and m_b is not None and figures.is_interpreter(m_a.timing, device)
    if interpreter:
        ratio = None
        for row in rows:
            row["speedup"] = None
    why = None
    if not a.measurements():  # notes that are no timing (a kernel split, build facts) do not count
        why = f"A ({a.sha[:10]}) has no timing: its status is {a.status}"
    elif not b.measurements():
        why = f"B ({b.sha[:10]}) has no timing: its status is {b.status}"
    elif not m_b:
        why = (f"A and B were never measured on one device with one harness (A: {a.device}, B: {b.device}); "
               f"measure B where A ran with `kgit remeasure {b.sha[:10]}`")
    return {"a": a.to_json(), "b": b.to_json(), "device": device, "rows": rows, "speedup": ratio,
            "interpreter": interpreter, "not_comparable": why, "diff": repo.diff(a.sha, b.sha)}


def _attempt(repo: Repo, attempts: list, rev: str) -> Attempt:
    sha = resolve(repo, rev, attempts)
    found = find(attempts, sha)
    if found is None:
        raise KgitError(f"{rev} ({sha[:10]}) is not a kgit attempt; `kgit log` lists the attempts.")
    return found


def compare_text(doc: dict) -> str:
    a, b = doc["a"], doc["b"]
    lines = [f"A {a['sha'][:10]}  {a['branch']} attempt {a['attempt']}  {a['status']}  {_us(a['geomean_us'])}",
             f"B {b['sha'][:10]}  {b['branch']} attempt {b['attempt']}  {b['status']}  {_us(b['geomean_us'])}"]
    if doc["not_comparable"]:
        lines += ["", f"no timing comparison: {doc['not_comparable']}."]
    elif doc.get("interpreter"):
        rows = [[r["shape"], _num(r["a_us"], "{:.2f}"), _num(r["b_us"], "{:.2f}")] for r in doc["rows"]]
        lines += ["", f"on {doc['device']}, from {figures.INTERPRETER_MEANING}: the times are shown, not compared",
                  tabulate(rows, headers=["shape", "A us", "B us"], tablefmt="simple")]
    else:
        rows = [[r["shape"], _num(r["a_us"], "{:.2f}"), _num(r["b_us"], "{:.2f}"), _num(r["speedup"], "{:.2f}x")] for r in doc["rows"]]
        lines += ["", f"on {doc['device']}; speedup = A time / B time (above 1: B is faster)",
                  tabulate(rows, headers=["shape", "A us", "B us", "speedup"], tablefmt="simple"),
                  f"geomean speedup: {_num(doc['speedup'], '{:.3f}x')}"]
    lines += ["", doc["diff"].rstrip() or "(no code difference)"]
    return "\n".join(lines)


# -- kgit lineage ----------------------------------------------------------------------------
def lineage_of(repo: Repo, rev: str) -> list[Attempt]:
    attempts = repo.read()
    return lineage(attempts, _attempt(repo, attempts, rev).sha)


def lineage_text(chain: list[Attempt]) -> str:
    """The chain as a table; an interpreter timing is named as such and gets no ratio."""
    rows = []
    for a in chain:
        timed = figures.timed(a)
        rows.append([a.experiment, a.attempt, a.sha[:10], a.status, _num(a.geomean_us, "{:.2f}"),
                     _num(a.speedup if timed else None, "{:.2f}x"), _num(a.speedup_baseline if timed else None, "{:.2f}x"),
                     a.device if timed or not a.ok else f"{a.device} (interpreter)", short(a.hypothesis, 60)])
    table = tabulate(rows, headers=["exp", "att", "sha", "status", "geomean us", "vs base", "vs baseline",
                                    "measured on", "hypothesis"], tablefmt="simple")
    if any(a.ok and not figures.timed(a) for a in chain):
        table += f"\n(interpreter: timings from {figures.INTERPRETER_MEANING}; they get no ratio)"
    return table


# -- the markdown report ---------------------------------------------------------------------
def experiment_rows(campaign: Campaign) -> list[list]:
    """The hypotheses table, one row per experiment, newest last."""
    rows = []
    for e in campaign.experiments.values():
        parent = "-" if e.parent is None else ("baseline" if e.parent == 0 else f"#{e.parent}")
        rows.append([e.number, e.hypothesis, parent, e.outcome, len(e.attempts),
                     e.cost_label, e.models])
    return rows


EXPERIMENT_HEADERS = ["#", "hypothesis", "from", "outcome", "attempts", "cost", "model"]


def summary_lines(campaign: Campaign) -> list[str]:
    t = campaign.totals
    rate = "-" if t["success_rate"] is None else f"{t['success_rate']:.0%}"
    lines = [
        f"{t['experiments']} experiments, {t['attempts']} attempts, {t['correct']} correct ({rate})",
        f"LLM cost {campaign.spent.text()}; "
        f"evaluation time {t['gpu_s'] / 60:.1f} min",
    ]
    if campaign.timed:
        lines.append(f"best: {t['best_sha'][:10]} {campaign.best.branch or 'baseline'}, {_us(t['best_geomean_us'])}, "
                     f"{t['best_speedup']:.2f}x vs baseline on {t['device']}")
    else:
        lines.append(f"latest correct attempt: {t['best_sha'][:10]} {campaign.best.branch or 'baseline'} (no GPU timing, "
                     "so nothing is ranked by speed)")
    return lines


def markdown(campaign: Campaign, title: str) -> str:
    lines = [f"# kgit report: {title}", ""] + [f"- {line}" for line in summary_lines(campaign)]
    lines += _timed_markdown(campaign) if campaign.timed else _untimed_markdown(campaign)
    lines += ["", "## Hypotheses", ""]
    rows = [[n, short(h, 70).replace("|", "/"), p, o, k, c, m] for n, h, p, o, k, c, m in experiment_rows(campaign)]
    lines.append(tabulate(rows, headers=EXPERIMENT_HEADERS, tablefmt="github") if rows else "No experiments yet.")
    if not campaign.timed:
        lines += ["", "## What a GPU would add", "", figures.GPU_WOULD_ADD]
    if campaign.notebook:
        lines += ["", "## Lab notebook (the designer's lessons so far)", ""] + [f"- {item}" for item in campaign.notebook]
    return "\n".join(lines) + "\n"


def _timed_markdown(campaign: Campaign) -> list[str]:
    """The best path, the best attempt's per-shape speedups and the reference lines."""
    lines = ["", "## Best path", ""]
    lines.append(tabulate([[a.experiment, a.sha[:10], _num(campaign.geomean_of(a), "{:.2f}"), _num(campaign.speedup_of(a), "{:.2f}x"),
                            short(a.hypothesis, 80)] for a in campaign.best_path],
                          headers=["exp", "sha", "geomean us", "vs baseline", "hypothesis"], tablefmt="github"))
    lines += ["", f"## Per-shape speedup of the best attempt vs the baseline ({campaign.device})", ""]
    shapes = campaign.shape_speedups()
    if shapes:
        lines.append(tabulate([[k, f"{b:.2f}", f"{u:.2f}", f"{s:.2f}x"] for k, b, u, s in shapes],
                              headers=["shape", "baseline us", "best us", "speedup"], tablefmt="github"))
    else:
        lines.append(f"The baseline was never measured on {campaign.device}: run `kgit remeasure kgit/baseline` there.")
    if campaign.references:
        lines += ["", "## Reference lines", ""]
        lines += [f"- {label}: {us:.2f} us (the best takes {(campaign.geomean_of(campaign.best) or 0) / us:.2f}x that)"
                  for label, us in campaign.references.items()]
    return lines


def _untimed_markdown(campaign: Campaign) -> list[str]:
    """Without speed figures: what every timing is, and the path to the latest correct attempt
    with its timings named for what they are (the report says what a GPU would add at its end)."""
    lines = [f"- every timing comes from {figures.INTERPRETER_MEANING}", "",
             "## Path to the latest correct attempt", ""]
    lines.append(tabulate([[a.experiment, a.sha[:10], a.status, _num(campaign.geomean_of(a), "{:.2f}"),
                            short(a.hypothesis, 80)] for a in campaign.best_path],
                          headers=["exp", "sha", "status", "interpreter us", "hypothesis"], tablefmt="github"))
    return lines


def _us(value):
    return "-" if value is None else f"{value:.2f} us"


def short(text: str, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"
