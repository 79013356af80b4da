"""Run the harness on a candidate in a child process and collect its result.

The child is `python -I -B -m kgit.harness`: isolated from the user's site and
environment variables, writing no bytecode, in its own process group (killed whole
on timeout), with an environment built from an allowlist so no credential reaches
code a model wrote. The result arrives on a dedicated pipe, never from stdout.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from .harness import result as result_mod
from .harness.problem import load_task

# Variables the evaluated code may see. Nothing else crosses over: no API keys,
# tokens, cloud or git credentials, whatever their names.
ENV_ALLOW = {
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
    "ROCM_PATH", "HIP_PATH", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "TRITON_PTXAS_PATH", "TRITON_HIP_LLD_PATH", "VIRTUAL_ENV",
}
SECRET_PATTERN = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|SESSION|COOKIE", re.I)


def child_env(scratch: Path, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW and not SECRET_PATTERN.search(k)}
    env.update({
        "HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
        "TRITON_CACHE_DIR": str(scratch / "triton-cache"), "TRITON_HOME": str(scratch),
        "MPLCONFIGDIR": str(scratch),
    })
    env.update(extra or {})
    return {k: v for k, v in env.items() if not SECRET_PATTERN.search(k)}


def _read_truncated(path: Path, limit: int) -> str:
    data = path.read_bytes() if path.exists() else b""
    text = data[-limit:].decode("utf-8", errors="replace")
    return ("[... cut ...]\n" if len(data) > limit else "") + text


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


def evaluate_tree(source_root: Path, config, *, state_dir: Path, devices_env: dict | None = None) -> dict:
    """Evaluate the kernel in a checked-out tree; return the result document."""
    task = load_task(Path(source_root) / config.problem)
    state_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="eval-", dir=state_dir))
    try:
        problem_dir, candidate_dir = stage_candidate(source_root, config.problem, task.files, scratch)
        return run_child(problem_dir, candidate_dir, config, scratch, devices_env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_child(problem_dir: Path, candidate_dir: Path, config, scratch: Path, devices_env: dict | None = None) -> dict:
    spec = {
        "problem_dir": str(problem_dir), "candidate_dir": str(candidate_dir),
        "timing": asdict(config.timing), "secret_seed": secrets.randbelow(2**31),
    }
    spec_path = scratch / "spec.json"
    spec_path.write_text(json.dumps(spec))
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    cmd = [sys.executable, "-I", "-B", "-m", "kgit.harness", "--spec", str(spec_path), "--result-fd", str(write_fd)]
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=scratch, env=child_env(scratch, devices_env), stdin=subprocess.DEVNULL,
            stdout=out, stderr=err, pass_fds=(write_fd,), start_new_session=True,
        )
    os.close(write_fd)
    status, payload = _wait(proc, read_fd, config.evaluator.timeout_s)
    limit = config.evaluator.max_output_bytes
    stdout, stderr = _read_truncated(out_path, limit), _read_truncated(err_path, limit)
    elapsed = round(time.monotonic() - started, 3)
    if status == "timeout":
        doc = result_mod.new("timeout", error=f"no result within {config.evaluator.timeout_s:g} s; the process group was killed.\n" + stderr[-2000:])
    else:
        try:
            doc = result_mod.validate(json.loads(payload)) if payload else None
        except (ValueError, json.JSONDecodeError):
            doc = None
        if doc is None:
            code = proc.returncode
            why = f"killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
            doc = result_mod.new("crash", error=f"the harness process died without a result ({why}).\n" + stderr[-3000:])
    doc["eval_s"] = elapsed
    doc["stdout"], doc["stderr"] = stdout, stderr
    return doc


def _wait(proc, read_fd, timeout) -> tuple[str, bytes]:
    """Read the result pipe until EOF or timeout; kill the whole group on timeout."""
    import selectors

    chunks = []
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(read_fd, selectors.EVENT_READ)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                _kill_group(proc)
                return "timeout", b""
            if sel.select(timeout=min(left, 1.0)):
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
            elif proc.poll() is not None:
                # Died without ever writing; grandchildren may hold the pipe open.
                break
    finally:
        sel.close()
        os.close(read_fd)
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
    _kill_group(proc)  # nothing the candidate started may outlive its evaluation
    return "done", b"".join(chunks)


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
