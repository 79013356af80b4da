"""Measuring attempts again, and sharing the measurements: `kgit remeasure`, `kgit sync`.

A re-measurement never rewrites a commit: it is one JSON line appended to the commit's
note under refs/notes/kgit. Plain clones and pushes do not carry notes, so `sync`
fetches the remote's notes, merges them with ours line by line, and pushes the union.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kgit.archive import measure
from kgit.archive.repo import BASELINE_TAG, NOTES_REF
from kgit.evaluation.backends import get_evaluator
from kgit.errors import GitError, KgitError
from kgit.workflow import best, find, resolve


@dataclass
class Remeasured:
    sha: str
    record: dict
    result: dict


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
              evaluator=None, progress=None) -> list[Remeasured]:
    """Evaluate attempts again and append each result to its commit's note."""
    if repeat < 1:
        raise KgitError(f"--repeat must be 1 or more, not {repeat}.")
    with repo.lock("remeasure"):
        attempts = repo.read()
        if not attempts:
            raise KgitError(f"{repo.root} has no {BASELINE_TAG} tag; run `kgit init --problem NAME` first.")
        shas = targets(repo, attempts, list(revs), every)
        evaluator = evaluator or get_evaluator(repo, config)
        jobs = [sha for sha in shas for _ in range(repeat)]

        def one(sha):
            doc = evaluator(sha)
            record = measure.note_record(doc, tag="remeasure")
            if device_tag:
                record["device_tag"] = device_tag
            return Remeasured(sha, record, doc)

        done = []
        with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), getattr(evaluator, "slots", 1)))) as pool:
            # Notes are written from this thread only: concurrent `git notes append` calls
            # race on the notes ref.
            for item in pool.map(one, jobs):
                repo.add_note(item.sha, item.record)
                if progress:
                    progress(f"{item.sha[:10]}: {item.result['status']}"
                             + (f", {item.record['geomean_us']:.2f} us" if item.record.get("geomean_us") else "")
                             + f" on {item.record.get('device_tag') or item.record.get('device')}")
                done.append(item)
    return done


def sync(repo, remote: str = "origin") -> dict:
    """Fetch the remote's refs/notes/kgit, merge it into ours (union of lines), push the result."""
    if remote not in repo.git("remote").split() and "/" not in remote and ":" not in remote:
        raise KgitError(f"no remote named {remote!r}; `git remote -v` lists them, `git remote add NAME URL` adds one.")
    staging = f"refs/notes/kgit-sync/{_ref_safe(remote)}"
    with repo.lock("sync"):
        for _ in range(3):
            fetched = _fetch(repo, remote, staging)
            merged = _merge(repo, staging) if fetched else "no remote notes"
            if not _has_ref(repo, NOTES_REF):
                repo.git("update-ref", "-d", staging, check=False)
                return {"remote": remote, "merged": merged, "pushed": False, "notes": 0}
            push = repo.git("push", "--porcelain", remote, f"{NOTES_REF}:{NOTES_REF}", check=False)
            if "[rejected]" not in push and not _push_ok(push):
                # Not a race with another pusher: let git's own error (auth, network) through.
                repo.git("push", "--quiet", remote, f"{NOTES_REF}:{NOTES_REF}")
                push = repo.git("push", "--porcelain", remote, f"{NOTES_REF}:{NOTES_REF}", check=False)
            if _push_ok(push):
                repo.git("update-ref", "-d", staging, check=False)
                count = len(repo.git("notes", "--ref", NOTES_REF, "list").splitlines())
                return {"remote": remote, "merged": merged, "pushed": True, "notes": count}
            # Someone pushed notes in between: fetch and merge again.
        raise GitError(f"pushing {NOTES_REF} to {remote} was rejected three times; another machine keeps "
                       f"pushing notes. Run `kgit sync {remote}` again.\n{push[-800:]}")


def _fetch(repo, remote, staging) -> bool:
    out = repo.git("ls-remote", remote, NOTES_REF, check=False)
    if not out.strip():
        return False
    repo.git("fetch", "--quiet", "--no-tags", remote, f"+{NOTES_REF}:{staging}")
    return True


def _merge(repo, staging) -> str:
    theirs = repo.git("rev-parse", staging).strip()
    if not _has_ref(repo, NOTES_REF):
        repo.update_ref(NOTES_REF, theirs, reason="kgit sync: notes from the remote")
        return "took the remote's notes"
    ours = repo.git("rev-parse", NOTES_REF).strip()
    if ours == theirs:
        return "already in sync"
    # cat_sort_uniq keeps every line of both sides: each line is one measurement.
    repo.git("notes", "--ref", NOTES_REF, "merge", "--quiet", "-s", "cat_sort_uniq", staging,
             env=repo.identity_env())
    return "merged"


def _has_ref(repo, ref) -> bool:
    return bool(repo.git("rev-parse", "--verify", "--quiet", ref, check=False).strip())


def _push_ok(porcelain: str) -> bool:
    # --porcelain: one line per ref, flag first: " " pushed, "=" up to date, "!" rejected.
    lines = [line for line in porcelain.splitlines() if NOTES_REF in line and "\t" in line]
    return bool(lines) and all(line[0] in " +=*" for line in lines)


def _ref_safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)
