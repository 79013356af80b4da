"""What isolation this host allows for evaluated code, and how to ask for it.

The parent side of the sandbox (the child side is harness/confine.py). On Linux
the child starts under `unshare` in new user, network, PID, IPC and mount namespaces:
no network, no view of other processes (so not of kgit's /proc/<pid>/environ either),
no SysV shared memory or message queue shared with anything else, and a small trusted
init (harness/pidone.py) as PID 1 that ends the namespace, and every process in it,
when kgit's lifeline closes. Inside, the harness hides HOME and the kernel repository
under empty tmpfs mounts, gives the candidate a size-capped tmpfs as its scratch,
makes the rest of the filesystem read-only, limits the process count and drops all
capabilities. Where the OS refuses a namespace (containers often do), evaluation
still runs, and the result says plainly what was not applied; `evaluator.sandbox: strict` refuses to run instead.
See docs/sandbox.md for what is and is not stopped.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kgit.errors import KgitError
from kgit.evaluation import cgroups
from kgit_harness import pidone

PR_SET_DUMPABLE = 4
# --kill-child: PID 1 of the namespace (the trusted init) gets SIGKILL if unshare itself
# is killed; its death takes every process the candidate started with it.
NAMESPACE_ARGS = ["--user", "--map-root-user", "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd")


class SandboxUnavailable(KgitError):
    """`evaluator.sandbox: strict` and the OS does not allow part of the sandbox."""


@dataclass
class Isolation:
    """How one evaluation's child is started and confined."""

    prefix: list = field(default_factory=list)  # command that wraps `python -m kgit_harness`
    namespaces: bool = False
    missing: list = field(default_factory=list)  # what this host would not allow, in words

    def command(self, argv: list, lifeline_fd: int | None = None) -> list:
        """The command line that starts `argv` (the harness or the judge's runner) confined.

        With namespaces, the trusted init runs first as PID 1 and watches `lifeline_fd`
        (the read end of a pipe whose write end only kgit holds).
        """
        if lifeline_fd is None or not self.namespaces:
            return [*self.prefix, *argv]
        return pidone.command(self.prefix, argv, lifeline_fd)

    def child_settings(self, scratch, timeout_s: float, max_memory_gb: float | None, *, scratch_gb: float = 1.0,
                       max_processes: int | None = None, hide=(), hide_problem: bool = False,
                       trusted_init: bool = True) -> dict:
        """The `sandbox` part of the harness spec (read by confine.apply in the child).

        `hide`: folders to cover with an empty tmpfs on top of HOME and the kernel
        repository the scratch belongs to. `hide_problem`: the problem folder is not
        mounted back into the scratch (the judge's runner does not need it).
        `trusted_init`: the command came from `command(..., lifeline_fd)`.
        """
        nproc = max_processes or default_max_processes()
        data = None
        if max_memory_gb:
            data = int(max_memory_gb * (1 << 30))
        elif not gpu_driver_present():
            # Only without a GPU driver: CUDA and ROCm map large private regions that a
            # data limit would count, so there the limit is the user's explicit choice.
            data = _memory_total() // 2 or None
        return {
            "parent_pid": None if self.namespaces else os.getpid(),
            "pid_namespace": self.namespaces,
            # Measured on an H200 (driver 580): with every mount read-only, /dev and
            # /dev/shm left writable, CUDA still fails to start (cudaGetDeviceCount: error
            # 304), so on GPU hosts the read-only view is not applied; docs/sandbox.md.
            "read_only": self.namespaces and not gpu_driver_present(),
            "drop_caps": self.namespaces or os.geteuid() == 0,
            "scratch": str(scratch),
            # CPU seconds count every thread; this is a backstop for a lost wall clock.
            "cpu_s": int(timeout_s * (os.cpu_count() or 1) + 60),
            "nofile": 4096,
            "fsize": 4 << 30,
            "data_bytes": data,
            "ipc_namespace": self.namespaces,
            "trusted_init": self.namespaces and trusted_init,
            "nproc": nproc if self.namespaces and os.geteuid() != 0 else None,
            "pids_cgroup": cgroups.pids_cgroup(nproc) if self.namespaces else None,
            "scratch_bytes": int(scratch_gb * (1 << 30)) if self.namespaces else None,
            # Measured on the H200: with a private /dev/shm in the runner, CUDA IPC from the
            # judge fails (cudaErrorMapBufferObjectFailed), so GPU hosts keep the host's.
            "shm_bytes": 0 if gpu_driver_present() else 1 << 30,
            "hide": hidden_folders(scratch, hide) if self.namespaces else [],
            "hide_problem": bool(hide_problem),
        }


def default_max_processes() -> int:
    # Threads count: torch starts one per core, CUDA a few more, Triton's compiler some.
    return 256 + 2 * (os.cpu_count() or 1)


def repository_of(folder) -> Path | None:
    """The kernel repository a scratch folder lives in (<repo>/.git/kgit/...), if any."""
    for parent in Path(folder).resolve().parents:
        if parent.name == ".git":
            return parent.parent
    return None


def hidden_folders(scratch, extra=()) -> list[str]:
    """HOME, the repository holding the scratch and `extra`, as real paths, without duplicates."""
    import pwd

    found = [os.path.expanduser("~")]
    try:
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    found.append(repository_of(scratch))
    found.extend(extra)
    out = []
    for path in found:
        if path and os.path.isdir(path):
            real = os.path.realpath(path)
            if real != "/" and real not in out:
                out.append(real)
    return out


def gpu_driver_present() -> bool:
    return any(os.path.exists(p) for p in GPU_DEVICE_NODES)


def _memory_total() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@functools.lru_cache(maxsize=None)
def probe() -> tuple[bool, str]:
    """Can this process start a child in fresh user, network, PID and mount namespaces?"""
    if not sys.platform.startswith("linux"):
        return False, f"namespaces are Linux-only (this is {sys.platform})"
    unshare = shutil.which("unshare")
    if not unshare:
        return False, "the `unshare` program (util-linux) is not installed"
    try:
        proc = subprocess.run([unshare, *NAMESPACE_ARGS, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"`unshare` could not run ({e})"
    if proc.returncode != 0:
        why = proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return False, f"the OS refused new namespaces ({why[0]}); containers need user namespaces allowed"
    return True, ""


def plan(mode: str = "auto") -> Isolation:
    """The isolation to use for the next evaluation under `evaluator.sandbox` = mode."""
    if mode == "off":
        return Isolation(missing=["sandbox switched off (evaluator.sandbox: off)"])
    ok, why = probe()
    if ok:
        missing = ["read-only filesystem (a GPU driver is present, and CUDA does not start under it)"] \
            if gpu_driver_present() else []
        return Isolation(prefix=[shutil.which("unshare"), *NAMESPACE_ARGS], namespaces=True, missing=missing)
    missing = [f"network cut, PID, IPC and mount namespaces (so no trusted init, process-count limit, "
               f"size-capped scratch, hidden HOME and repository, read-only filesystem): {why}"]
    if mode == "strict":
        raise SandboxUnavailable(
            f"evaluator.sandbox is strict but {missing[0]}. Allow user namespaces "
            "(e.g. sysctl kernel.unprivileged_userns_clone=1, or run the container with "
            "--security-opt seccomp=unconfined), or set evaluator.sandbox: auto to run with less isolation.")
    return Isolation(missing=missing)


@functools.lru_cache(maxsize=None)
def protect_parent() -> bool:
    """Make this (kgit's) process non-dumpable, so processes of the same user cannot
    read /proc/<kgit pid>/environ or attach a debugger. Root can still; the PID
    namespace is what hides kgit from a child running as root."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def describe(mode: str = "auto") -> dict:
    """What an evaluation here gets, for `kgit sandbox` and the docs' checks."""
    try:
        iso = plan(mode)
    except SandboxUnavailable as e:
        return {"mode": mode, "namespaces": False, "missing": [str(e)]}
    limit = None
    if iso.namespaces:
        # Root is exempt from RLIMIT_NPROC, so as root only a pids cgroup limits processes.
        limit = "pids cgroup" if cgroups.pids_hierarchy() else ("RLIMIT_NPROC" if os.geteuid() != 0 else None)
    return {"mode": mode, "namespaces": iso.namespaces, "missing": iso.missing,
            "euid": os.geteuid(), "gpu_driver": gpu_driver_present(), "process_limit": limit}
