"""Running git. Every git process kgit starts is started here, through GitPython's
command wrapper (`git.Git.execute`), with kgit's rules: argument lists only (never a
shell), output decoded as UTF-8 with bad bytes replaced, and a failure raised as a
GitError that quotes git's own message.

Reading many blobs goes through GitPython's persistent `git cat-file --batch` process
(one per repository, kept between calls), not one process per file.
"""

from __future__ import annotations

import codecs
import fcntl
import subprocess
import threading
from pathlib import Path

import git as gitpython

from kgit.errors import GitError


def runner(cwd) -> gitpython.Git:
    """A command wrapper for git commands run in `cwd` (a repository or not)."""
    return gitpython.Git(str(cwd))


def open_repository(root: Path) -> gitpython.Repo | None:
    """GitPython's view of the repository at `root`, or None when there is none."""
    try:
        return gitpython.Repo(str(root), search_parent_directories=True)
    except (gitpython.InvalidGitRepositoryError, gitpython.NoSuchPathError):
        return None


def run(git: gitpython.Git, args, input: str | None = None, env: dict | None = None, check: bool = True) -> str:
    """git's stdout for `git ARGS`; raises GitError on failure when `check`."""
    code, out, err = run_bytes(git, args, None if input is None else input.encode("utf-8"), env)
    if check and code != 0:
        raise GitError(f"git {' '.join(str(a) for a in list(args)[:3])} failed: "
                       f"{err.decode('utf-8', 'replace').strip()[:800]}")
    return out.decode("utf-8", errors="replace")


def succeeds(git: gitpython.Git, args) -> bool:
    """Whether `git ARGS` exits 0 (for questions git answers with its exit code)."""
    return run_bytes(git, args)[0] == 0


def run_bytes(git: gitpython.Git, args, input: bytes | None = None, env: dict | None = None) -> tuple[int, bytes, bytes]:
    handle = start(git, args, env)
    out, err = handle.proc.communicate(input)
    return handle.proc.returncode, out, err


def start(git: gitpython.Git, args, env: dict | None = None):
    """A running `git ARGS` with stdin, stdout and stderr as pipes (GitPython's AutoInterrupt:
    the process is killed if the handle is dropped before it ends)."""
    return git.execute(["git", *map(str, args)], istream=subprocess.PIPE, as_process=True, env=env)


# The pipe git's output comes through, and how much is read from it at a time: a deep pipe
# lets git format ahead while kgit parses, and big reads wake kgit once per 256 KB instead
# of once per few commits git writes (benchmarks/archive_scale.py).
PIPE_BYTES, READ_BYTES = 1 << 20, 1 << 18


def record_batches(git: gitpython.Git, args, input: str | None = None, sep: str = "\0"):
    """The `sep`-terminated records of `git ARGS`'s output, as lists yielded while git still writes.

    Reading a big `git log` this way lets the caller parse (and store) on one core while
    git formats on the other, instead of waiting for 100 MB and then starting.
    """
    handle = start(git, args)
    proc = handle.proc
    _deepen(proc.stdout)
    if input:
        proc.stdin.write(input.encode("utf-8"))  # git reads all of --stdin before it writes
    proc.stdin.close()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    rest = ""
    while True:
        chunk = proc.stdout.read(READ_BYTES)
        text = rest + decoder.decode(chunk, final=not chunk)
        *done, rest = text.split(sep)
        if done:
            yield done
        if not chunk:
            break
    err = proc.stderr.read()
    if proc.wait() != 0:
        raise GitError(f"git {' '.join(str(a) for a in list(args)[:3])} failed: "
                       f"{err.decode('utf-8', 'replace').strip()[:800]}")
    if rest:
        yield [rest]


def _deepen(pipe):
    """Grow the pipe to PIPE_BYTES where Linux allows it (elsewhere it stays as it is)."""
    if not hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux only
        return
    try:
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # above /proc/sys/fs/pipe-max-size: a slower read, the same records
        pass


class BlobReader:
    """Files of many commits through one persistent `git cat-file --batch` process."""

    def __init__(self, git: gitpython.Git):
        self._git = git
        self._lock = threading.Lock()  # one request at a time on the shared process

    def read(self, rev: str, path: str) -> str | None:
        """The text of `path` at `rev`, or None when there is no such file."""
        with self._lock:
            try:
                _, kind, _, data = self._git.get_object_data(f"{rev}:{path}")
            except ValueError:  # git answered "missing" (or the name holds a newline)
                return None
        return data.decode("utf-8", errors="replace") if kind in (b"blob", "blob") else None

    def close(self):
        self._git.clear_cache()
