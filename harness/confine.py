"""Child-side confinement, applied before the candidate's code is imported.

Everything here is a Linux system call made through ctypes, so the harness needs no
helper binary. Each step reports what it did; a step the OS refuses is reported as
missing, never silently skipped: the parent decides whether that is acceptable.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
MS_BIND, MS_REC = 4096, 16384
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # same number on x86_64 and aarch64 (added in Linux 5.12)
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
CAPS_V3 = 0x20080522

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(ret: int, what: str):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# -- dying with kgit ---------------------------------------------------------------
def die_with_parent(parent_pid: int | None):
    """SIGKILL this process when the process that started it exits."""
    _check(libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    # The parent may have died before the prctl took effect; then nobody would signal us.
    if parent_pid and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def watch_lifeline(fd: int, own_group: bool):
    """Kill this process (and its group) once kgit's end of the lifeline pipe closes.

    The pipe closes when kgit exits for any reason, kill -9 included, and works
    through wrappers (unshare) that break the parent-death signal's parent link.
    """
    def watch():
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        if own_group:
            try:
                os.killpg(0, signal.SIGKILL)
            except OSError:
                pass
        # Not a signal to ourselves: as PID 1 of a namespace we would ignore it. Exiting
        # PID 1 takes every process of the namespace with it.
        os._exit(137)

    threading.Thread(target=watch, name="kgit-lifeline", daemon=True).start()


# -- resource limits ------------------------------------------------------------------
def set_limits(cpu_s: int | None, nofile: int, fsize: int, data_bytes: int | None) -> list[str]:
    """Lower the hard limits so the candidate cannot raise them again; return what was set."""
    applied = []

    def lower(which, name, value):
        soft, hard = resource.getrlimit(which)
        new = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (new, new))
        applied.append(f"{name}={new}")

    lower(resource.RLIMIT_CORE, "core", 0)
    lower(resource.RLIMIT_NOFILE, "nofile", nofile)
    # Writing past the size limit then fails with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    lower(resource.RLIMIT_FSIZE, "fsize", fsize)
    if cpu_s:
        lower(resource.RLIMIT_CPU, "cpu_s", cpu_s)
    if data_bytes:
        lower(resource.RLIMIT_DATA, "data", data_bytes)
    return applied


# -- filesystem -----------------------------------------------------------------------
class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(path: str, recursive: bool, set_=0, clear=0):
    attr = _MountAttr(set_, clear, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    ret = libc().syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr))
    _check(ret, f"mount_setattr({path})")


def _bind_self(path: str):
    _check(libc().mount(path.encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind mount {path}")


def read_only_except(writable: str, read_only: list[str]):
    """Make every mount read-only except `writable` and a fresh /dev/shm.

    Needs a private mount namespace (the parent starts us in one). The folders in
    `read_only` (the problem, the spec) stay read-only even though they sit inside
    `writable`.
    """
    _bind_self(writable)
    _mount_setattr("/", recursive=True, set_=MOUNT_ATTR_RDONLY)
    _mount_setattr(writable, recursive=False, clear=MOUNT_ATTR_RDONLY)
    for path in read_only:
        _bind_self(path)
        _mount_setattr(path, recursive=False, set_=MOUNT_ATTR_RDONLY)
    if os.path.isdir("/dev/shm"):
        # Shared memory is a common scratch space; give the candidate its own, empty one.
        _check(libc().mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, b"size=1g"), "mount tmpfs on /dev/shm")


def drop_capabilities():
    """Give up every capability (also across exec) so the mounts cannot be undone.

    Inside a user namespace we are root of that namespace only; without capabilities
    that root can no longer remount, mount or change owners.
    """
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        ret = libc().prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        if ret != 0 and ctypes.get_errno() != errno.EINVAL:
            _check(ret, f"prctl(PR_CAPBSET_DROP, {cap})")
    _check(libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    number = SYS_CAPSET.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"capset: unknown system-call number on {os.uname().machine}")
    header = (ctypes.c_uint32 * 2)(CAPS_V3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable for two 32-bit words: all zero
    _check(libc().syscall(number, header, data), "capset")


def apply(spec: dict) -> dict:
    """Apply the confinement the parent asked for in spec["sandbox"]; report what held."""
    want = spec.get("sandbox") or {}
    applied, missing = [], []

    lifeline = spec.get("lifeline_fd")
    if lifeline is not None:
        watch_lifeline(int(lifeline), own_group=not want.get("pid_namespace"))
        applied.append("dies with kgit (lifeline pipe)")
    if not sys.platform.startswith("linux"):
        missing.append(f"parent-death signal (Linux only; the lifeline pipe still works on {sys.platform})")
    else:
        try:
            die_with_parent(want.get("parent_pid"))
            applied.append("parent-death signal")
        except OSError as e:
            missing.append(f"parent-death signal ({e.strerror})")

    try:
        limits = set_limits(want.get("cpu_s"), int(want.get("nofile", 4096)),
                            int(want.get("fsize", 4 << 30)), want.get("data_bytes"))
        applied.append("limits " + " ".join(limits))
    except (OSError, ValueError) as e:
        missing.append(f"resource limits ({e})")

    if want.get("read_only"):
        scratch = want["scratch"]
        keep = [p for p in (spec.get("problem_dir"),) if p]
        try:
            read_only_except(scratch, keep)
            applied.append("read-only filesystem except the scratch folder")
        except OSError as e:
            missing.append(f"read-only filesystem ({e.strerror or e})")
    if want.get("drop_caps"):
        try:
            drop_capabilities()
            applied.append("no capabilities")
        except OSError as e:
            missing.append(f"dropping capabilities ({e.strerror or e})")
    if missing:
        print("kgit sandbox: not applied: " + "; ".join(missing), file=sys.stderr)
    return {"applied": applied, "missing": missing}
