"""What isolation this host allows for evaluated code, and how to ask for it.

The parent side of the sandbox (the child side is harness/confine.py). On Linux
the runner starts under `unshare` in new network, PID, IPC and mount namespaces: no
network, no view of other processes (so not of kgit's /proc/<pid>/environ either), no
SysV shared memory or message queue shared with anything else, and a small trusted
init (harness/pidone.py) as PID 1 that ends the namespace, and every process in it,
when kgit's lifeline closes. Inside, the runner sees an allowlisted filesystem (its
scratch, the candidate, the problem helpers, Python, the system libraries, the GPU
device files; nothing else of the host), read-only but for the scratch, joins a pids
and a memory cgroup, and gives up root: when kgit runs as root the runner becomes an
unprivileged user of its own (no user namespace is needed for that), otherwise it
runs as kgit's user in a user namespace without capabilities. Where the OS refuses a
part (containers often do), evaluation still runs and the result says plainly what
was not applied; `evaluator.sandbox: strict` refuses to run instead.
See docs/sandbox.md for what is and is not stopped.
"""

from __future__ import annotations

import ctypes
import functools
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kgit.errors import KgitError
from kgit.evaluation import cgroups
from kgit_harness import confine, pidone

PR_SET_DUMPABLE = 4
# --kill-child: PID 1 of the namespace (the trusted init) gets SIGKILL if unshare itself
# is killed; its death takes every process the candidate started with it.
NAMESPACE_ARGS = ["--user", "--map-root-user", "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
# kgit as root with an unprivileged runner: no user namespace. The runner builds its view
# as real root inside the new mount namespace, then becomes RUNNER_IDS' user for good.
ROOT_NAMESPACE_ARGS = ["--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"]
NVIDIA_CONTROL_NODE = "/dev/nvidiactl"
GPU_DEVICE_NODES = (NVIDIA_CONTROL_NODE, "/dev/kfd")
# The runner's uid and gid when kgit runs as root: one per evaluation, drawn at random from a
# block no account uses (under 2**31, which some tools read as a signed number). Two
# evaluations at once share a uid once in 65,536 pairs; they would then share only the
# RLIMIT_NPROC count, since each has its own PID namespace and, on hosts without a GPU
# driver, its own /dev/shm.
RUNNER_IDS = range(0x77000000, 0x77000000 + (1 << 16))


class SandboxUnavailable(KgitError):
    """The isolation .kgit.yaml asks for cannot be had on this host (`evaluator.sandbox: strict`
    without namespaces, `evaluator.runner_user: unprivileged` beside the NVIDIA driver)."""


@dataclass
class Isolation:
    """How one evaluation's runner is started and confined."""

    prefix: list = field(default_factory=list)  # command that wraps the runner (or `python -m kgit_harness`)
    namespaces: bool = False
    missing: list = field(default_factory=list)  # what this host would not allow, in words
    unprivileged: bool = False  # kgit is root and the runner becomes a user of its own

    def command(self, argv: list, lifeline_fd: int | None = None) -> list:
        """The command line that starts `argv` (the harness or the judge's runner) confined.

        With namespaces, the trusted init runs first as PID 1 and watches `lifeline_fd`
        (the read end of a pipe whose write end only kgit holds).
        """
        if lifeline_fd is None or not self.namespaces:
            return [*self.prefix, *argv]
        return pidone.command(self.prefix, argv, lifeline_fd)

    def child_settings(self, scratch, timeout_s: float, max_memory_gb: float | None, *, scratch_gb: float = 1.0,
                       max_processes: int | None = None, hide_problem: bool = False,
                       trusted_init: bool = True) -> dict:
        """The `sandbox` part of the runner's spec (read by confine.apply in the child).

        `hide_problem`: the problem folder is left out of the runner's view (the judge's
        runner gets its inputs from the judge). `trusted_init`: the command came from
        `command(..., lifeline_fd)`.
        """
        nproc = max_processes or default_max_processes()
        gpu = gpu_driver_present()
        data = None
        if max_memory_gb:
            data = int(max_memory_gb * (1 << 30))
        elif not gpu:
            # Only without a GPU driver: CUDA and ROCm map large private regions that a
            # data limit would count, so there the limit is the user's explicit choice.
            data = _memory_total() // 2 or None
        # The memory cgroup counts what is resident, not what is mapped, so GPU hosts get one too.
        memory = int(max_memory_gb * (1 << 30)) if max_memory_gb else (_memory_total() // 2 or None)
        run_as = runner_identity() if self.unprivileged else None
        return {
            "parent_pid": None if self.namespaces else os.getpid(),
            "pid_namespace": self.namespaces,
            # Measured on an H200 (driver 580): with every mount read-only, CUDA does not
            # start (cudaGetDeviceCount: error 304), so on GPU hosts the view's root, /tmp
            # and /dev stay writable (private tmpfs mounts); the libraries stay read-only.
            "read_only": self.namespaces and not gpu,
            "drop_caps": self.namespaces or os.geteuid() == 0,
            "scratch": str(scratch),
            # CPU seconds count every thread; this is a backstop for a lost wall clock.
            "cpu_s": int(timeout_s * (os.cpu_count() or 1) + 60),
            "nofile": 4096,
            "fsize": 4 << 30,
            "data_bytes": data,
            "ipc_namespace": self.namespaces,
            "trusted_init": self.namespaces and trusted_init,
            # Root is exempt from RLIMIT_NPROC; any other user of the runner is held by it,
            # also where no pids cgroup can be made.
            "nproc": nproc if self.namespaces and (run_as or os.geteuid() != 0) else None,
            "cgroups": cgroups.evaluation_cgroups({"pids": nproc, "memory": memory}) if self.namespaces else {},
            "memory_bytes": memory if self.namespaces else None,
            "run_as": run_as,
            "scratch_bytes": int(scratch_gb * (1 << 30)) if self.namespaces else None,
            # Measured on the H200: with a private /dev/shm in the runner, CUDA IPC from the
            # judge fails (cudaErrorMapBufferObjectFailed), so GPU hosts keep the host's.
            "shm_bytes": 0 if gpu else 1 << 30,
            # What the view holds is the runner's to find (harness/confine.py, view_sources);
            # kgit names what must not be in it, so the result can say if a runtime folder holds it.
            "view": {"private": private_folders(scratch), "devices": gpu_device_files()} if self.namespaces else None,
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


def private_folders(scratch) -> list[str]:
    """HOME (both `$HOME` and the password-file home) and the repository holding the
    scratch: none of them is in the runner's view, unless a runtime folder holds one
    (a virtual environment made at HOME's top, say), which the result then reports."""
    import pwd

    found = [os.path.expanduser("~")]
    try:
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    found.append(str(repository_of(scratch) or ""))
    return sorted({os.path.realpath(p) for p in found if p and os.path.isdir(p) and os.path.realpath(p) != "/"})


def runner_identity() -> list:
    """[uid, gid, supplementary groups] for an unprivileged runner: a fresh id from
    RUNNER_IDS, and the groups that own the GPU device files (ROCm's /dev/kfd and
    /dev/dri are often `render` or `video`, 0660), but never root's group."""
    ident = RUNNER_IDS[secrets.randbelow(len(RUNNER_IDS))]
    groups = set()
    for path in gpu_device_files():
        try:
            gid = os.stat(path).st_gid
        except OSError:
            continue
        if gid != 0:
            groups.add(gid)
    return [ident, ident, sorted(groups)]


def gpu_device_files() -> list[str]:
    """The device files CUDA and ROCm open (one list, the runner's: harness/confine.py)."""
    _make_nvidia_uvm_node()
    return confine.gpu_device_files()


def _make_nvidia_uvm_node():
    """CUDA needs /dev/nvidia-uvm, which the driver's set-user-ID `nvidia-modprobe` makes
    the first time a CUDA process starts on a host. A runner cannot run it (its view
    has no set-user-ID programs and a /dev of its own), so kgit does what that first
    CUDA process would have done, before the runner's view is built."""
    if os.path.exists("/dev/nvidiactl") and not os.path.exists("/dev/nvidia-uvm"):
        tool = shutil.which("nvidia-modprobe")
        if tool:
            try:
                subprocess.run([tool, "-u", "-c=0"], capture_output=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                pass  # then the runner finds no node, and CUDA's error says so


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


@functools.cache
def probe() -> tuple[bool, str]:
    """Can this process start a child in fresh user, network, PID, IPC and mount namespaces?"""
    return _try_unshare(tuple(NAMESPACE_ARGS))


@functools.cache
def probe_root() -> tuple[bool, str]:
    """As root: can this process start a child in fresh network, PID, IPC and mount namespaces
    without a user namespace (for an unprivileged runner)?"""
    return _try_unshare(tuple(ROOT_NAMESPACE_ARGS))


def _try_unshare(args: tuple) -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, f"namespaces are Linux-only (this is {sys.platform})"
    unshare = shutil.which("unshare")
    if not unshare:
        return False, "the `unshare` program (util-linux) is not installed"
    try:
        proc = subprocess.run([unshare, *args, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"`unshare` could not run ({e})"
    if proc.returncode != 0:
        why = proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return False, f"the OS refused new namespaces ({why[0]}); containers need user namespaces allowed"
    return True, ""


def _unprivileged_runner(runner_user: str) -> tuple[bool, str]:
    """(become an unprivileged user?, why not) for kgit running as root."""
    if runner_user == "kgit":
        return False, ("unprivileged runner user (evaluator.runner_user: kgit): the runner is root of its user "
                       "namespace, mapped onto root")
    if gpu_driver_present() and os.path.exists(NVIDIA_CONTROL_NODE):
        if runner_user == "unprivileged":
            raise SandboxUnavailable(
                "evaluator.runner_user: unprivileged cannot evaluate on a host with the NVIDIA driver: the judge "
                "(root) hands the runner its inputs through CUDA IPC, and the driver refuses to map root's memory "
                "into another user's process (cudaErrorMapBufferObjectFailed, seen on an H200). Set "
                "evaluator.runner_user: auto (the runner keeps root's identity in a user namespace, without "
                "capabilities, and its view keeps the rest of the disk out of reach).")
        return False, ("unprivileged runner user (the NVIDIA driver refuses CUDA IPC between the judge as root and "
                       "another user): the runner is root of its user namespace, mapped onto root")
    if runner_user == "auto" and gpu_driver_present():
        return False, ("unprivileged runner user (a ROCm driver is present, where HIP IPC between the judge as root "
                       "and another user is not yet verified; evaluator.runner_user: unprivileged applies it): the "
                       "runner is root of its user namespace, mapped onto root")
    ok, why = probe_root()
    return ok, "" if ok else f"unprivileged runner user: {why}"


def plan(mode: str = "auto", runner_user: str = "auto") -> Isolation:
    """The isolation to use for the next evaluation under `evaluator.sandbox` = mode and
    `evaluator.runner_user` = runner_user."""
    if mode == "off":
        return Isolation(missing=["sandbox switched off (evaluator.sandbox: off)"])
    ok, why = probe()
    if os.geteuid() == 0:
        drop, why_not = _unprivileged_runner(runner_user)
        if drop:
            return Isolation(prefix=[shutil.which("unshare"), *ROOT_NAMESPACE_ARGS], namespaces=True,
                             unprivileged=True)
        if ok:
            return Isolation(prefix=[shutil.which("unshare"), *NAMESPACE_ARGS], namespaces=True, missing=[why_not])
    elif ok:
        return Isolation(prefix=[shutil.which("unshare"), *NAMESPACE_ARGS], namespaces=True)
    missing = [f"network cut, PID, IPC and mount namespaces (so no trusted init, process-count limit, "
               f"memory cgroup, size-capped scratch, allowlisted and read-only filesystem, unprivileged user): {why}"]
    if mode == "strict":
        raise SandboxUnavailable(
            f"evaluator.sandbox is strict but {missing[0]}. Allow user namespaces "
            "(e.g. sysctl kernel.unprivileged_userns_clone=1, or run the container with "
            "--security-opt seccomp=unconfined), or set evaluator.sandbox: auto to run with less isolation.")
    return Isolation(missing=missing)


@functools.cache
def protect_parent() -> bool:
    """Make this (kgit's) process non-dumpable, so processes of the same user cannot
    read /proc/<kgit pid>/environ or attach a debugger. Root can still; the PID
    namespace is what hides kgit from a child running as root."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def describe(mode: str = "auto", runner_user: str = "auto") -> dict:
    """What an evaluation here gets, for `kgit sandbox` and the docs' checks."""
    try:
        iso = plan(mode, runner_user)
    except SandboxUnavailable as e:
        return {"mode": mode, "namespaces": False, "missing": [str(e)]}
    limit = memory = None
    if iso.namespaces:
        limit = "pids cgroup" if cgroups.hierarchy("pids") else (
            "RLIMIT_NPROC" if iso.unprivileged or os.geteuid() != 0 else None)
        memory = "memory cgroup" if cgroups.hierarchy("memory") else "RLIMIT_DATA (private memory only)"
    return {"mode": mode, "namespaces": iso.namespaces, "missing": iso.missing, "euid": os.geteuid(),
            "unprivileged_runner": iso.unprivileged, "gpu_driver": gpu_driver_present(), "process_limit": limit,
            "memory_limit": memory}
