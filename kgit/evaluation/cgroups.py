"""A pids and a memory cgroup per evaluation, where this host lets kgit make them.

The pids cgroup bounds the processes and threads the runner may start: root is exempt
from RLIMIT_NPROC, so without it a runner that is root (kgit as root on a GPU host)
has no limit at all. The memory cgroup bounds the host memory the runner may hold,
whatever the kind: heap, memfd and POSIX shared memory, shared anonymous mappings and
tmpfs files all count there, while RLIMIT_DATA counts private mappings only. kgit
makes them under its own cgroup (cgroup v1 with a `pids` or `memory` hierarchy it may
write, or a cgroup v2 subtree where the controller is delegated); the runner joins them
before any candidate code runs (harness/confine.py). Empty leftovers are removed by
later evaluations.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

CGROUP_PREFIX = "kgit-eval-"
STALE_CGROUP_S = 600  # an evaluation's cgroup is joined within seconds; older empty ones are leftovers
CONTROLLERS = ("pids", "memory")


def hierarchy(controller: str) -> Path | None:
    """This process's cgroup in a hierarchy with `controller` that it may create child cgroups in."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        membership = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for folder, version in candidates(mountinfo, membership, controller):
        if version == 2:
            try:
                if controller not in (folder / "cgroup.subtree_control").read_text().split():
                    continue  # not delegated to our children
            except OSError:
                continue
        if os.access(folder, os.W_OK):
            return folder
    return None


def pids_hierarchy() -> Path | None:
    return hierarchy("pids")


def candidates(mountinfo: str, membership: str, controller: str = "pids") -> list[tuple[Path, int]]:
    """(folder of our cgroup, cgroup version) for each hierarchy mounted here that has `controller`.

    cgroup v1: a hierarchy mounted with the controller; v2: the unified hierarchy.
    `membership` is /proc/self/cgroup; a mount whose root is not "/" (inside a
    container) shows only the part of the path below that root. v1 hierarchies come
    first: where both exist, the controller is bound to the v1 one.
    """
    groups = [line.split(":", 2) for line in membership.splitlines() if line.count(":") >= 2]
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        fstype = fields[sep + 1]
        options = fields[sep + 3].split(",") if len(fields) > sep + 3 else []
        root, where = fields[3], Path(fields[4])
        if fstype == "cgroup" and controller in options:
            own, version = next((g[2] for g in groups if controller in g[1].split(",")), None), 1
        elif fstype == "cgroup2":
            own, version = next((g[2] for g in groups if g[0] == "0" and g[1] == ""), None), 2
        else:
            continue
        if own is None:
            continue
        if root != "/" and (own == root or own.startswith(root + "/")):
            own = own[len(root):]
        found.append((where / own.lstrip("/"), version))
    return sorted(found, key=lambda item: item[1])


def _write(folder: Path, name: str, value) -> bool:
    try:
        (folder / name).write_text(str(value))
        return True
    except OSError:
        return False


def _limit(folder: Path, controller: str, value: int) -> bool:
    """Set the controller's limit in a fresh cgroup; for memory, swap is kept out too where it can be."""
    if controller == "pids":
        return _write(folder, "pids.max", int(value))
    if (folder / "memory.max").exists():  # v2
        if not _write(folder, "memory.max", int(value)):
            return False
        _write(folder, "memory.swap.max", 0)  # absent without swap accounting
        _write(folder, "memory.oom.group", 1)  # an out-of-memory kill takes the whole runner, not one thread's process
        return True
    if not _write(folder, "memory.limit_in_bytes", int(value)):
        return False
    # v1: memory and swap together may not pass the limit either (absent without swap accounting).
    _write(folder, "memory.memsw.limit_in_bytes", int(value))
    _write(folder, "memory.swappiness", 0)
    return True


def _sweep(base: Path):
    """Remove empty evaluation cgroups whose kgit process is gone or that are old."""
    for old in base.glob(CGROUP_PREFIX + "*"):
        owner = old.name[len(CGROUP_PREFIX):].split("-")[0]
        try:
            stale = not owner.isdigit() or not os.path.exists(f"/proc/{owner}") \
                or time.time() - old.stat().st_mtime > STALE_CGROUP_S
            if stale:
                old.rmdir()  # refused while processes are in it
        except OSError:
            pass


def evaluation_cgroups(limits: dict) -> dict:
    """Fresh cgroups for one evaluation, {controller: folder or None}, from {controller: limit}.

    One folder per hierarchy: with cgroup v1 each controller has its own, with v2 one
    folder carries both. A controller with no limit (None) or no writable hierarchy
    gets None; the runner reports it as not applied.
    """
    made: dict[Path, Path] = {}
    out: dict = {}
    name = f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    for controller in CONTROLLERS:
        value = limits.get(controller)
        base = hierarchy(controller) if value else None
        if base is None:
            out[controller] = None
            continue
        folder = made.get(base)
        if folder is None:
            _sweep(base)
            folder = base / name
            try:
                folder.mkdir()
            except OSError:
                out[controller] = None
                continue
            made[base] = folder
        out[controller] = str(folder) if _limit(folder, controller, value) else None
    for folder in made.values():
        if str(folder) not in out.values():
            remove(str(folder))
    return out


def oom_kills(folder: str | None) -> int:
    """How many processes the kernel killed in a memory cgroup for passing its limit."""
    if not folder:
        return 0
    for name in ("memory.events", "memory.oom_control"):  # v2, v1 (Linux 4.13+)
        try:
            text = Path(folder, name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return 0


def remove(folder: str | None):
    """Remove an evaluation's cgroup once its processes are gone (a busy one is left for the sweep)."""
    if folder:
        try:
            os.rmdir(folder)
        except OSError:
            pass
