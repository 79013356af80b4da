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
def set_limits(cpu_s: int | None, nofile: int, fsize: int, data_bytes: int | None,
               nproc: int | None = None) -> list[str]:
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
    if nproc:
        # Counted per user namespace (Linux 5.14+): every process and thread in ours,
        # and nothing outside it; apply() checks the kernel before asking for it.
        lower(resource.RLIMIT_NPROC, "nproc", nproc)
    return applied


def join_cgroup(folder: str):
    """Move this process (and so everything it starts) into the cgroup at `folder`."""
    with open(os.path.join(folder, "cgroup.procs"), "w") as f:
        f.write("0")  # "0": the writing process, whatever its number in our PID namespace
    # The candidate runs as the files' owner: without this it could raise pids.max or
    # move itself out, also on GPU hosts where the rest of the filesystem stays writable.
    _mount_setattr("/sys/fs/cgroup", recursive=True, set_=MOUNT_ATTR_RDONLY)


def nproc_counts_per_namespace() -> bool:
    """Since Linux 5.14 RLIMIT_NPROC counts the processes of a user namespace; before, all of the user's."""
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 14)


# -- filesystem -----------------------------------------------------------------------
class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(path: str, recursive: bool, set_=0, clear=0):
    attr = _MountAttr(set_, clear, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    ret = libc().syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr))
    _check(ret, f"mount_setattr({path})")


def _bind(source: str, target: str):
    _check(libc().mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), f"bind mount {target}")


def _bind_self(path: str):
    _check(libc().mount(path.encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind mount {path}")


MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_RDONLY = 2, 4, 32, 1
HIDE_BYTES = 1 << 20  # the empty tmpfs over a hidden folder holds only the paths mounted back


def _mount(source, target: str, fstype, flags: int, data):
    enc = lambda v: v.encode() if isinstance(v, str) else v  # noqa: E731
    _check(libc().mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _tmpfs(target: str, size: int, mode: str):
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(size)},mode={mode}")


def _make_read_only(path: str):
    """Read-only for the mount at `path` alone (its own mount flags kept)."""
    try:
        _mount_setattr(path, recursive=False, set_=MOUNT_ATTR_RDONLY)
    except OSError as e:
        if e.errno != errno.ENOSYS:
            raise
        # Before Linux 5.12: a remount must repeat the flags the mount already has.
        kept = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | 8 | 1024 | 2048 | 4096)
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept, None)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def runtime_paths() -> list[str]:
    """Folders this interpreter still reads after confinement: Python, its packages, the
    harness, the CUDA/ROCm toolkits. A hidden folder holding one gets it mounted back."""
    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(os.path.abspath(__file__))]
    found += [p for p in sys.path if p]
    found += [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "HIP_PATH")]
    found += os.environ.get("LD_LIBRARY_PATH", "").split(":")
    found += [os.path.dirname(os.environ.get(v, "")) for v in ("TRITON_PTXAS_PATH", "TRITON_HIP_LLD_PATH")]
    return sorted({os.path.realpath(p) for p in found if p and os.path.isdir(p)})


def private_view(scratch: str, keep: list[str], hide: list[str], scratch_bytes: int | None,
                 runtime: list[str]) -> tuple[list[str], list[str]]:
    """Build the candidate's view of the filesystem in this (private) mount namespace.

    - each folder in `hide` is covered by an empty, read-only tmpfs: not read-only,
      gone. Folders of `runtime` inside it are mounted back read-only at their place;
    - the scratch becomes a fresh tmpfs of `scratch_bytes` (writing past it fails with
      ENOSPC), and the folders of `keep` that sit inside it (the candidate, the problem)
      are mounted back read-only.

    The mounts back come from descriptors opened before anything was covered; they are
    closed before returning. Returns the folders hidden, and what was not hidden and why.
    """
    scratch = os.path.realpath(scratch)
    keep = [os.path.realpath(p) for p in keep if p and os.path.isdir(p)]
    refused, hidden = [], []
    for folder in sorted({os.path.realpath(h) for h in hide if os.path.isdir(h)}, key=len):
        if any(_inside(folder, h) for h in hidden) or _inside(folder, scratch):
            continue  # covered already
        holder = next((r for r in runtime if _inside(folder, r)), None)
        if holder:
            refused.append(f"{folder} is not hidden: the Python environment or toolkit in {holder} lives there")
            continue
        hidden.append(folder)
    back = {p for p in runtime + keep if any(_inside(p, h) for h in hidden) or _inside(p, scratch) and p != scratch}
    back = sorted(back, key=len)
    back = [p for i, p in enumerate(back) if not any(_inside(p, q) for q in back[:i])]
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for p in back}
    # Parents before children: the folder a mount goes into must already be in the new view.
    steps = sorted([(h, "hide") for h in hidden] + [(p, "back") for p in back]
                   + ([(scratch, "scratch")] if scratch_bytes else []), key=lambda step: len(step[0]))
    try:
        for path, what in steps:
            os.makedirs(path, exist_ok=True)
            if what == "hide":
                _tmpfs(path, HIDE_BYTES, "0755")
            elif what == "scratch":
                _tmpfs(path, scratch_bytes, "0700")
            else:
                _bind(f"/proc/self/fd/{fds[path]}", path)
                _make_read_only(path)
        for path in hidden:
            _make_read_only(path)
    finally:
        for fd in fds.values():
            os.close(fd)
    os.chdir(scratch)  # the old working directory is the folder under the new tmpfs
    return hidden, refused


def private_shm(size: int):
    """A fresh, empty /dev/shm: POSIX shared memory neither outlives the evaluation nor is shared."""
    if os.path.isdir("/dev/shm"):
        _tmpfs("/dev/shm", size, "1777")


def read_only_except(writable: list[str]):
    """Make every mount read-only except the mounts at `writable` (the scratch, /dev/shm).

    Mounts below a writable one (the candidate and problem folders mounted back)
    keep their own read-only flag.
    """
    for path in writable:
        if not os.path.ismount(path):
            _bind_self(path)  # a mount of its own, so it can stay writable
    _mount_setattr("/", recursive=True, set_=MOUNT_ATTR_RDONLY)
    for path in writable:
        _mount_setattr(path, recursive=False, clear=MOUNT_ATTR_RDONLY)


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

    if want.get("trusted_init"):
        if os.getppid() == 1:
            applied.append("trusted init as PID 1 (the namespace ends when kgit's lifeline closes)")
        else:
            missing.append("trusted init (the harness is not the child of PID 1)")
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
    if want.get("ipc_namespace"):
        applied.append("private IPC namespace")

    if want.get("pids_cgroup"):
        try:
            join_cgroup(want["pids_cgroup"])
            applied.append(f"pids cgroup (pids.max={open(want['pids_cgroup'] + '/pids.max').read().strip()})")
        except OSError as e:
            missing.append(f"pids cgroup ({e.strerror or e})")
    nproc = want.get("nproc")
    if want.get("pid_namespace") and not nproc and not want.get("pids_cgroup"):
        missing.append("process-count limit (root is exempt from RLIMIT_NPROC and no pids cgroup is writable)")
    if nproc and not nproc_counts_per_namespace():
        missing.append(f"process-count limit (Linux {os.uname().release} counts all of the user's processes)")
        nproc = None
    try:
        limits = set_limits(want.get("cpu_s"), int(want.get("nofile", 4096)),
                            int(want.get("fsize", 4 << 30)), want.get("data_bytes"), nproc)
        applied.append("limits " + " ".join(limits))
    except (OSError, ValueError) as e:
        missing.append(f"resource limits ({e})")

    if want.get("pid_namespace"):
        scratch = want["scratch"]
        keep = [spec.get("candidate_dir"), spec.get("helpers_dir")]
        hide = list(want.get("hide") or [])
        if want.get("hide_problem"):
            hide.append(spec.get("problem_dir"))
        else:
            keep.append(spec.get("problem_dir"))
        try:
            hidden, refused = private_view(scratch, [p for p in keep if p], [h for h in hide if h],
                                           want.get("scratch_bytes"), runtime_paths())
            if want.get("scratch_bytes"):
                applied.append(f"scratch is a tmpfs of {want['scratch_bytes']} bytes")
            if hidden:
                applied.append("hidden: " + ", ".join(hidden))
            missing.extend(refused)
        except OSError as e:
            missing.append(f"private filesystem view: hidden folders, size-capped scratch ({e.strerror or e})")
        if not want.get("shm_bytes"):
            missing.append("private /dev/shm (not on GPU hosts: CUDA IPC with the judge needs the host's)")
        else:
            try:
                private_shm(int(want["shm_bytes"]))
                applied.append("private /dev/shm")
            except OSError as e:
                missing.append(f"private /dev/shm ({e.strerror or e})")
    if want.get("read_only"):
        try:
            read_only_except([p for p in (want["scratch"], "/dev/shm") if os.path.isdir(p)])
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
