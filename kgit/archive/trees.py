"""Reading files out of commits and writing candidate trees, without a work tree.

The user's index and work tree are never touched: blobs go in with
`git hash-object -w`, trees are assembled in a private index file under .git/kgit.
Reading many files is one `git cat-file --batch` process, never one per commit.
"""

from __future__ import annotations

import os
import subprocess
import uuid


def read_files(repo, specs: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """{(rev, path): text or None when absent} for every (rev, path), from one git process."""
    if not specs:
        return {}
    request = "".join(f"{rev}:{path}\n" for rev, path in specs).encode()
    proc = subprocess.run(["git", "cat-file", "--batch"], cwd=repo.root, input=request,
                          capture_output=True, check=True)
    out, pos, found = proc.stdout, 0, {}
    for spec in specs:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            found[spec] = out[pos:pos + size].decode("utf-8", errors="replace")
            pos += size + 1
        else:
            found[spec] = None
    return found


def commit_files(repo, rev: str, paths: list[str]) -> dict[str, str]:
    """The named files of one commit (absent ones left out)."""
    got = read_files(repo, [(rev, p) for p in paths])
    return {p: got[(rev, p)] for p in paths if got[(rev, p)] is not None}


def tree_of(repo, rev: str) -> str:
    return repo.git("rev-parse", f"{rev}^{{tree}}").strip()


def build_tree(repo, parent: str, files: dict[str, str]) -> str:
    """The tree of `parent` with `files` (path -> text) written over it."""
    repo.state.mkdir(parents=True, exist_ok=True)
    index = repo.state / f"index-{uuid.uuid4().hex}"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        repo.git("read-tree", parent, env=env)
        lines = []
        for path, text in files.items():
            blob = repo.git("hash-object", "-w", "--stdin", "--path", path, input=text).strip()
            mode = _mode(repo, parent, path)
            lines.append(f"{mode} {blob}\t{path}\n")
        repo.git("update-index", "--index-info", input="".join(lines), env=env)
        return repo.git("write-tree", env=env).strip()
    finally:
        if os.path.exists(index):
            os.unlink(index)


def _mode(repo, rev: str, path: str) -> str:
    out = repo.git("ls-tree", rev, "--", path, check=False).split()
    return out[0] if out and out[0] in ("100644", "100755") else "100644"
