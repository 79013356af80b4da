"""Run the harness on a candidate in a child process and collect its result.

The child is the judge, `python -I -B -m kgit_harness judge`: isolated from the user's
site and environment variables, writing no bytecode, in its own process group (killed
whole on timeout), with an environment built from an allowlist so no credential
reaches code a model wrote. The judge starts the runner, where the candidate runs,
under the sandbox prefix chosen here (docs/harness.md). The result arrives from the
judge on a dedicated pipe the runner never holds, never from stdout.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from kgit.cleanup import remove_tree
from kgit import secrets as kgit_secrets
from kgit.evaluation import sandbox
from kgit.errors import ConfigError
from kgit_harness import result as result_mod
from kgit.problems import load_task

# The allowlist and the secret-name pattern live in kgit/secrets.py (re-exported here).
ENV_ALLOW, SECRET_PATTERN = kgit_secrets.ENV_ALLOW, kgit_secrets.SECRET_NAME


def child_env(scratch: Path, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW and not SECRET_PATTERN.search(k)}
    env.update({
        "HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
        "TRITON_CACHE_DIR": str(scratch / "triton-cache"), "TRITON_HOME": str(scratch),
        "MPLCONFIGDIR": str(scratch),
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
    candidate_dir.mkdir()
    for name in files:
        src = Path(source_root) / name
        if src.exists():
            dest = candidate_dir / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    return problem_dir, candidate_dir


def evaluate_tree(source_root: Path, config, *, state_dir: Path, devices_env: dict | None = None,
                  race: dict | None = None) -> dict:
    """Evaluate the kernel in a checked-out tree; return the result document.

    `race` is the incumbent to race against (harness/racing.py), from `kgit evolve` only.
    """
    task = load_task(Path(source_root) / config.problem)
    reference = Path(source_root) / config.problem / "reference.py"
    if not reference.is_file():
        # Evaluating anyway would commit the problem's breakage as the kernel's crash.
        raise ConfigError(f"{config.problem}/reference.py is missing from the tree being evaluated: a problem "
                          "folder needs task.yml and reference.py. Restore it with "
                          f"`git checkout kgit/baseline -- {config.problem}/reference.py` and commit.")
    state_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"eval-{os.getpid()}-", dir=state_dir))
    try:
        problem_dir, candidate_dir = stage_candidate(source_root, config.problem, task.files, scratch)
        # state_dir is <repo>/.git/kgit/scratch; the judge's build-facts cache sits beside it,
        # hidden from the runner with the repository (harness/factcache.py, docs/targets.md).
        return run_child(problem_dir, candidate_dir, config, scratch, devices_env, race=race,
                         targets_cache=state_dir.parent / "target-facts")
    finally:
        remove_tree(scratch)


def run_child(problem_dir: Path, candidate_dir: Path, config, scratch: Path, devices_env: dict | None = None,
              race: dict | None = None, targets_cache: Path | None = None) -> dict:
    isolation = sandbox.plan(config.evaluator.sandbox)
    sandbox.protect_parent()
    spec = {
        "problem_dir": str(problem_dir), "candidate_dir": str(candidate_dir),
        "timing": asdict(config.timing), "secret_seed": secrets.randbelow(2**31),
        "timeout_s": config.evaluator.timeout_s,
        # The runner's confinement and the command that wraps it: applied by the judge
        # to the runner only, so the judge keeps its view of the problem and the result fd.
        # The runner gets its inputs from the judge, so the problem folder is hidden from it.
        "sandbox": isolation.child_settings(scratch, config.evaluator.timeout_s, config.evaluator.max_memory_gb,
                                            scratch_gb=config.evaluator.scratch_gb,
                                            max_processes=config.evaluator.max_processes, hide_problem=True,
                                            trusted_init=isolation.namespaces),
        "runner_prefix": list(isolation.prefix), "runner_cwd": str(scratch),
        "targets": config.targets,  # None: the problem's declared build targets (docs/targets.md)
        "targets_cache": str(targets_cache) if targets_cache else None,  # the judge's only (harness/factcache.py)
        "race": race,
    }
    result_r, result_w = os.pipe()
    # The judge watches the read end; when kgit dies, however it dies, the kernel closes
    # our write end and the judge kills itself and everything it started.
    life_r, life_w = os.pipe()
    spec["lifeline_fd"] = life_r
    spec_path = scratch / "spec.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, "-I", "-B", "-m", "kgit_harness", "judge",
           "--spec", str(spec_path), "--result-fd", str(result_w)]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd, cwd=scratch, env=child_env(scratch, devices_env), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(result_w, life_r),
            start_new_session=True,
        )
    except BaseException:
        os.close(result_r)
        os.close(life_w)
        raise
    finally:
        os.close(result_w)
        os.close(life_r)
    limit = config.evaluator.max_output_bytes
    streams = {"result": OutputTail(64 << 20), "stdout": OutputTail(limit), "stderr": OutputTail(limit)}
    try:
        status = _wait(proc, {result_r: streams["result"], proc.stdout.fileno(): streams["stdout"],
                              proc.stderr.fileno(): streams["stderr"]}, config.evaluator.timeout_s)
    finally:
        os.close(life_w)
        proc.stdout.close()
        proc.stderr.close()
        sandbox.cgroups.remove(spec["sandbox"].get("pids_cgroup"))
    elapsed = round(time.monotonic() - started, 3)
    stdout, stderr = streams["stdout"].text(), streams["stderr"].text()
    payload = bytes(streams["result"].head + streams["result"].tail)
    doc = _result_doc(status, payload, proc.returncode, stderr, config.evaluator.timeout_s)
    confined = doc.pop("confine", None) or {}
    doc["eval_s"] = elapsed
    doc["stdout"], doc["stderr"] = stdout, stderr
    doc["sandbox"] = {"namespaces": isolation.namespaces, "applied": confined.get("applied", []),
                      "missing": isolation.missing + confined.get("missing", [])}
    return kgit_secrets.redact_result(doc)  # the excerpt and output reach commits and prompts


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
                # a process that exits slowly or to the candidate's leftovers. Drain briefly.
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
    if status == "done":
        try:
            proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            pass  # exits too slowly after its result; killed with its group below
    _kill_group(proc)
    return status


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
