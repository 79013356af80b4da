"""Removing scratch folders and worktrees that evaluated code may have shaped.

`shutil.rmtree` recurses once per directory level, so a candidate that leaves a chain
of 1500 nested folders makes it raise RecursionError, and a folder it made unreadable
makes it fail; either left the scratch behind and broke every later cleanup of the
repository. `remove_tree` walks iteratively through directory file descriptors (no
path grows with the depth), gives itself back the permissions a hostile tree took
away, never follows a symbolic link, and reports failure instead of raising.
"""

from __future__ import annotations

import errno
import os
import stat

# Directory descriptors held open at once; a deeper chain is cut by moving its lower
# part up to the top folder, which is emptied later in the same walk.
MAX_OPEN = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _open_dir(name: str, parent_fd: int) -> int | None:
    """A descriptor of the directory `name` in parent_fd; None if it is not a directory (any more)."""
    for attempt in range(2):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except PermissionError:
            if attempt:
                raise
            os.chmod(name, 0o700, dir_fd=parent_fd, follow_symlinks=False)
        except (NotADirectoryError, FileNotFoundError):
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:  # a symbolic link: removed as a link below
                return None
            raise
    return None


def _remove(remove, name: str, dir_fd: int):
    """`remove` (os.unlink or os.rmdir) the entry `name` of the folder open as dir_fd."""
    try:
        remove(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except PermissionError:
        # The folder itself was made read-only; entries go once we may write it again.
        os.chmod(dir_fd, 0o700)
        remove(name, dir_fd=dir_fd)


def _sweep(fd: int) -> list[str]:
    """Remove every non-directory in the folder; return the names of its subfolders."""
    subdirs = []
    with os.scandir(fd) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        if is_dir:
            subdirs.append(name)
        else:
            _remove(os.unlink, name, fd)
    return subdirs


def _empty(root_fd: int):
    """Empty the folder open as root_fd, however deep it goes."""
    moved = 0
    # Each level: [descriptor, its name in the level above, subfolders still to visit].
    stack: list[tuple[int, str, list[str]]] = [(root_fd, "", _sweep(root_fd))]
    try:
        while stack:
            fd, name, pending = stack[-1]
            if not pending:
                pending.extend(_sweep(fd))  # whatever was moved in (or appeared) meanwhile
                if not pending:
                    stack.pop()
                    if stack:
                        os.close(fd)
                        _remove(os.rmdir, name, stack[-1][0])
                    continue
            sub = pending.pop()
            if len(stack) >= MAX_OPEN:
                moved += 1
                try:
                    os.rename(sub, f".kgit-rm-{moved}", src_dir_fd=fd, dst_dir_fd=root_fd)
                except FileNotFoundError:
                    pass
                continue
            sub_fd = _open_dir(sub, fd)
            if sub_fd is None:
                _remove(os.unlink, sub, fd)
                continue
            stack.append((sub_fd, sub, _sweep(sub_fd)))
    finally:
        for fd, _, _ in stack[1:]:
            os.close(fd)


def remove_tree(path) -> bool:
    """Delete `path` (a folder with everything in it, or a file or link); True once it is gone.

    Never raises for what it finds on disk: a folder it cannot remove (another user's
    files, a mount point) is left, and False says so.
    """
    path = os.path.abspath(os.fspath(path))
    parent, base = os.path.split(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        if not stat.S_ISDIR(st.st_mode):
            _remove(os.unlink, base, parent_fd)
            return True
        root_fd = _open_dir(base, parent_fd)
        if root_fd is None:
            _remove(os.unlink, base, parent_fd)
            return True
        try:
            _empty(root_fd)
        finally:
            os.close(root_fd)
        _remove(os.rmdir, base, parent_fd)
        return True
    except OSError:
        return not os.path.lexists(path)
    finally:
        os.close(parent_fd)
