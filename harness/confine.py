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
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
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
        # Counted for the runner's uid: in a user namespace (Linux 5.14+) every process and
        # thread in ours, and nothing outside it (apply() checks the kernel first); an
        # unprivileged runner's uid is its own, so only its processes count.
        lower(resource.RLIMIT_NPROC, "nproc", nproc)
    return applied


def join_cgroups(folders) -> str | None:
    """Move this process (and so everything it starts) into each cgroup folder of `folders`;
    None, or why the cgroup files could not be made read-only afterwards."""
    for folder in dict.fromkeys(f for f in folders if f):
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write("0")  # "0": the writing process, whatever its number in our PID namespace
    try:
        # A runner that is root of its user namespace owns root's cgroup files: without this
        # it could raise its limits or move itself out. (The view's /sys is read-only too, and
        # an unprivileged runner owns none of them.)
        _make_read_only("/sys/fs/cgroup", recursive=True)
    except OSError as e:
        return f"read-only cgroup files ({e.strerror or e})"
    return None


def _cgroup_limits(cgroups: dict) -> list[str]:
    """What the joined cgroups hold the runner to, in words."""
    applied = []
    pids = cgroups.get("pids")
    if pids:
        applied.append(f"pids cgroup (pids.max={_read(pids, 'pids.max')})")
    memory = cgroups.get("memory")
    if memory:
        v2 = os.path.exists(os.path.join(memory, "memory.max"))
        limit = _read(memory, "memory.max" if v2 else "memory.limit_in_bytes")
        swap = _read(memory, "memory.swap.max" if v2 else "memory.memsw.limit_in_bytes")
        swap_off = swap == "0" if v2 else swap == limit
        applied.append(f"memory cgroup (limit={limit} bytes, {'no swap' if swap_off else 'swap not limited'}; "
                       "memfd, shared mappings and tmpfs count)")
    return applied


def _read(folder: str, name: str) -> str:
    try:
        with open(os.path.join(folder, name)) as f:
            return f.read().strip()
    except OSError:
        return "?"


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


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_PRIVATE = 1, 2, 4, 32, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
# The view's root holds mount points only; on GPU hosts it stays writable (CUDA does not
# start with every mount read-only), and this is all that can be written there.
VIEW_ROOT_BYTES = 16 << 20
DEV_BYTES = 1 << 20
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}
# Parts of /proc that change the host, read-only as container runtimes make them: a
# runner that is root of its user namespace is root's owner there (sysctls, sysrq).
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")


def _mount(source, target: str, fstype, flags: int, data):
    enc = lambda v: v.encode() if isinstance(v, str) else v  # noqa: E731
    _check(libc().mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _tmpfs(target: str, size: int, mode: str, owner=None):
    data = f"size={int(size)},mode={mode}" + (f",uid={owner[0]},gid={owner[1]}" if owner else "")
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, data)


def _bind(source: str, target: str, read_only: bool = True):
    """Bind `source` (with what is mounted below it) at `target`, read-only unless asked."""
    _mount(source, target, None, MS_BIND | MS_REC, None)
    if read_only:
        _make_read_only(target, recursive=True)


def _make_read_only(path: str, recursive: bool = False):
    """Read-only and without set-user-ID programs for the mount at `path` (and those below
    it if `recursive`), its other flags kept."""
    try:
        _mount_setattr(path, recursive=recursive, set_=MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)
    except OSError as e:
        if e.errno != errno.ENOSYS:
            raise
        # Before Linux 5.12: a remount must repeat the flags the mount already has, and
        # reaches the top mount only.
        kept = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | 8 | 1024 | 2048 | 4096)
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept, None)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _mirror(root: str, path: str) -> str:
    """Copy into the new root each symbolic link met on the way to `path`, so that `path`
    resolves there as it does on the host; return where `path` really is."""
    current = "/"
    for name in [part for part in path.split("/") if part]:
        step = os.path.join(current, name)
        if os.path.islink(step):
            link = _under(root, step)
            if not os.path.lexists(link):
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(os.readlink(step), link)
            current = os.path.realpath(step)
        else:
            current = step
    return current


def _mount_point(target: str, like: str):
    """An empty directory, or an empty file for a file, at `target` for a mount of `like`."""
    if os.path.isdir(like):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            open(target, "w").close()


def _pivot(root: str):
    """Make `root` this mount namespace's root and let the old root go."""
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown system-call number on {os.uname().machine}")
    os.chdir(root)
    _check(libc().syscall(number, b".", b"."), "pivot_root")
    _check(libc().umount2(b".", MNT_DETACH), "umount of the old root")
    os.chdir("/")


# Files of /etc that Python, the dynamic linker and the GPU stacks read; nothing else of
# /etc (shadow, sudoers, ssh keys, credentials of other services) is in the view.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "localtime",
             "timezone", "os-release", "lsb-release", "alternatives", "hosts", "mime.types", "protocols",
             "services", "OpenCL")
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def runtime_folders() -> list[str]:
    """Folders this interpreter and the GPU stacks read: Python's prefixes and sys.path
    (this is the runner's own interpreter, before any candidate code), the harness, the
    CUDA and ROCm toolkits, and the library folders the environment and the dynamic
    linker's configuration name. As this host spells them (links are mirrored)."""
    import glob

    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(os.path.abspath(__file__))]
    found += [p for p in sys.path if p]
    found += [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "HIP_PATH")]
    found += os.environ.get("LD_LIBRARY_PATH", "").split(":")
    found += [os.path.dirname(os.environ.get(v, "")) for v in ("TRITON_PTXAS_PATH", "TRITON_HIP_LLD_PATH")]
    found += glob.glob("/opt/rocm*") + glob.glob("/usr/local/cuda*")
    for conf in ["/etc/ld.so.conf", *sorted(glob.glob("/etc/ld.so.conf.d/*.conf"))]:
        try:
            with open(conf) as f:
                found += [line.split("#")[0].strip() for line in f if line.strip().startswith("/")]
        except OSError:
            pass
    return sorted({os.path.abspath(p) for p in found if p and os.path.isdir(p)} - {"/"})


def view_sources() -> list[str]:
    """Everything the view mounts from the host's disks, read-only: the system's folders,
    the runtime's, and the allowlisted files of /etc."""
    etc = [f"/etc/{name}" for name in ETC_FILES]
    return [p for p in [*SYSTEM_FOLDERS, *runtime_folders(), *etc] if os.path.lexists(p)]


def allowlisted_view(scratch: str, keep: list[str], view: dict, *, scratch_bytes: int, shm_bytes: int,
                     read_only: bool, owner=None) -> tuple[list[str], list[str]]:
    """Replace this (private) mount namespace's filesystem by the allowlist, and enter it.

    The new root is an empty tmpfs holding, each at its host path: what `view_sources`
    names, read-only; a /dev with the basic devices and the GPU's device files (those
    of `view["devices"]` and those present now); /proc (the PID namespace's own) with
    the parts that change the host read-only; /sys read-only; a fresh /tmp; the scratch
    as a fresh tmpfs of `scratch_bytes` owned by `owner` (uid, gid) if given; and,
    read-only inside it, the folders of `keep` (the candidate, the problem helpers).
    /dev/shm is a private tmpfs of `shm_bytes`, or the host's where that is 0. With `read_only` the root and /dev are read-only too,
    so the scratch, /tmp and /dev/shm are the only writable places. Nothing else of
    the host is there: not HOME, the repository, other repositories or the rest of
    /etc. Returns (applied, missing) in words; `missing` names the folders of
    `view["private"]` (HOME, the repository) that a runtime folder holds.
    """
    keep = [p for p in keep if p and os.path.isdir(p)]
    # The scratch's own folders are covered below: held by descriptors opened before.
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for p in keep}
    mask = os.umask(0o022)  # mount points an unprivileged runner can pass through
    root = os.path.realpath(scratch)  # the new root is mounted over the scratch folder, a place of our own
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing of ours reaches the host's mounts
        _tmpfs(root, VIEW_ROOT_BYTES, "0755")
        # The fresh /tmp first: what the view takes from under the host's /tmp (a virtual
        # environment or a repository cloned there) is mounted into it, not hidden by it.
        os.makedirs(_under(root, "/tmp"), exist_ok=True)
        _tmpfs(_under(root, "/tmp"), scratch_bytes, "1777")
        # Every symbolic link on the way is copied first, while the new root is bare.
        sources = [_mirror(root, p) for p in view_sources()]
        scratch_at, keep_at = _mirror(root, scratch), {p: _mirror(root, p) for p in keep}
        placed: list = []
        for real in sorted(set(sources), key=len):
            if any(_inside(real, q) for q in placed) or not os.path.exists(real):
                continue
            _mount_point(_under(root, real), real)
            _bind(real, _under(root, real))
            placed.append(real)
        _devices(root, view.get("devices", []), shm_bytes)
        os.makedirs(_under(root, "/proc"), exist_ok=True)
        _bind("/proc", _under(root, "/proc"), read_only=False)
        for name in PROC_READ_ONLY:
            part = _under(root, f"/proc/{name}")
            if os.path.lexists(part):
                _bind(part, part)
        os.makedirs(_under(root, "/sys"), exist_ok=True)
        _bind("/sys", _under(root, "/sys"))
        os.makedirs(_under(root, scratch_at), exist_ok=True)
        _tmpfs(_under(root, scratch_at), scratch_bytes, "0700", owner)
        for path in sorted(keep, key=lambda p: len(keep_at[p])):
            target = _under(root, keep_at[path])
            os.makedirs(target, exist_ok=True)
            _bind(f"/proc/self/fd/{fds[path]}", target)
        if read_only:
            _make_read_only(_under(root, "/dev"))
            _make_read_only(root)
        _pivot(root)
    except OSError:
        try:
            libc().umount2(root.encode(), MNT_DETACH)  # back to the host's view; the caller says so
        except OSError:
            pass
        raise
    finally:
        os.umask(mask)
        for fd in fds.values():
            os.close(fd)
    os.chdir(scratch)
    missing = []
    for folder in view.get("private", []):
        holder = next((q for q in placed if _inside(os.path.realpath(folder), q)), None)
        if holder:
            missing.append(f"{folder} is in the view: it lies in {holder}, a folder the runtime needs")
    applied = ["allowlisted filesystem (the scratch, the candidate, the problem helpers, Python and its packages, "
               "the system's programs and libraries, the toolkits, basic /etc files, the devices, /proc and /sys; "
               "nothing else of the host)"]
    applied.append("read-only filesystem except the scratch folder, /tmp and /dev/shm" if read_only else
                   "read-only libraries, /etc, /sys and the parts of /proc that change the host (the view's root, "
                   "/tmp and /dev are private tmpfs mounts, left writable on a GPU host)")
    return applied, missing


GPU_DEVICE_PATTERNS = ("/dev/nvidia*", "/dev/kfd", "/dev/dri/*")


def gpu_device_files() -> list[str]:
    """The device files CUDA and ROCm open: NVIDIA's nodes and capability folders, AMD's kfd and DRI nodes."""
    import glob

    return [path for pattern in GPU_DEVICE_PATTERNS for path in sorted(glob.glob(pattern))]


def _devices(root: str, devices: list[str], shm_bytes: int):
    """/dev: a small tmpfs with the basic devices, the GPU's device files and /dev/shm.

    `devices` (from kgit) and those present now both go in: a node the driver made since
    kgit looked (the judge's CUDA start makes /dev/nvidia-uvm on a fresh host) is not missed.
    """
    dev = _under(root, "/dev")
    os.makedirs(dev, exist_ok=True)
    _tmpfs(dev, DEV_BYTES, "0755")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            _mount_point(os.path.join(dev, name), f"/dev/{name}")
            _bind(f"/dev/{name}", os.path.join(dev, name))
    for name, target in DEV_LINKS.items():
        os.symlink(target, os.path.join(dev, name))
    for path in sorted(set(devices) | set(gpu_device_files())):
        if not os.path.lexists(path) or not _inside(path, "/dev"):
            continue
        target = _under(root, path)
        if os.path.islink(path):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.lexists(target):
                os.symlink(os.readlink(path), target)
            continue
        _mount_point(target, path)
        _bind(path, target)
    shm = os.path.join(dev, "shm")
    os.makedirs(shm, exist_ok=True)
    if shm_bytes:
        _tmpfs(shm, shm_bytes, "1777")  # neither outlives the evaluation nor is shared
    elif os.path.isdir("/dev/shm"):
        _bind("/dev/shm", shm, read_only=False)


def become(uid: int, gid: int, groups: list[int]):
    """Become `uid`/`gid` (with supplementary `groups`) for good, with no capabilities.

    For kgit as root: the runner builds its view as root, then is an unprivileged user
    of its own. glibc changes every thread's ids; changing them from root to another
    user clears every capability, and the bounding set dropped first keeps them gone.
    """
    drop_bounding_set()
    os.setgroups([int(g) for g in groups])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    drop_capabilities(bounding=False)


def drop_bounding_set():
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        ret = libc().prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        if ret != 0 and ctypes.get_errno() != errno.EINVAL:
            _check(ret, f"prctl(PR_CAPBSET_DROP, {cap})")


def drop_capabilities(bounding: bool = True):
    """Give up every capability (also across exec) so the mounts cannot be undone.

    Inside a user namespace we are root of that namespace only; without capabilities
    that root can no longer remount, mount or change owners.
    """
    if bounding:
        drop_bounding_set()
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

    groups = {k: v for k, v in (want.get("cgroups") or {}).items() if v}
    if groups:
        try:
            not_read_only = join_cgroups(groups.values())
            applied.extend(_cgroup_limits(groups))
            if not_read_only:
                missing.append(not_read_only)
        except OSError as e:
            missing.append(f"cgroups ({e.strerror or e})")
            groups = {}
    run_as = want.get("run_as")
    nproc = want.get("nproc")
    if want.get("pid_namespace"):
        if not nproc and "pids" not in groups:
            missing.append("process-count limit (root is exempt from RLIMIT_NPROC and no pids cgroup is writable)")
        if want.get("memory_bytes") and "memory" not in groups:
            missing.append("memory cgroup (no memory hierarchy kgit may write): memfd, POSIX shared memory, shared "
                           "mappings and tmpfs files are not counted; RLIMIT_DATA holds private memory only")
    if nproc and not run_as and not nproc_counts_per_namespace():
        # In a user namespace: before Linux 5.14 the count is all of the user's processes.
        missing.append(f"process-count limit (Linux {os.uname().release} counts all of the user's processes)")
        nproc = None
    try:
        limits = set_limits(want.get("cpu_s"), int(want.get("nofile", 4096)),
                            int(want.get("fsize", 4 << 30)), want.get("data_bytes"), nproc)
        applied.append("limits " + " ".join(limits))
    except (OSError, ValueError) as e:
        missing.append(f"resource limits ({e})")

    if want.get("pid_namespace"):
        keep = [spec.get("candidate_dir"), spec.get("helpers_dir")]
        if not want.get("hide_problem"):
            keep.append(spec.get("problem_dir"))
        try:
            done, refused = allowlisted_view(
                want["scratch"], [p for p in keep if p], want.get("view") or {},
                scratch_bytes=int(want.get("scratch_bytes") or 1 << 30), shm_bytes=int(want.get("shm_bytes") or 0),
                read_only=bool(want.get("read_only")), owner=run_as[:2] if run_as else None)
            applied.extend(done)
            applied.append(f"scratch is a tmpfs of {int(want.get('scratch_bytes') or 1 << 30)} bytes")
            if want.get("shm_bytes"):
                applied.append("private /dev/shm")
            else:
                missing.append("private /dev/shm (not on GPU hosts: CUDA IPC with the judge needs the host's)")
            missing.extend(refused)
        except OSError as e:
            missing.append(f"allowlisted filesystem, size-capped scratch, read-only filesystem ({e.strerror or e})")
    if run_as:
        try:
            become(*run_as)
            applied.append(f"runs as uid {run_as[0]}, gid {run_as[1]}: an unprivileged user of its own, owner of "
                           "none of the host's files")
            applied.append("no capabilities")
        except OSError as e:
            missing.append(f"unprivileged runner user ({e.strerror or e})")
            run_as = None
        else:
            try:
                die_with_parent(want.get("parent_pid"))  # changing ids cleared the parent-death signal
            except OSError as e:
                missing.append(f"parent-death signal after the change of user ({e.strerror})")
    if want.get("drop_caps") and not run_as:
        try:
            drop_capabilities()
            applied.append("no capabilities")
        except OSError as e:
            missing.append(f"dropping capabilities ({e.strerror or e})")
    if missing:
        print("kgit sandbox: not applied: " + "; ".join(missing), file=sys.stderr)
    return {"applied": applied, "missing": missing}
