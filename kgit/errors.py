"""One error family for everything a person can fix.

Each message says what went wrong and what to do next. The CLI prints the message
and exits with `exit_code`; anything that is not a KgitError is a bug and keeps its
traceback.
"""

from enum import IntEnum


class ExitCode(IntEnum):
    """What kgit's exit status tells a script."""

    DONE = 0
    FIX_NEEDED = 1  # a KgitError: the message says what to fix
    USAGE = 2  # the command line is wrong
    EVALUATION_FAILED = 3  # the thing evaluated did not pass (the command itself worked)
    INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


# What every command says when Ctrl-C stops it (with exit code 130): commits are whole or absent
# (plumbing commits, refs moved last), so what was committed before the interrupt stands.
INTERRUPTED_MESSAGE = "interrupted (Ctrl-C); every commit made so far is kept"


class KgitError(Exception):
    """A problem the user can fix; the message names the fix."""

    exit_code = ExitCode.FIX_NEEDED
    # What a `kgit evolve` run that ends with this error did (evolve.Summary), so the CLI
    # prints the run's summary however it ended; None from every other command.
    summary: object = None


class UsageError(KgitError):
    """The command line itself is wrong."""

    exit_code = ExitCode.USAGE


class ConfigError(KgitError):
    """`.kgit.yaml` or a problem's `task.yml` is invalid."""


class NotAKernelRepo(KgitError):
    """The folder is not (yet) a kgit kernel repository."""


class GitError(KgitError):
    """A git command failed in a way the user has to look at."""


class LockedError(KgitError):
    """Another kgit process is changing the archive."""


class EvaluationFailed(KgitError):
    """The thing the user asked to evaluate did not pass (exit code 3)."""

    exit_code = ExitCode.EVALUATION_FAILED

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


class LLMError(KgitError):
    """The model could not be reached or kept answering badly."""


class LLMUnavailable(LLMError):
    """Transient model failures (timeouts, 429, 5xx) outlasted every retry.

    `kgit evolve` records these and goes on; a fatal LLMError (bad key, unknown model)
    stops the run instead, since every later call would fail the same way.
    """


class LLMRateLimited(LLMUnavailable):
    """The provider's rate limit outlasted what kgit waits (`llm.max_wait_s`, or the retries).

    `kgit evolve` stops starting model calls and keeps the plans it had not finished for
    the next run: every later call would meet the same limit.
    """
