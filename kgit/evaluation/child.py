"""Run the harness on a candidate in a child process and collect its result.

The child is the judge, `python -I -B -m kgit_harness judge`, started with its runner as a
`Pair`, possibly ahead of need (a warm evaluator, docs/evaluators.md): isolated from the user's
site and environment variables, writing no bytecode, in its own process group (killed
whole on timeout), with an environment built from an allowlist so no credential
reaches code a model wrote. The judge starts the runner, where the candidate runs,
under the sandbox prefix chosen here (docs/harness.md). The result arrives from the
judge on a dedicated pipe the runner never holds, never from stdout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kgit import excerpts
from kgit import secrets as kgit_secrets
from kgit.cleanup import remove_tree
from kgit.errors import ConfigError
from kgit.evaluation import sandbox
from kgit.problems import load_task
from kgit_harness import result as result_mod
from kgit_harness.spec import Spec, StartSpec, TimingSettings

# The allowlist and the secret-name pattern live in kgit/secrets.py (re-exported here).
ENV_ALLOW, SECRET_PATTERN = kgit_secrets.ENV_ALLOW, kgit_secrets.SECRET_NAME


def child_env(scratch: Path, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW and not SECRET_PATTERN.search(k)}
    env.update({
        "HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
        "TRITON_CACHE_DIR": str(scratch / "triton-cache"), "TRITON_HOME": str(scratch),
        "MPLCONFIGDIR": str(scratch),
        # An unprivileged runner's uid has no account: getpass.getuser() (torch.compile's
        # cache folder) reads these before it would fail on the password file.
        "USER": "kgit-runner", "LOGNAME": "kgit-runner",
    })
    env.update(extra or {})
    return {k: v for k, v in env.items() if not SECRET_PATTERN.search(k)}


class OutputTail:
    """Keeps the first and last bytes of a stream whatever its size, so a candidate that
    prints gigabytes costs neither memory nor disk."""

    def __init__(self, limit: int):
        self.limit, self.total = max(int(limit), 2), 0
        self.head, self.tail = bytearray(), bytearray()

    def add(self, chunk: bytes):
        self.total += len(chunk)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.limit // 2:
            del self.tail[: len(self.tail) - self.limit // 2]

    def text(self) -> str:
        kept = len(self.head) + len(self.tail)
        cut = f"\n[... {self.total - kept} bytes cut ...]\n" if self.total > kept else ""
        return (bytes(self.head).decode("utf-8", errors="replace") + cut
                + bytes(self.tail).decode("utf-8", errors="replace"))


def stage_candidate(source_root: Path, problem_rel: str, files: list[str], scratch: Path) -> tuple[Path, Path]:
    """Copy the problem and the editable files into `scratch`, apart from each other.

    The candidate's folder holds only its own files, so the reference cannot be
    imported from it as a sibling module.
    """
    problem_dir = scratch / "problem"
    candidate_dir = scratch / "candidate"
    shutil.copytree(Path(source_root) / problem_rel, problem_dir)
    candidate_dir.mkdir(exist_ok=True)  # a pair started ahead of need made it, empty, for its runner's view
    for name in files:
        src = Path(source_root) / name
        if src.exists():
            dest = candidate_dir / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
            _readable(candidate_dir, dest)
    return problem_dir, candidate_dir


def _readable(top: Path, path: Path):
    """Readable by all (the folders on the way passable): the runner may be a user of its own
    (docs/sandbox.md). The scratch above, made by mkdtemp, is kgit's alone on the host."""
    path.chmod(path.stat().st_mode | 0o444)
    while path != top:
        path = path.parent
        path.chmod(path.stat().st_mode | 0o555)


def evaluate_tree(source_root: Path, config, *, state_dir: Path, devices_env: dict | None = None,
                  race: dict | None = None, pair: Pair | None = None, quiet=None, watch=None) -> dict:
    """Evaluate the kernel in a checked-out tree; return the result document.

    `race` is the incumbent to race against (harness/racing.py), from `kgit evolve` only.
    `pair`: a judge and runner started ahead of need for this config (`Pair.ahead`), used
    instead of starting one; it is used once, whatever the outcome. `quiet`: what to hold
    back while the timed loop runs, `watch`: told each stage (`Pair.evaluate`).
    """
    task = load_task(Path(source_root) / config.problem)
    reference = Path(source_root) / config.problem / "reference.py"
    if not reference.is_file():
        if pair is not None:
            pair.discard()
        # Evaluating anyway would commit the problem's breakage as the kernel's crash.
        raise ConfigError(f"{config.problem}/reference.py is missing from the tree being evaluated: a problem "
                          "folder needs task.yml and reference.py. Restore it with "
                          f"`git checkout kgit/baseline -- {config.problem}/reference.py` and commit.")
    if pair is None:
        pair = Pair.ahead(config, state_dir, devices_env, warm=False)
    try:
        stage_candidate(source_root, config.problem, task.files, pair.scratch)
        # state_dir is <repo>/.git/kgit/scratch; the judge's build-facts cache sits beside it,
        # hidden from the runner with the repository (harness/factcache.py, docs/targets.md).
        return pair.evaluate(config, race=race, targets_cache=state_dir.parent / "target-facts", quiet=quiet,
                             watch=watch)
    finally:
        pair.discard()


def run_child(problem_dir: Path, candidate_dir: Path, config, scratch: Path, devices_env: dict | None = None,
              race: dict | None = None, targets_cache: Path | None = None) -> dict:
    """Evaluate a staged problem and candidate at once (a pair started for them, then used)."""
    pair = Pair(config, scratch, Path(problem_dir), Path(candidate_dir), devices_env, owns_scratch=False)
    try:
        return pair.evaluate(config, race=race, targets_cache=targets_cache)
    finally:
        pair.discard()


def start_key(config, devices_env: dict | None) -> tuple:
    """What a started pair was started for: one started under other settings is not used."""
    ev = config.evaluator
    return (ev.sandbox, ev.runner_user, ev.timeout_s, ev.max_memory_gb, ev.scratch_gb, ev.max_processes,
            tuple(sorted((devices_env or {}).items())))


class Pair:
    """A judge and its runner, started before their candidate exists, used for one evaluation.

    Started: the judge (`kgit_harness judge --start`) starts the runner under the sandbox,
    both import torch and triton and (once a pair started ahead has its gate opened:
    `open_gate`) make the device context, then the judge waits on the go pipe. `evaluate`
    writes the evaluation (problem, timing, secret seed, race) to that pipe once the
    candidate's files are in `candidate_dir`, which the runner's view has held, read-only,
    since it confined itself. A pair is never used twice; `discard` ends whatever is left
    of it. Both processes die with kgit, kill -9 included: the
    lifeline pipe (its write end only here), the parent-death signal, and the trusted
    init as PID 1 of the runner's namespace.
    """

    def __init__(self, config, scratch: Path, problem_dir: Path, candidate_dir: Path,
                 devices_env: dict | None = None, *, owns_scratch: bool, warm: bool = False):
        self.scratch, self.problem_dir, self.candidate_dir = Path(scratch), problem_dir, candidate_dir
        self.owns_scratch, self.key = owns_scratch, start_key(config, devices_env)
        self.isolation = sandbox.plan(config.evaluator.sandbox, config.evaluator.runner_user)
        sandbox.protect_parent()
        ev = config.evaluator
        self.start_spec = StartSpec(
            problem_dir=str(problem_dir), candidate_dir=str(candidate_dir),
            # The runner's confinement and the command that wraps it: applied by the judge
            # to the runner only, so the judge keeps its view of the problem and the result fd.
            # The runner gets its inputs from the judge, so the problem folder is hidden from it.
            sandbox=self.isolation.child_settings(self.scratch, ev.timeout_s, ev.max_memory_gb,
                                                  scratch_gb=ev.scratch_gb, max_processes=ev.max_processes,
                                                  hide_problem=True, trusted_init=self.isolation.namespaces),
            runner_prefix=tuple(self.isolation.prefix), runner_cwd=str(self.scratch),
            parent_pid=os.getpid(),
            # Kept warm for a later candidate: the judge may import what a reference could
            # use while it waits and make its BLAS handles, the runner load the profiler the
            # split needs and pay Triton's first costs (harness/jitwarm.py); a pair used at
            # once skips these (harness/judge.py start).
            ahead=warm, kernel_split=ev.kernel_split,
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.used = False
        self._watcher: threading.Thread | None = None
        self._stop_watching = threading.Event()
        self._gate_lock = threading.Lock()  # open_gate comes from several threads: one write, one close
        self._start(devices_env)

    @classmethod
    def ahead(cls, config, state_dir: Path, devices_env: dict | None = None, warm: bool = True) -> Pair:
        """A pair in a fresh scratch folder of `state_dir`, its candidate folder still empty;
        `warm`: kept for a candidate that does not exist yet (not used at once)."""
        state_dir.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f"eval-{os.getpid()}-", dir=state_dir))
        (scratch / "candidate").mkdir()
        (scratch / "candidate").chmod(0o755)  # readable by an unprivileged runner whatever the umask
        try:
            return cls(config, scratch, scratch / "problem", scratch / "candidate", devices_env, owns_scratch=True,
                       warm=warm)
        except BaseException:
            remove_tree(scratch)
            raise

    def _start(self, devices_env):
        result_r, result_w = os.pipe()
        notice_r, notice_w = os.pipe()  # the judge's "timed loop begins / ends" lines
        # The judge watches the read end; when kgit dies, however it dies, the kernel closes
        # our write end and the judge kills itself and everything it started.
        life_r, life_w = os.pipe()
        go_r, go_w = os.pipe()
        # A pair started ahead of need waits at its gate before making device contexts (open_gate).
        gate_r, gate_w = os.pipe() if self.start_spec.ahead else (None, None)
        self.spawned_at = time.monotonic()
        spec = dataclasses.replace(self.start_spec, lifeline_fd=life_r, notice_fd=notice_w, spawned_at=self.spawned_at,
                                   gate_fd=gate_r)
        start_path = self.scratch / "spec.json"  # one pair per scratch folder; the judge deletes it
        start_path.write_text(json.dumps(spec.to_dict()))
        cmd = [sys.executable, "-I", "-B", "-m", "kgit_harness", "judge", "--start", str(start_path),
               "--go-fd", str(go_r), "--result-fd", str(result_w)]
        theirs = [fd for fd in (result_w, life_r, go_r, notice_w, gate_r) if fd is not None]
        ours = [fd for fd in (result_r, life_w, go_w, notice_r, gate_w) if fd is not None]
        try:
            self.proc = subprocess.Popen(
                cmd, cwd=self.scratch, env=child_env(self.scratch, devices_env), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=tuple(theirs),
                # What the judge writes for its runner (the problem helpers) must be readable
                # by an unprivileged runner whatever kgit's own umask.
                start_new_session=True, umask=0o022,
            )
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        self.result_r, self.life_w, self.go_w, self.notice_r = result_r, life_w, go_w, notice_r
        self.gate_w = gate_w

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and not self.used

    def open_gate(self):
        """Let a pair started ahead of need make its device contexts (once; harmless after).

        Until then its judge and runner do only CPU work (Python, torch and triton imports, the
        profiler's libraries) and wait: a device context made on a GPU while another
        evaluation's timed loop runs there lands inside that loop's figures. kgit opens the
        gate once the pair waits at it and no evaluation on its device is timing
        (`when_at_gate`, backends.WarmPairs), and always when the pair is taken. Closed
        unopened (`discard`), it ends the pair."""
        with self._gate_lock:
            fd, self.gate_w = self.gate_w, None
        if fd is None:
            return
        try:
            os.write(fd, b"1")
        except OSError:
            pass  # the judge is gone already; its evaluation, if any, says why
        finally:
            os.close(fd)

    def when_at_gate(self, at_gate) -> None:
        """Call `at_gate(self)` from a thread of kgit's once the judge and its runner wait at the
        gate (the judge's `at gate` notice: their imports and profiler libraries done), unless
        the pair is taken (`evaluate`) or ended (`discard`) first.

        kgit opens a gate then, not when the pair is started: a gate opened at the start let
        the contexts be made whenever the imports ended, most often inside the timed loop of
        the evaluation that had just taken the pair before. The lines read here are start
        marks only: the judge writes nothing more until its gate opens, and the evaluation
        reads the notice pipe once this thread has stopped."""
        fd = self.notice_r
        if self.gate_w is None or fd is None:
            return

        def watch():
            seen = b""
            while not self._stop_watching.is_set():
                try:
                    ready, _, _ = select.select([fd], [], [], 0.05)
                    chunk = os.read(fd, 4096) if ready else None
                except OSError:
                    return  # ended
                if chunk == b"":
                    return  # the judge is gone; the evaluation that takes the pair says why
                seen = (seen + (chunk or b""))[-256:]
                if b"\nat gate\n" in b"\n" + seen:
                    at_gate(self)
                    return

        with self._gate_lock:  # `_end_watch` sees no thread, or a started one it can join
            if not self._stop_watching.is_set():
                self._watcher = threading.Thread(target=watch, name="kgit-warm-gate", daemon=True)
                self._watcher.start()

    def _end_watch(self):
        """Stop the `when_at_gate` thread and wait for it: after this nothing of kgit's but the
        evaluation reads the notice pipe, and its descriptor may be closed."""
        self._stop_watching.set()
        with self._gate_lock:
            watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join()

    def evaluate(self, config, race: dict | None = None, targets_cache: Path | None = None, quiet=None,
                 watch=None) -> dict:
        """Send the evaluation (the candidate's files are in place) and collect its result.

        `quiet` (`begin()`, `end()`): told when the judge's timed loop begins and ends (the
        judge's notice lines), and `end()` again once the evaluation is over, however it ended.
        `watch(stage)`: told each stage in the user's words (`stage_of`), for a progress line.
        """
        assert not self.used, "a started pair is used for one evaluation only"
        self.used = True
        self._end_watch()  # before this evaluation reads the notice pipe
        self.open_gate()
        ev = config.evaluator
        task = Spec(start=self.start_spec, timing=TimingSettings(**asdict(config.timing)),
                    secret_seed=secrets.randbelow(2**31), timeout_s=ev.timeout_s,
                    # None: the problem's declared build targets (docs/targets.md)
                    targets=None if config.targets is None else tuple(config.targets),
                    targets_gpu_shapes=config.targets_gpu_shapes,
                    targets_cache=str(targets_cache) if targets_cache else None,  # the judge's only (harness/factcache.py)
                    race=race)
        started = time.monotonic()
        try:
            with os.fdopen(self.go_w, "wb") as go:
                go.write(json.dumps(task.evaluation_dict()).encode())
        except BrokenPipeError:
            pass  # the judge is gone already; what it left on the result pipe says why
        self.go_w = None
        limit = ev.max_output_bytes
        streams: dict[str, Any] = {"result": OutputTail(64 << 20), "stdout": OutputTail(limit),
                                   "stderr": OutputTail(limit)}
        proc = self.proc
        result_r, self.result_r = self.result_r, None
        notice_r, self.notice_r = self.notice_r, None
        streams["notices"] = _Notices(quiet, watch)
        try:
            status = _wait(proc, {result_r: streams["result"], proc.stdout.fileno(): streams["stdout"],
                                  proc.stderr.fileno(): streams["stderr"], notice_r: streams["notices"]}, ev.timeout_s)
        finally:
            os.close(notice_r)
            if quiet is not None:
                quiet.end()
        elapsed = round(time.monotonic() - started, 3)
        stdout, stderr = streams["stdout"].text(), streams["stderr"].text()
        payload = bytes(streams["result"].head + streams["result"].tail)
        doc = _result_doc(status, payload, proc.returncode, stderr, ev.timeout_s)
        confined = doc.pop("confine", None) or {}
        memory = (self.start_spec.sandbox.get("cgroups") or {}).get("memory")
        if doc.get("status") != "ok" and sandbox.cgroups.oom_kills(memory):
            limit = self.start_spec.sandbox.get("memory_bytes") or 0
            doc["error"] = (f"The evaluated code went past its host memory limit ({limit / (1 << 30):.3g} GiB: "
                            "evaluator.max_memory_gb, or half the RAM) and the kernel killed it.\n"
                            + (doc.get("error") or ""))
        doc["eval_s"] = elapsed
        if isinstance(doc.get("phases"), dict):
            # On the judge's clock (seconds since kgit started it): a judge still starting when its
            # candidate was sent marks "candidate arrived" later than this.
            doc["phases"]["kgit"] = {"candidate sent": round(started - self.spawned_at, 4)}
        doc["stdout"], doc["stderr"] = stdout, stderr
        # The kernel is named as its author knows it (kernel.py), not by the scratch folder it was staged in.
        for key in ("error", "stdout", "stderr"):
            if isinstance(doc.get(key), str):
                doc[key] = excerpts.relative_paths(doc[key], self.candidate_dir)
        doc["sandbox"] = {"namespaces": self.isolation.namespaces, "applied": confined.get("applied", []),
                          "missing": self.isolation.missing + confined.get("missing", [])}
        return kgit_secrets.redact_result(doc)  # the excerpt and output reach commits and prompts

    def discard(self):
        """End the pair (used or not) and remove its scratch folder if it made one."""
        self._end_watch()
        for name in ("go_w", "result_r", "life_w", "notice_r", "gate_w"):
            with self._gate_lock:
                fd = getattr(self, name, None)
                setattr(self, name, None)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self.proc is not None:
            _kill_group(self.proc)
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
        for folder in set((self.start_spec.sandbox.get("cgroups") or {}).values()):
            sandbox.cgroups.remove(folder)
        if self.owns_scratch:
            remove_tree(self.scratch)


# The judge's stage marks (harness/judge.py) in the words a person waiting reads: the last
# mark passed says what runs now. "shape k/n" lines come as they are.
STAGES = {
    "judge up": "start", "runner spawned": "start", "torch imported": "start", "imports done": "start",
    "at gate": "start", "gate opened": "start", "device ready": "start",
    "candidate arrived": "start", "reference ready": "start", "runner ready": "compile",
    "candidate imported": "checks", "checked": "timing", "benchmarks timed": "finish", "kernels split": "finish",
    "gpu shapes captured": "finish", "timed": "finish", "runner said bye": "finish", "result": "finish",
}


def stage_of(notice: str) -> str | None:
    """The stage a judge's notice line begins, in the user's words; None for a line that names none."""
    if notice.startswith("shape "):
        return "timing " + notice
    return STAGES.get(notice)


class _Notices:
    """The judge's notice lines: passed on to `quiet` ("checked": timing begins, "timed": it
    ended) and, as stages (`stage_of`), to `watch`."""

    def __init__(self, quiet, watch=None):
        self.quiet, self.watch, self.rest = quiet, watch, b""

    def add(self, chunk: bytes):
        *lines, self.rest = (self.rest + chunk).split(b"\n")
        self.rest = self.rest[-128:]  # the judge writes a few short lines; nothing to hoard
        for line in lines:
            if self.quiet is not None:
                if line == b"checked":
                    self.quiet.begin()
                elif line == b"timed":
                    self.quiet.end()
            if self.watch is not None:
                stage = stage_of(line.decode("utf-8", errors="replace"))
                if stage:
                    self.watch(stage)


def _result_doc(status: str, payload: bytes, code, stderr: str, timeout_s: float) -> dict:
    if status == "timeout":
        return result_mod.new("timeout", error=f"no result within {timeout_s:g} s; the process group was killed.\n"
                              + stderr[-2000:])
    try:
        doc = result_mod.validate(json.loads(payload)) if payload.strip() else None
    except (ValueError, json.JSONDecodeError):
        doc = None
    if doc is not None:
        if doc["status"] == "crash" and doc.get("error", "").startswith("the runner process died"):
            # The runner's stderr holds faulthandler's report: where it died.
            doc["error"] += "\n" + _fault_excerpt(stderr)
        return doc
    if code is not None and code > 128 and code - 128 in _SIGNALS:
        code = -(code - 128)  # unshare re-raises the child's signal, a shell-style exit code at worst
    if code == -signal.SIGXCPU:
        return result_mod.new("timeout", error="the CPU-time limit was reached (SIGXCPU).\n" + stderr[-2000:])
    why = f"killed by signal {signal.Signals(-code).name}" if code and code < 0 and -code in _SIGNALS else f"exit code {code}"
    # faulthandler's report (the Python stack at the fault) says where; what follows it
    # is a list of loaded modules, so the excerpt starts at the report, not at the tail.
    return result_mod.new("crash", error=f"the harness process died without a result ({why}).\n" + _fault_excerpt(stderr))


def _fault_excerpt(stderr: str) -> str:
    start = stderr.rfind("Fatal Python error")
    return stderr[start:start + 3000] if start >= 0 else stderr[-3000:]


_SIGNALS = {s.value for s in signal.Signals}


def _wait(proc, streams: dict, timeout) -> str:
    """Drain the result pipe, stdout and stderr until the result pipe closes or time runs out.

    Every fd is drained all the time, so a candidate that prints without end neither
    blocks on a full pipe nor grows kgit's memory. On timeout, or once a result is in,
    the whole process group is killed: nothing the candidate started outlives it.
    """
    import selectors

    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    result_fd = next(iter(streams))
    for fd in streams:
        sel.register(fd, selectors.EVENT_READ)
    status, grace_until = "done", None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                # A result already in stands, however slowly the harness then exits.
                status = "timeout" if result_fd in sel.get_map() else "done"
                break
            if grace_until is None and (result_fd not in sel.get_map() or proc.poll() is not None):
                # The result is in, or the harness is gone: what is still open belongs to
                # a process that exits slowly or to the candidate's leftovers. The group is
                # ended now, not waited for (the judge wrote its output before its result),
                # and what is left in the pipes is drained briefly.
                _signal_group(proc)
                grace_until = now + 2.0
            if grace_until is not None and now >= grace_until:
                break
            wait = min(deadline, grace_until or deadline) - now
            for key, _ in sel.select(timeout=min(wait, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    streams[key.fd].add(chunk)
                else:
                    sel.unregister(key.fd)
    finally:
        sel.close()
        os.close(result_fd)
    _kill_group(proc)
    return status


def _signal_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(proc):
    _signal_group(proc)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
