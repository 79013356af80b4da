"""Plans a `kgit evolve` run designed but did not finish, kept for the next run.

A run stopped by `--max-cost`, by a rate limit longer than `llm.max_wait_s`, by Ctrl-C or
by an error, or whose writer got no answer from the model, leaves plans that were
designed (and paid for) but not carried out. Each is written to
`.git/kgit/pending-plans.json` with how far it got: its branch once it has one, the commit
its next attempt builds on, that attempt's number, what the writer is to be told about
the last one, and its part of the iteration's select and design costs while no commit
carries it yet. The next run takes them up before it selects or designs anything.

The file is read and removed when a run starts and written when it ends, so two runs never
carry out one plan twice; a run killed outright (kill -9) loses the plans it held, never an
attempt. Delete the file to drop them.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from kgit.scientist.answers import Plan, Selection

FILE = "pending-plans.json"
VERSION = 1


@dataclass
class Open:
    """One plan not finished yet."""

    plan: Plan
    base: str  # the commit the plan starts from
    parent: str  # the commit its next attempt builds on
    branch: str | None = None  # its experiment branch, once an attempt was committed
    attempt: int = 1  # the next attempt's number
    feedback: str = ""  # what the writer is told about the last attempt ("" for the first)
    # The plan's part of its iteration's select and design calls, until a commit carries it.
    share_cost: float | None = 0.0
    share_tokens: int | None = 0
    shared: bool = False  # a commit carries the share already


@dataclass
class Batch:
    """One iteration's plans: the writers of each see all of them."""

    selection: Selection
    plans: list
    open: list = field(default_factory=list)
    offline: bool = False  # designed by the offline strategist


def path(state: Path) -> Path:
    return Path(state) / FILE


def save(state: Path, batches: list[Batch]) -> int:
    """Write the batches that still hold open plans (remove the file when none do); how many plans."""
    kept = [b for b in batches if b.open]
    target = path(state)
    if not kept:
        target.unlink(missing_ok=True)
        return 0
    doc = {"version": VERSION, "batches": [_batch_doc(b) for b in kept]}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, target)
    return sum(len(b.open) for b in kept)


def take(state: Path) -> tuple[list[Batch], str]:
    """The kept batches, the file removed; ([], why) when it cannot be read (its plans are dropped)."""
    target = path(state)
    if not target.exists():
        return [], ""
    try:
        doc = json.loads(target.read_text(encoding="utf-8"))
        if doc.get("version") != VERSION:
            raise ValueError(f"version {doc.get('version')!r}, not {VERSION}")
        return [_batch(b) for b in doc["batches"]], ""
    except (OSError, KeyError, TypeError, ValueError, AttributeError) as e:
        return [], f"{target} could not be read ({e}); its plans are dropped"
    finally:
        target.unlink(missing_ok=True)


def resumable(repo, attempts, offline: bool, most_attempts: int) -> tuple[list[Batch], list[Batch], list[str]]:
    """The kept batches a run can carry out now, those it cannot (designed by the other kind of
    designer: the offline writer carries out only offline plans, a model's writer has no use
    for them; they stay for a later run), and what to tell about them. Each plan is checked
    against the archive as it is now: a plan whose base is gone is dropped; one whose branch
    moved past the commit written down (a run stopped right after committing) goes on from the
    branch's tip."""
    batches, note = take(repo.state)
    notes = [note] if note else []
    by_sha = {a.sha: a for a in attempts}
    ready, later = [], []
    for batch in batches:
        if batch.offline != offline:
            later.append(batch)
            notes.append(f"{len(batch.open)} plan(s) kept by an earlier run were designed "
                         f"{'offline' if batch.offline else 'by a model'}, so they wait for a run like it "
                         f"({path(repo.state)}; delete it to drop them).")
            continue
        batch.open = [h for h in (_as_now(repo, h, by_sha, most_attempts) for h in batch.open) if h is not None]
        if batch.open and batch.selection.base in by_sha:
            ready.append(batch)
    return ready, later, notes


def _as_now(repo, h: Open, by_sha: dict, most_attempts: int) -> Open | None:
    if h.base not in by_sha:
        return None
    if h.branch is None:
        return h
    tip = repo.resolve(f"refs/heads/{h.branch}")
    if tip is None:
        return None
    if tip != h.parent:
        done = [a.attempt for a in by_sha.values() if a.branch == h.branch]
        h.parent, h.attempt, h.feedback = tip, max(done, default=0) + 1, ""
    return h if h.attempt <= most_attempts else None


def _batch_doc(batch: Batch) -> dict:
    index = {id(p): i for i, p in enumerate(batch.plans)}
    return {"selection": dataclasses.asdict(batch.selection), "offline": batch.offline,
            "plans": [_plan_doc(p) for p in batch.plans],
            "open": [{**{k: v for k, v in dataclasses.asdict(o).items() if k != "plan"}, "plan": index[id(o.plan)]}
                     for o in batch.open]}


def _plan_doc(plan: Plan) -> dict:
    # The offline strategist's values are keyed by (file, parameter): JSON keys are strings.
    return {**dataclasses.asdict(plan), "assignment": [[path, name, value]
                                                       for (path, name), value in plan.assignment.items()]}


def _plan(doc: dict) -> Plan:
    return Plan(**{**doc, "assignment": {(path, name): value for path, name, value in doc.get("assignment", [])}})


def _batch(doc: dict) -> Batch:
    plans = [_plan(p) for p in doc["plans"]]
    opened = [Open(**{**o, "plan": plans[o["plan"]]}) for o in doc["open"]]
    return Batch(Selection(**doc["selection"]), plans, opened, bool(doc.get("offline")))
