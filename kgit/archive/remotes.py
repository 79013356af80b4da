"""Talking to other repositories: remotes, `ls-remote`, fetch and push, and sharing the
measurement notes with a remote (`kgit sync`).

Plain clones and pushes do not carry notes, so `sync` fetches the remote's
refs/notes/kgit into a staging ref, merges it into ours keeping every line of both
sides (each line is one measurement), and pushes the result, retrying when another
machine pushed in between.
"""

from __future__ import annotations

from kgit.archive.refs import NOTES_REF
from kgit.errors import GitError, KgitError


def names(repo) -> list[str]:
    return repo.git("remote").split()


def url(repo, remote: str) -> str:
    """The remote's URL, or "" when there is no such remote."""
    return repo.git("remote", "get-url", remote, check=False).strip()


def remote_sha(repo, remote: str, ref: str, check: bool = True) -> str | None:
    """The sha of `ref` on `remote` (`git ls-remote`), or None when it has no such ref."""
    out = repo.git("ls-remote", remote, ref, check=check).split()
    return out[0] if out else None


def default_branch(repo, remote: str) -> str:
    """The branch the remote's HEAD points at (`git ls-remote --symref`), or ""."""
    out = repo.git("ls-remote", "--symref", remote, "HEAD", check=False)
    for line in out.splitlines():
        if line.startswith("ref: refs/heads/") and line.rstrip().endswith("HEAD"):
            return line[len("ref: refs/heads/"):].split("\t")[0].strip()
    return ""


def fetch(repo, remote: str, refspec: str, tags: bool = True):
    repo.git("fetch", "--quiet", *([] if tags else ["--no-tags"]), remote, refspec)


def push(repo, remote: str, refspec: str, force: bool = False):
    repo.git("push", *(["--force"] if force else []), "--quiet", remote, refspec)


def sync(repo, remote: str = "origin") -> dict:
    """Fetch the remote's refs/notes/kgit, merge it into ours (union of lines), push the result."""
    if remote not in names(repo) and "/" not in remote and ":" not in remote:
        raise KgitError(f"no remote named {remote!r}; `git remote -v` lists them, `git remote add NAME URL` adds one.")
    staging = f"refs/notes/kgit-sync/{_ref_safe(remote)}"
    with repo.lock("sync"):
        for _ in range(3):
            fetched = _fetch(repo, remote, staging)
            merged = _merge(repo, staging) if fetched else "no remote notes"
            if not repo.resolve(NOTES_REF):
                repo.delete_ref(staging)
                return {"remote": remote, "merged": merged, "pushed": False, "notes": 0}
            push_out = _push_porcelain(repo, remote)
            if "[rejected]" not in push_out and not _push_ok(push_out):
                # Not a race with another pusher: let git's own error (auth, network) through.
                push(repo, remote, f"{NOTES_REF}:{NOTES_REF}")
                push_out = _push_porcelain(repo, remote)
            if _push_ok(push_out):
                repo.delete_ref(staging)
                count = len(repo.git("notes", "--ref", NOTES_REF, "list").splitlines())
                return {"remote": remote, "merged": merged, "pushed": True, "notes": count}
            # Someone pushed notes in between: fetch and merge again.
        raise GitError(f"pushing {NOTES_REF} to {remote} was rejected three times; another machine keeps "
                       f"pushing notes. Run `kgit sync {remote}` again.\n{push_out[-800:]}")


def _push_porcelain(repo, remote) -> str:
    return repo.git("push", "--porcelain", remote, f"{NOTES_REF}:{NOTES_REF}", check=False)


def _fetch(repo, remote, staging) -> bool:
    if remote_sha(repo, remote, NOTES_REF, check=False) is None:
        return False
    fetch(repo, remote, f"+{NOTES_REF}:{staging}", tags=False)
    return True


def _merge(repo, staging) -> str:
    theirs = repo.git("rev-parse", staging).strip()
    ours = repo.resolve(NOTES_REF)
    if not ours:
        repo.update_ref(NOTES_REF, theirs, reason="kgit sync: notes from the remote")
        return "took the remote's notes"
    if ours == theirs:
        return "already in sync"
    # cat_sort_uniq keeps every line of both sides: each line is one measurement.
    repo.git("notes", "--ref", NOTES_REF, "merge", "--quiet", "-s", "cat_sort_uniq", staging,
             env=repo.identity_env())
    return "merged"


def _push_ok(porcelain: str) -> bool:
    # --porcelain: one line per ref, flag first: " " pushed, "=" up to date, "!" rejected.
    lines = [line for line in porcelain.splitlines() if NOTES_REF in line and "\t" in line]
    return bool(lines) and all(line[0] in " +=*" for line in lines)


def _ref_safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)
