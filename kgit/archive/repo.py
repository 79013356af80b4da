"""The repository: attempt commits, branches, tags, notes, worktrees, the archive lock,
and reading the archive with one `git log -z` call (its notes read beside it). With the
other modules of kgit/archive it is the whole git surface of kgit; its git processes run
through GitPython's command wrapper (kgit/archive/command.py).

Commits are made with plumbing (`commit-tree` + `update-ref`) so that a crash can never
leave a half-made commit or a changed index behind. Argument lists only, never shells.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path

import orjson

from kgit.archive import cache as archive_cache
from kgit.archive import command, measure
from kgit.archive import trailers as tr
from kgit.archive.attempt import (  # noqa: F401  (Attempt, parse_log: the archive's API)
    LOG_FORMAT,
    Attempt,
    parse_log,
    parse_records,
)
from kgit.archive.notes import KernelsNote, Measurement, TargetsNote
from kgit.archive.refs import BASELINE_TAG, BRANCH_PREFIX, NOTES_REF, ExperimentRef
from kgit.cleanup import remove_tree
from kgit.errors import GitError, KgitError, LockedError, NotAKernelRepo
from kgit.secrets import redact_data, redact_text

FALLBACK_NAME, FALLBACK_EMAIL = "kgit", "kgit@localhost"


def run_git(args, cwd, input=None, env=None, check=True) -> str:
    """`git ARGS` in `cwd`, which need not be a repository (yet)."""
    return command.run(command.runner(cwd), args, input=input, env=env, check=check)


# One `git notes append` at a time: a run appends from several threads (a commit's notes, the
# lab notebook, each model call's cost record), and two appends racing for refs/notes/kgit fail.
_NOTES = threading.Lock()


class Repo:
    """A kernel repository: the user's work tree plus kgit's state under .git/kgit/."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        found = command.open_repository(self.root)
        if found is None:
            raise GitError(f"{self.root} is not a git repository; `git init` makes one, `kgit init` a kernel "
                           "repository.")
        # GitPython's command wrapper, run in the work tree (or in `root` when that is below it).
        top = Path(found.working_tree_dir or found.git_dir).resolve()
        self._git = found.git if top == self.root else command.runner(self.root)
        self.git_dir = Path(found.common_dir).resolve()
        self.state = self.git_dir / "kgit"
        self._blobs = command.BlobReader(self._git)

    @classmethod
    def find(cls, path=".", require_kgit=True) -> Repo:
        path = Path(path).resolve()
        top = _toplevel(path)
        if top is None:
            raise NotAKernelRepo(f"{path} is not inside a git repository. Create a kernel repository with "
                                 "`kgit init --problem vector_add` (see `kgit problems`).")
        repo = cls(top)
        if require_kgit and not (repo.root / ".kgit.yaml").exists():
            raise NotAKernelRepo(f"{repo.root} has no .kgit.yaml, so it is not a kernel repository. "
                                 "Run `kgit init --problem NAME` there first (see `kgit problems`).")
        return repo

    @classmethod
    def open_or_init(cls, path: Path) -> Repo:
        """The repository `path` is in, made with `git init` when it is in none."""
        if run_git(["rev-parse", "--is-inside-work-tree"], path, check=False).strip() != "true":
            run_git(["init", "--quiet"], path)
        return cls(_toplevel(path) or Path(path))

    def git(self, *args, input=None, env=None, check=True) -> str:
        return command.run(self._git, args, input=input, env=env, check=check)

    def succeeds(self, *args) -> bool:
        """Whether `git ARGS` exits 0."""
        return command.succeeds(self._git, args)

    def read_file(self, rev: str, path: str) -> str | None:
        """The text of `path` at `rev` (None when absent), through the persistent cat-file process."""
        return self._blobs.read(rev, path)

    # -- identity ---------------------------------------------------------------
    def identity_env(self, author: str | None = None) -> dict:
        """Author/committer through the environment: the user's config is never written."""
        name = self.git("config", "user.name", check=False).strip()
        email = self.git("config", "user.email", check=False).strip()
        if not (name and email):
            name, email = FALLBACK_NAME, FALLBACK_EMAIL
        env = {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email,
               "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email}
        if author:
            env.update(GIT_AUTHOR_NAME=author, GIT_AUTHOR_EMAIL=FALLBACK_EMAIL)
        return env

    # -- refs and objects -------------------------------------------------------
    def rev(self, rev: str) -> str:
        out = self.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False).strip()
        if not out:
            raise KgitError(f"unknown revision {rev!r}: give a sha, a branch such as kgit/3-..., or a tag "
                            "(`kgit log` lists the attempts).")
        return out

    def head_branch(self) -> str | None:
        out = self.git("symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
        return out or None

    def head(self) -> str | None:
        out = self.git("rev-parse", "--verify", "--quiet", "HEAD", check=False).strip()
        return out or None

    def resolve(self, ref: str) -> str | None:
        """The object `ref` names, or None when it names nothing."""
        return self.git("rev-parse", "--verify", "--quiet", ref, check=False).strip() or None

    def baseline(self) -> str | None:
        """The baseline commit (the kgit/baseline tag), or None before `kgit init`."""
        return self.resolve(f"refs/tags/{BASELINE_TAG}^{{commit}}")

    def has_commit(self, sha: str) -> bool:
        return self.succeeds("cat-file", "-e", f"{sha}^{{commit}}")

    def is_ancestor(self, sha: str, tip: str) -> bool:
        return self.succeeds("merge-base", "--is-ancestor", sha, tip)

    def subject(self, rev: str) -> str:
        return self.git("show", "-s", "--format=%s", rev).strip()

    def body(self, rev: str) -> str:
        """The commit message without its subject line."""
        return self.git("show", "-s", "--format=%b", rev)

    def bodies(self, shas: list[str]) -> dict[str, str]:
        """The message bodies of several commits from one git call."""
        out = self.git("show", "-s", "-z", "--format=%H%x1f%b", *shas)
        found = {}
        for record in out.split("\0"):
            sha, sep, body = record.partition("\x1f")
            if sep:
                found[sha.strip()] = body
        return found

    def messages(self, tip: str, grep: str) -> list[tuple[str, str]]:
        """(sha, full message) of the commits reachable from `tip` whose message holds `grep`, newest first."""
        out = self.git("log", "-z", f"--grep={grep}", "--format=%H%x1f%B", tip)
        found = []
        for record in out.split("\0"):
            sha, sep, message = record.partition("\x1f")
            if sep:
                found.append((sha.strip(), message))
        return found

    def diff(self, a: str, b: str, stat: bool = False) -> str:
        """`git diff` from `a` to `b` ("" when git cannot tell); the revisions never read as options."""
        if stat:
            return self.git("diff", "--stat", "--end-of-options", a, b, check=False)
        return self.git("diff", a, b)

    def tracked_changes(self) -> str:
        return self.git("status", "--porcelain", "--untracked-files=no")

    def commit_tree(self, tree: str, parents: list[str], message: str, author: str | None = None) -> str:
        """A commit of `tree`; anything secret-shaped in the message (the body, the cause,
        every trailer value) is masked first (kgit/secrets.py), whoever wrote the text."""
        message = redact_text(message)
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.git(*args, "-F", "-", input=message, env=self.identity_env(author)).strip()

    def update_ref(self, ref: str, new: str, old: str | None = None, reason: str = "kgit"):
        args = ["update-ref", "-m", reason, ref, new] + ([old] if old else [])
        self.git(*args)

    @contextmanager
    def private_index(self):
        """The environment of git calls that build a tree in a throwaway index file.

        The file is `.git/kgit/index-<pid>-<random>`: the pid lets `clean_worktrees` tell a
        killed process's leftover from the index of a command that is still running.
        """
        self.state.mkdir(parents=True, exist_ok=True)
        index = self.state / f"index-{os.getpid()}-{uuid.uuid4().hex}"
        try:
            yield {"GIT_INDEX_FILE": str(index)}
        finally:
            index.unlink(missing_ok=True)

    def snapshot_tree(self, paths: list[str]) -> str:
        """The tree of HEAD plus the working tree's tracked changes and `paths`, via a private index."""
        with self.private_index() as env:
            if self.head():
                self.git("read-tree", "HEAD", env=env)
            self.git("add", "-u", env=env)
            existing = [p for p in paths if (self.root / p).exists()]
            if existing:
                self.git("add", "-f", "--", *existing, env=env)
            return self.git("write-tree", env=env).strip()

    def tag_baseline(self, sha: str):
        self.git("tag", "-f", BASELINE_TAG, sha)

    def delete_ref(self, ref: str):
        self.git("update-ref", "-d", ref, check=False)

    def checkout(self, branch: str):
        """Check out `branch` (what `kgit try` does for you; nothing else moves your work tree)."""
        self.git("checkout", "--quiet", branch)

    def sync_index(self):
        """After HEAD moved to a tree equal to the work tree, make the index agree (work tree untouched)."""
        self.git("reset", "-q")

    # -- experiments -------------------------------------------------------------
    def experiment_branches(self) -> dict[int, str]:
        out = self.git("for-each-ref", "--format=%(refname:short)", "refs/heads/" + BRANCH_PREFIX)
        found = {}
        for name in out.split():
            ref = ExperimentRef.match(name)
            if ref:
                found[ref.number] = name
        return found

    def branch_meta(self, branch: str) -> dict:
        return {
            "hypothesis": self.git("config", f"branch.{branch}.description", check=False).strip(),
            "base": self.git("config", f"branch.{branch}.kgitbase", check=False).strip(),
            "reference": self.git("config", f"branch.{branch}.kgitreference", check=False).strip(),
        }

    def create_branch(self, branch: str, base: str, hypothesis: str, reference: str | None = None):
        self.git("branch", branch, base)
        self.git("config", f"branch.{branch}.description", redact_text(tr.one_line(hypothesis)))
        self.git("config", f"branch.{branch}.kgitbase", base)
        if reference:
            self.git("config", f"branch.{branch}.kgitreference", reference)

    def maintain(self):
        """Pack loose refs and refresh the commit-graph, as `git gc` would.

        Thousands of loose experiment refs and an archive without a commit-graph make
        every archive read several times slower (see benchmarks/archive_scale.py).
        """
        self.git("pack-refs", "--all", check=False)
        self.git("commit-graph", "write", "--reachable", "--split", check=False)

    # -- notes -------------------------------------------------------------------
    def add_note(self, sha: str, record: Measurement | KernelsNote | TargetsNote | dict):
        """Append one record (a JSON line: a typed note, or a dict of a kind kgit/archive/notes.py
        does not type) to the commit's note; history is never rewritten."""
        doc = record if isinstance(record, dict) else record.to_note()
        line = json.dumps(redact_data(doc), sort_keys=True, separators=(",", ":"))
        with _NOTES:
            self.git("notes", "--ref", NOTES_REF, "append", "-m", line, sha, env=self.identity_env())

    # -- reading the archive -------------------------------------------------------
    def read(self) -> list[Attempt]:
        """Every attempt (and the baseline), newest first, from ONE git log call, with the
        notes read beside it.

        The call covers only commits new since the last read (kgit/archive/cache.py).
        """
        refs = self.kgit_refs()
        if not refs.get("baseline"):
            return []
        notes = lambda: self._notes_beside(refs.get("notes"))  # noqa: E731 - started by the cache, beside the log
        return archive_cache.read(self, refs, self._log(refs["baseline"]), notes)

    def log_json(self) -> bytes:
        """`kgit log --json`: one compact JSON array, an object per attempt in `read()`'s order
        (`Attempt.to_json()` and its `devices`), rendered once and kept in the cache."""
        refs = self.kgit_refs()
        if not refs.get("baseline"):
            return b"[]"
        return archive_cache.log_json(self, refs, self._log(refs["baseline"]),
                                      lambda: self._notes_beside(refs.get("notes")), _render_for_log)

    def notes(self, commit: str | None) -> dict[str, str]:
        """Every note's text by the sha it annotates, as of the notes commit `commit` (None: none).

        Two git calls whatever the archive's size: the notes tree at that commit, and its
        blobs through one `cat-file --batch` (10,000 notes: about 0.2 s).
        """
        if not commit:
            return {}
        listing = command.run_bytes(self._git, ["ls-tree", "-r", "-z", commit])
        if listing[0] != 0:
            raise GitError(f"git ls-tree of the notes commit {commit[:12]} failed: "
                           f"{listing[2].decode('utf-8', 'replace').strip()[:800]}")
        annotated: dict[str, list[str]] = {}
        for entry in listing[1].split(b"\0"):
            meta, _, path = entry.partition(b"\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == b"blob":
                # A fan-out path (ab/cdef...) names the annotated commit.
                name = path.replace(b"/", b"").decode("ascii", "replace")
                if len(name) in (40, 64) and all(c in "0123456789abcdef" for c in name):
                    annotated.setdefault(parts[2].decode("ascii"), []).append(name)
        if not annotated:
            return {}
        code, out, err = command.run_bytes(self._git, ["cat-file", "--batch"], "".join(f"{b}\n" for b in annotated).encode())
        if code != 0:
            raise GitError(f"git cat-file of the notes failed: {err.decode('utf-8', 'replace').strip()[:800]}")
        found, at = {}, 0
        for _blob, shas in annotated.items():
            header_end = out.index(b"\n", at)
            header = out[at:header_end].split()
            if len(header) != 3:  # "<sha> missing": a note blob gone from a damaged repository
                at = header_end + 1
                continue
            size = int(header[2])
            text = out[header_end + 1:header_end + 1 + size].decode("utf-8", errors="replace")
            at = header_end + 1 + size + 1
            for sha in shas:
                found[sha] = text
        return found

    def _notes_beside(self, commit: str | None):
        """`notes(commit)` started in a thread now (git does the work, beside the archive's
        log); the returned callable waits for it and raises what it raised."""
        box: dict = {}

        def work():
            try:
                box["notes"] = self.notes(commit)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                box["error"] = e

        thread = threading.Thread(target=work, name="kgit-notes", daemon=True)
        thread.start()

        def wait() -> dict[str, str]:
            thread.join()
            if "error" in box:
                raise box["error"]
            return box["notes"]

        return wait

    def _log(self, baseline: str):
        """`log(exclude)`: the archive's attempts from one `git log`, less what the shas `exclude`
        reach, in lists as git writes them (kgit/archive/cache.py stores each list as it comes)."""
        args = ["log", "-z", f"--format={LOG_FORMAT}", "--no-notes",
                f"--branches={BRANCH_PREFIX}*", baseline, "--not", f"{baseline}^@"]

        def log(exclude: list[str]):
            """Lists of attempts, newest first, yielded while git still writes."""
            batches = (command.record_batches(self._git, args) if not exclude else
                       command.record_batches(self._git, [*args, "--stdin"],
                                              input="".join(f"^{sha}\n" for sha in exclude)))
            return (parse_records(batch) for batch in batches)

        return log

    def kgit_refs(self) -> dict[str, str]:
        """Sha of every experiment branch (by full ref name), plus "baseline" and "notes"."""
        # Peeling (%(*objectname)) makes git read the object of every listed ref: a tenth of
        # a second per 10,000 branches. Only the baseline tag may be annotated, so only it is peeled.
        out = self.git("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/" + BRANCH_PREFIX, NOTES_REF)
        refs = {}
        for line in out.splitlines():
            name, sha = line.split()
            refs["notes" if name == NOTES_REF else name] = sha
        baseline = self.baseline()
        if baseline:
            refs["baseline"] = baseline
        return refs

    # -- locking -------------------------------------------------------------------
    @contextmanager
    def lock(self, what: str):
        """One archive writer at a time. flock dies with its holder, so a kill -9 never leaves a stale lock."""
        self.state.mkdir(parents=True, exist_ok=True)
        path = self.state / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
                raise LockedError(f"another kgit command is changing this archive ({holder}). Wait for it to "
                                  f"finish, or stop it (kill the process id shown) and run this again.") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: kgit {what}".encode(), 0)
            yield
        finally:
            os.close(fd)

    # -- worktrees -------------------------------------------------------------------
    @contextmanager
    def checkout_copy(self, rev: str):
        """The files of `rev` in a throwaway folder under .git/kgit/worktrees, removed afterwards.

        Written from a private index (`read-tree`, `checkout-index`), not by `git worktree add`:
        git registers a worktree in .git/worktrees before it has a HEAD, so a kill -9 there
        left the repository failing `git fsck` until the next kgit run. Here a kill leaves a
        folder and an index file, both outside git's own state, which clean_worktrees removes.
        """
        root = self.state / "worktrees"
        root.mkdir(parents=True, exist_ok=True)
        # The owner's pid in the name lets clean_worktrees tell leftovers of a killed kgit
        # from the checkout of a `kgit eval` that is still running.
        path = root / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        try:
            with self.private_index() as env:
                self.git("read-tree", rev, env=env)
                self.git("checkout-index", "--all", "--force", f"--prefix={path}{os.sep}", env=env)
            yield path
        finally:
            remove_tree(path)

    def clean_worktrees(self) -> int:
        """Remove what a killed kgit process left: worktrees, scratch folders, private
        indexes, and git's lock files on kgit's own refs. Call it holding the lock."""
        removed = 0
        # A kill during `git worktree add` leaves the worktree registered and locked
        # ("initializing"); `git worktree prune` skips locked ones, so unlock them first.
        ours = str(self.state / "worktrees") + os.sep
        for line in self.git("worktree", "list", "--porcelain", check=False).splitlines():
            path = line[len("worktree "):] if line.startswith("worktree ") else ""
            if path.startswith(ours) and not _owner_alive(os.path.basename(path)):
                self.git("worktree", "unlock", path, check=False)
                self.git("worktree", "remove", "--force", "--force", path, check=False)
        for sub in ("worktrees", "scratch"):
            root = self.state / sub
            if root.exists():
                for left in root.iterdir():
                    if _owner_alive(left.name):
                        continue
                    self.git("worktree", "remove", "--force", str(left), check=False)
                    remove_tree(left)
                    removed += 1
        for index in self.state.glob("index-*"):
            if not _owner_alive(index.name):
                index.unlink(missing_ok=True)
        # A kill -9 in the middle of `git update-ref` leaves its .lock file, and every
        # later update of that ref fails. Only kgit writes these refs, and we hold the
        # archive lock, so such a file is stale.
        for pattern in ("refs/heads/kgit/**/*.lock", "refs/tags/kgit/*.lock", "refs/notes/kgit.lock"):
            for lock in self.git_dir.glob(pattern):
                lock.unlink(missing_ok=True)
                removed += 1
        self.git("worktree", "prune", check=False)
        return removed


def _render_for_log(attempt: Attempt) -> bytes:
    return orjson.dumps({**attempt.to_json(), "devices": measure.by_device(attempt)}, default=str)


def _owner_alive(name: str) -> bool:
    """Is the process whose pid starts this leftover's name still running?"""
    digits = re.match(r"^(?:eval-|index-)?(\d+)-", name)
    if not digits:
        return False  # a name from before pids were recorded: its owner is long gone
    pid = int(digits.group(1))
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _toplevel(path: Path) -> Path | None:
    out = run_git(["rev-parse", "--show-toplevel"], path, check=False).strip()
    return Path(out) if out else None


def parse_branch(name: str) -> tuple[int, str] | None:
    """(number, slug) of an experiment branch name, or None (ExperimentRef.match as a tuple)."""
    ref = ExperimentRef.match(name)
    return (ref.number, ref.slug) if ref else None
