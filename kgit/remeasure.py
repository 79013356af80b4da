"""Measuring attempts again, and sharing the measurements: `kgit remeasure`, `kgit sync`.

A re-measurement never rewrites a commit: it is one JSON line appended to the commit's
note under refs/notes/kgit. Plain clones and pushes do not carry notes, so `sync`
fetches the remote's notes, merges them with ours line by line, and pushes the union.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kgit import live
from kgit.archive import measure
from kgit.archive.notes import Measurement
from kgit.archive.remotes import sync  # noqa: F401  (kgit sync; the git side lives in the archive)
from kgit.archive.repo import BASELINE_TAG
from kgit.errors import KgitError
from kgit.evaluation.backends import get_evaluator
from kgit.evaluation.evaluated import Evaluation
from kgit.workflow import best, find, resolve

ERROR_EXCERPT_CHARS = 2000


@dataclass
class Remeasured:
    sha: str
    record: Measurement  # the note written for it
    result: Evaluation


def targets(repo, attempts, revs: list[str], every: bool) -> list[str]:
    """The shas to measure: REVs, or every correct attempt, or the baseline and the best."""
    if revs and every:
        raise KgitError("give revisions or --all, not both.")
    if every:
        shas = [a.sha for a in attempts if a.ok]
    elif revs:
        shas = []
        for rev in revs:
            sha = resolve(repo, rev, attempts)
            if find(attempts, sha) is None:
                raise KgitError(f"{rev} ({sha[:10]}) is not a kgit attempt, so there is nothing to compare its "
                                "timing with; `kgit log` lists the attempts.")
            shas.append(sha)
    else:
        top = best(attempts)
        shas = [repo.rev(BASELINE_TAG)] + ([top.sha] if top else [])
    return list(dict.fromkeys(shas))


def remeasure(repo, config, revs=(), *, device_tag: str | None = None, repeat: int = 1, every: bool = False,
              protocol: str | None = None, evaluator=None, progress=None) -> list[Remeasured]:
    """Evaluate attempts again and append each result to its commit's note.

    `protocol`: time them under this timing protocol rather than the configured one; the
    notes say which, and figures of different protocols are never ranked together."""
    if repeat < 1:
        raise KgitError(f"--repeat must be 1 or more, not {repeat}.")
    if protocol is not None:
        from kgit_harness import protocols

        try:
            protocols.get(protocol)
        except ValueError as e:
            raise KgitError(f"--protocol: {e}.") from None
        config = dataclasses.replace(config, timing=dataclasses.replace(config.timing, protocol=protocol))
    with repo.lock("remeasure"):
        attempts = repo.read()
        if not attempts:
            raise KgitError(f"{repo.root} has no {BASELINE_TAG} tag; run `kgit init --problem NAME` first.")
        shas = targets(repo, attempts, list(revs), every)
        evaluator = evaluator or get_evaluator(repo, config)
        jobs = [sha for sha in shas for _ in range(repeat)]

        def one(sha):
            with live.evaluation(progress, f"{sha[:10]}", config.evaluator.timeout_s) as watch:
                watched = watch is not None and getattr(evaluator, "watches", False)
                judged = Evaluation.of(evaluator(sha, watch=watch) if watched else evaluator(sha))
            record = dataclasses.replace(measure.note_record(judged.result, tag="remeasure", evaluator=judged.evaluator),
                                         device_tag=device_tag or None, **failure_fields(judged))
            return Remeasured(sha, record, judged)

        done = []
        with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), getattr(evaluator, "slots", 1)))) as pool:
            # Notes are written from this thread only: concurrent `git notes append` calls
            # race on the notes ref.
            for item in pool.map(one, jobs):
                repo.add_note(item.sha, item.record)
                if progress:
                    progress(f"{item.sha[:10]}: {item.result.status}"
                             + (f" ({item.record.reason})" if item.record.reason else "")
                             + (f", {item.record.geomean_us:.2f} us" if item.record.geomean_us else "")
                             + f" on {item.record.device_tag or item.record.device}"
                             + (f" under {item.record.protocol}" if item.record.protocol else ""))
                done.append(item)
    return done


def failure_fields(judged: Evaluation) -> dict:
    """What a failed re-measurement keeps besides its status: the one-line reason and the end of the error.

    A note is one JSON line, so the excerpt is bounded; the whole error is the evaluator's
    to log. Correct results keep neither.
    """
    if judged.ok:
        return {}
    out = {}
    if judged.reason:
        out["reason"] = " ".join(judged.reason.split())
    error = (judged.error or "").strip()
    if error:
        out["error_excerpt"] = error[-ERROR_EXCERPT_CHARS:]
    return out
