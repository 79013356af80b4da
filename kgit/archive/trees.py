"""Reading files out of commits and writing candidate trees, without a work tree.

The user's index and work tree are never touched: blobs go in with
`git hash-object -w`, trees are assembled in the repository's private index
(`Repo.private_index`). Files are read through the repository's persistent
`git cat-file --batch` process, never one process per commit.
"""

from __future__ import annotations


def read_files(repo, specs: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """{(rev, path): text or None when absent} for every (rev, path)."""
    return {(rev, path): repo.read_file(rev, path) for rev, path in specs}


def commit_files(repo, rev: str, paths: list[str]) -> dict[str, str]:
    """The named files of one commit (absent ones left out)."""
    got = read_files(repo, [(rev, p) for p in paths])
    return {p: text for p in paths if (text := got[(rev, p)]) is not None}


def tree_of(repo, rev: str) -> str:
    return repo.git("rev-parse", f"{rev}^{{tree}}").strip()


def build_tree(repo, parent: str, files: dict[str, str]) -> str:
    """The tree of `parent` with `files` (path -> text) written over it."""
    with repo.private_index() as env:
        repo.git("read-tree", parent, env=env)
        lines = []
        for path, text in files.items():
            blob = repo.git("hash-object", "-w", "--stdin", "--path", path, input=text).strip()
            mode = _mode(repo, parent, path)
            lines.append(f"{mode} {blob}\t{path}\n")
        repo.git("update-index", "--index-info", input="".join(lines), env=env)
        return repo.git("write-tree", env=env).strip()


def _mode(repo, rev: str, path: str) -> str:
    out = repo.git("ls-tree", rev, "--", path, check=False).split()
    return out[0] if out and out[0] in ("100644", "100755") else "100644"
