"""A pids cgroup per evaluation, where this host lets kgit make one.

Root is exempt from RLIMIT_NPROC, so as root (CI machines, most containers) the only
limit on the number of processes an evaluation starts is a pids cgroup. kgit makes
one per evaluation under its own cgroup (cgroup v1 with a `pids` hierarchy it may
write, or a cgroup v2 subtree where `pids` is delegated); the harness joins it before
any candidate code runs and makes the cgroup tree read-only behind it
(harness/confine.py). Empty leftovers are removed by later evaluations.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

CGROUP_PREFIX = "kgit-eval-"
STALE_CGROUP_S = 600  # an evaluation's cgroup is joined within seconds; older empty ones are leftovers


def pids_hierarchy() -> Path | None:
    """This process's cgroup in a pids hierarchy it may create child cgroups in, if any."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        membership = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for folder, version in candidates(mountinfo, membership):
        if version == 2:
            try:
                if "pids" not in (folder / "cgroup.subtree_control").read_text().split():
                    continue  # pids not delegated to our children
            except OSError:
                continue
        if os.access(folder, os.W_OK):
            return folder
    return None


def candidates(mountinfo: str, membership: str) -> list[tuple[Path, int]]:
    """(folder of our cgroup, cgroup version) for each pids-capable hierarchy mounted here.

    cgroup v1: a hierarchy mounted with the `pids` controller; v2: the unified
    hierarchy. `membership` is /proc/self/cgroup; a mount whose root is not "/" (inside
    a container) shows only the part of the path below that root.
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
        if fstype == "cgroup" and "pids" in options:
            own, version = next((g[2] for g in groups if "pids" in g[1].split(",")), None), 1
        elif fstype == "cgroup2":
            own, version = next((g[2] for g in groups if g[0] == "0" and g[1] == ""), None), 2
        else:
            continue
        if own is None:
            continue
        if root != "/" and (own == root or own.startswith(root + "/")):
            own = own[len(root):]
        found.append((where / own.lstrip("/"), version))
    return found


def pids_cgroup(limit: int) -> str | None:
    """A fresh pids cgroup with pids.max = limit for one evaluation (the child joins it), or None."""
    base = pids_hierarchy()
    if base is None:
        return None
    for old in base.glob(CGROUP_PREFIX + "*"):
        owner = old.name[len(CGROUP_PREFIX):].split("-")[0]
        try:
            stale = not owner.isdigit() or not os.path.exists(f"/proc/{owner}") \
                or time.time() - old.stat().st_mtime > STALE_CGROUP_S
            if stale:
                old.rmdir()  # refused while processes are in it
        except OSError:
            pass
    folder = base / f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:
        folder.mkdir()
        (folder / "pids.max").write_text(str(int(limit)))
    except OSError:
        try:
            folder.rmdir()
        except OSError:
            pass
        return None
    return str(folder)


def remove(folder: str | None):
    """Remove an evaluation's cgroup once its processes are gone (a busy one is left for the sweep)."""
    if folder:
        try:
            os.rmdir(folder)
        except OSError:
            pass
