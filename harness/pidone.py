"""PID 1 of an evaluation's PID namespace: the lifeline that candidate code cannot defeat.

Run by path (so no site-packages are imported), before the harness's own Python, as
`python -I -S -B pidone.py LIFELINE_FD -- COMMAND...` under `unshare --pid --fork`.
It starts COMMAND as PID 2, then waits for one of two things: COMMAND exiting (its
status becomes ours) or the lifeline pipe closing (kgit exited, however it exited).
Either way it exits, and the kernel then kills every process left in the namespace,
whatever those processes did to themselves (patched `os._exit`, cleared parent-death
signal, `setsid`, a fork that daemonised).

Nothing in the namespace can stop it: the kernel delivers no signal from inside the
namespace to its init unless init installed a handler (it installs none and resets
Python's), it is not dumpable (no ptrace, no /proc/1/mem), and it holds no file or
module that the candidate could change after it started. It uses the standard
library only and imports nothing of the harness.
"""

import ctypes
import os
import select
import signal
import sys

PR_SET_DUMPABLE = 4
KILLED = 137  # the exit status of a process killed by SIGKILL, as a shell reports it


def command(prefix: list, argv: list, lifeline_fd: int) -> list:
    """`argv` started under `prefix` (the `unshare` namespaces) with this init as PID 1,
    watching `lifeline_fd`. Without a prefix there is no PID namespace to end: `argv` as is.

    For kgit (`Isolation.command`) and for the judge starting its runner alike.
    """
    if not prefix:
        return list(argv)
    return [*prefix, sys.executable, "-I", "-S", "-B", os.path.abspath(__file__), str(int(lifeline_fd)), "--", *argv]


def _status(wait_status: int) -> int:
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def main(argv: list[str]) -> int:
    lifeline = int(argv[0])
    command = argv[argv.index("--") + 1:]
    # Python installs a SIGINT handler; with it, a signal from inside would reach us.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    child = os.fork()
    if child == 0:
        try:
            os.execv(command[0], command)
        finally:
            os._exit(127)
    poll = select.poll()
    poll.register(lifeline, select.POLLIN | select.POLLHUP)
    try:
        # Wakes us the moment the child exits; without it (Linux < 5.3) the 1 s poll does.
        poll.register(os.pidfd_open(child), select.POLLIN)
    except (AttributeError, OSError):
        pass
    while True:
        for fd, events in poll.poll(1000):
            if fd == lifeline and (events & (select.POLLHUP | select.POLLERR | select.POLLNVAL)
                                   or not os.read(lifeline, 64)):
                return KILLED
        # Reap what exits, orphans included (they are reparented to us).
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return KILLED
            if pid == 0:
                break
            if pid == child:
                return _status(wait_status)


if __name__ == "__main__":
    # os._exit: no interpreter shutdown, nothing that code in the namespace could hook.
    os._exit(main(sys.argv[1:]))
