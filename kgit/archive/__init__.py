"""The archive: the only code that talks to git. Attempt commits, branches, trailers,
notes, worktrees, the lock and the cached read of the log."""
