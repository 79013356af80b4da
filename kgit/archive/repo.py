"""The whole git surface of kgit: attempt commits, branches, tags, notes, worktrees,
the archive lock, and reading the archive with one `git log -z` call.

Commits are made with plumbing (`commit-tree` + `update-ref`) so that a crash can never
leave a half-made commit or a changed index behind. Argument lists only, never shells.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import subprocess
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kgit.cleanup import remove_tree
from kgit.archive import cache as archive_cache
from kgit.archive import trailers as tr
from kgit.errors import GitError, KgitError, LockedError, NotAKernelRepo

BRANCH_PREFIX = "kgit/"
BASELINE_TAG = "kgit/baseline"
NOTES_REF = "refs/notes/kgit"
FALLBACK_NAME, FALLBACK_EMAIL = "kgit", "kgit@localhost"
_BRANCH_RE = re.compile(r"^kgit/(\d+)-([a-z0-9-]+)$")
# One record per commit: fields split by \x1f, records by NUL (git log -z). The raw
# message (%B) is cheaper for git than %(trailers), and its trailer block is parsed
# lazily, only for the attempts a caller actually looks at.
_FIELDS = ["%H", "%P", "%T", "%an", "%ae", "%at", "%B", "%N"]
_TRAILER_LINE = re.compile(r"^(Kgit-[A-Za-z0-9-]+): ?(.*)$", re.M)
_LOG_FORMAT = "%x1f".join(_FIELDS)


def run_git(args, cwd, input=None, env=None, check=True) -> str:
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True,
                          text=True, encoding="utf-8", errors="replace", env=full_env)
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:3])} failed: {proc.stderr.strip()[:800]}")
    return proc.stdout


@dataclass
class Attempt:
    sha: str
    parents: list
    tree: str
    author: str
    email: str
    time: int
    subject: str
    block: str  # the message's last paragraph: its trailers, parsed on first use
    raw_notes: str = ""

    @functools.cached_property
    def trailers(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for key, value in _TRAILER_LINE.findall(self.block):
            found.setdefault(key, []).append(value.strip())
        return found

    @functools.cached_property
    def notes(self) -> list[dict]:
        return _parse_notes(self.raw_notes) if self.raw_notes else []

    def _one(self, key, default=None):
        values = self.trailers.get(key)
        return values[-1] if values else default

    def _float(self, key):
        try:
            return float(self._one(key))
        except (TypeError, ValueError):
            return None

    def _int(self, key) -> int:
        # A hand-edited commit may carry anything here; -1 keeps it out of the
        # baseline (0) and out of every real experiment instead of breaking `kgit log`.
        try:
            return int(self._one(key, "0"))
        except ValueError:
            return -1

    @property
    def experiment(self) -> int:
        return self._int("Kgit-Experiment")

    @property
    def attempt(self) -> int:
        return self._int("Kgit-Attempt")

    @property
    def is_baseline(self) -> bool:
        return self.experiment == 0

    status = property(lambda self: self._one("Kgit-Status", "unknown"))
    hypothesis = property(lambda self: self._one("Kgit-Hypothesis", ""))
    base = property(lambda self: self._one("Kgit-Base"))
    reference = property(lambda self: self._one("Kgit-Reference"))
    branch = property(lambda self: self._one("Kgit-Branch", ""))
    device = property(lambda self: self._one("Kgit-Device", ""))
    timing = property(lambda self: self._one("Kgit-Timing", ""))
    harness = property(lambda self: self._one("Kgit-Harness", ""))
    model = property(lambda self: self._one("Kgit-Model", ""))
    geomean = property(lambda self: self._float("Kgit-Geomean-us"))
    speedup = property(lambda self: self._float("Kgit-Speedup"))
    speedup_baseline = property(lambda self: self._float("Kgit-Speedup-Baseline"))
    cost = property(lambda self: self._float("Kgit-Cost-USD"))
    tokens = property(lambda self: self._float("Kgit-Tokens"))
    eval_s = property(lambda self: self._float("Kgit-Eval-s"))

    @property
    def targets(self) -> dict[str, str]:
        """{build target: its Kgit-Target-<name> trailer}, e.g. {"gfx942": "builds; vgpr 128, ..."}."""
        from kgit_harness.targets import name_of_key

        return {name_of_key(key[len("Kgit-Target-"):]): values[-1] for key, values in self.trailers.items()
                if key.startswith("Kgit-Target-") and values}

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.geomean is not None

    @property
    def times(self) -> dict[str, float]:
        out = {}
        for value in self.trailers.get("Kgit-Time-us", []):
            key, _, number = value.rpartition(" ")
            try:
                out[key] = float(number)
            except ValueError:
                continue
        return out

    def measurement(self) -> dict:
        """The commit's own measurement in the shape of a note record."""
        return {"device": self.device, "harness": self.harness, "timing": self.timing,
                "geomean_us": self.geomean, "times": self.times, "source": "commit"}

    def measurements(self) -> list[dict]:
        own = [self.measurement()] if self.ok else []
        return own + [n for n in self.notes if n.get("geomean_us")]

    def to_json(self) -> dict:
        return {
            "sha": self.sha, "parents": self.parents, "experiment": self.experiment,
            "attempt": self.attempt, "branch": self.branch, "status": self.status,
            "hypothesis": self.hypothesis, "base": self.base, "reference": self.reference,
            "device": self.device, "timing": self.timing, "geomean_us": self.geomean,
            "speedup": self.speedup, "speedup_baseline": self.speedup_baseline,
            "times_us": self.times, "model": self.model, "cost_usd": self.cost,
            "tokens": self.tokens, "eval_s": self.eval_s, "author": self.author,
            "time": self.time, "subject": self.subject, "notes": self.notes,
            "targets": self.targets,
        }


class Repo:
    """A kernel repository: the user's work tree plus kgit's state under .git/kgit/."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        git_dir = Path(run_git(["rev-parse", "--git-common-dir"], self.root).strip())
        self.git_dir = (self.root / git_dir).resolve() if not git_dir.is_absolute() else git_dir
        self.state = self.git_dir / "kgit"

    @classmethod
    def find(cls, path=".", require_kgit=True) -> "Repo":
        path = Path(path).resolve()
        proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True)
        if proc.returncode != 0:
            raise NotAKernelRepo(f"{path} is not inside a git repository. Create a kernel repository with "
                                 "`kgit init --problem vector_add` (see `kgit problems`).")
        repo = cls(Path(proc.stdout.strip()))
        if require_kgit and not (repo.root / ".kgit.yaml").exists():
            raise NotAKernelRepo(f"{repo.root} has no .kgit.yaml, so it is not a kernel repository. "
                                 "Run `kgit init --problem NAME` there first (see `kgit problems`).")
        return repo

    def git(self, *args, input=None, env=None, check=True) -> str:
        return run_git(list(args), self.root, input=input, env=env, check=check)

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

    def tracked_changes(self) -> str:
        return self.git("status", "--porcelain", "--untracked-files=no")

    def commit_tree(self, tree: str, parents: list[str], message: str, author: str | None = None) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.git(*args, "-F", "-", input=message, env=self.identity_env(author)).strip()

    def update_ref(self, ref: str, new: str, old: str | None = None, reason: str = "kgit"):
        args = ["update-ref", "-m", reason, ref, new] + ([old] if old else [])
        self.git(*args)

    def snapshot_tree(self, paths: list[str]) -> str:
        """The tree of HEAD plus the working tree's tracked changes and `paths`, via a private index."""
        self.state.mkdir(parents=True, exist_ok=True)
        index = self.state / f"index-{os.getpid()}-{uuid.uuid4().hex}"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            if self.head():
                self.git("read-tree", "HEAD", env=env)
            self.git("add", "-u", env=env)
            existing = [p for p in paths if (self.root / p).exists()]
            if existing:
                self.git("add", "-f", "--", *existing, env=env)
            return self.git("write-tree", env=env).strip()
        finally:
            index.unlink(missing_ok=True)

    def sync_index(self):
        """After HEAD moved to a tree equal to the work tree, make the index agree (work tree untouched)."""
        self.git("reset", "-q")

    # -- experiments -------------------------------------------------------------
    def experiment_branches(self) -> dict[int, str]:
        out = self.git("for-each-ref", "--format=%(refname:short)", "refs/heads/" + BRANCH_PREFIX)
        found = {}
        for name in out.split():
            m = _BRANCH_RE.match(name)
            if m:
                found[int(m.group(1))] = name
        return found

    def branch_meta(self, branch: str) -> dict:
        return {
            "hypothesis": self.git("config", f"branch.{branch}.description", check=False).strip(),
            "base": self.git("config", f"branch.{branch}.kgitbase", check=False).strip(),
            "reference": self.git("config", f"branch.{branch}.kgitreference", check=False).strip(),
        }

    def create_branch(self, branch: str, base: str, hypothesis: str, reference: str | None = None):
        self.git("branch", branch, base)
        self.git("config", f"branch.{branch}.description", tr.one_line(hypothesis))
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
    def add_note(self, sha: str, record: dict):
        """Append one measurement record (a JSON line) to the commit's note; history is never rewritten."""
        line = json.dumps(record, sort_keys=True, separators=(",", ":"))
        self.git("notes", "--ref", NOTES_REF, "append", "-m", line, sha, env=self.identity_env())

    # -- reading the archive -------------------------------------------------------
    def read(self) -> list[Attempt]:
        """Every attempt (and the baseline), newest first, from ONE git log call.

        The call covers only commits new since the last read (kgit/archive_cache.py).
        """
        refs = self.kgit_refs()
        baseline = refs.get("baseline")
        if not baseline:
            return []
        args = ["log", "-z", f"--format={_LOG_FORMAT}", f"--notes={NOTES_REF}",
                f"--branches={BRANCH_PREFIX}*", baseline, "--not", f"{baseline}^@"]
        return archive_cache.read(self, args, refs, parse_log)

    def kgit_refs(self) -> dict[str, str]:
        """Sha of every experiment branch (by full ref name), plus "baseline" and "notes"."""
        out = self.git("for-each-ref", "--format=%(refname) %(objectname) %(*objectname)",
                       "refs/heads/" + BRANCH_PREFIX, f"refs/tags/{BASELINE_TAG}", NOTES_REF)
        refs = {}
        for line in out.splitlines():
            name, sha, *peeled = line.split()
            if name == f"refs/tags/{BASELINE_TAG}":
                refs["baseline"] = peeled[0] if peeled else sha
            elif name == NOTES_REF:
                refs["notes"] = sha
            else:
                refs[name] = sha
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
    def worktree(self, rev: str):
        """A detached throwaway worktree of `rev` under .git/kgit/worktrees, removed afterwards."""
        root = self.state / "worktrees"
        root.mkdir(parents=True, exist_ok=True)
        # The owner's pid in the name lets clean_worktrees tell leftovers of a killed kgit
        # from the worktree of a `kgit eval` that is still running.
        path = root / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.git("worktree", "add", "--detach", "--quiet", str(path), rev)
        try:
            yield path
        finally:
            self.git("worktree", "remove", "--force", str(path), check=False)
            remove_tree(path)
            self.git("worktree", "prune", check=False)

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
                for path in root.iterdir():
                    if _owner_alive(path.name):
                        continue
                    self.git("worktree", "remove", "--force", str(path), check=False)
                    remove_tree(path)
                    removed += 1
        for path in self.state.glob("index-*"):
            if not _owner_alive(path.name):
                path.unlink(missing_ok=True)
        # A kill -9 in the middle of `git update-ref` leaves its .lock file, and every
        # later update of that ref fails. Only kgit writes these refs, and we hold the
        # archive lock, so such a file is stale.
        for pattern in ("refs/heads/kgit/**/*.lock", "refs/tags/kgit/*.lock", "refs/notes/kgit.lock"):
            for path in self.git_dir.glob(pattern):
                path.unlink(missing_ok=True)
                removed += 1
        self.git("worktree", "prune", check=False)
        return removed


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


def parse_log(out: str) -> list[Attempt]:
    attempts = []
    width = len(_FIELDS)
    for record in out.split("\0"):
        fields = record.split("\x1f")
        if len(fields) != width:
            continue
        sha, parents, tree, author, email, when, message, notes = fields
        end = message.rstrip("\n")
        cut = end.rfind("\n\n")
        block = end[cut + 2:] if cut >= 0 else ""
        # Only kgit's commits carry the experiment trailer; the rest is the user's history.
        if "Kgit-Experiment:" not in block:
            continue
        subject = message.lstrip("\n").split("\n", 1)[0]
        attempts.append(Attempt(sha.lstrip("\n"), parents.split(), tree, author, email, int(when or 0),
                                subject, block, notes))
    return attempts


def _parse_notes(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def parse_branch(name: str) -> tuple[int, str] | None:
    m = _BRANCH_RE.match(name or "")
    return (int(m.group(1)), m.group(2)) if m else None
