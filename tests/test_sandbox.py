"""Each claim of docs/sandbox.md, tested with a kernel that tries.

The static policy check (harness/policy.py) rejects `os`, `socket` and `ctypes`
imports before any code runs, so a plain hostile kernel.py never reaches the runtime
defences. These tests stand in for a kernel that found a way around the static check:
they call `child.run_child` on a candidate folder whose kernel.py imports a helper
module, `hostile.py`, that the policy does not read (it reads only the problem's
editable files). Everything the helper does then meets the sandbox alone.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from conftest import fast_config_text
from hostile_kernels import HOSTILE, stage

from kgit import config as config_mod
from kgit.evaluation import child, sandbox
from kgit_harness import problem as problem_mod

NAMESPACES, WHY_NOT = sandbox.probe()
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason=f"this host allows no namespaces: {WHY_NOT}")


def _config(**evaluator):
    return config_mod.parse(fast_config_text(evaluator=evaluator))


def _processes_with(text: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(pid))
    return found


def _gone(text: str, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while _processes_with(text):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


PARENT = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from kgit import config
    from kgit.evaluation import child
    cfg = config.parse(Path(sys.argv[1]).read_text())
    doc = child.run_child(Path(sys.argv[2]), Path(sys.argv[3]), cfg, Path(sys.argv[4]))
    print(json.dumps(doc))
''')


def _evaluate_as_kgit(tmp_path, action, secrets: dict, **evaluator) -> dict:
    """Evaluate in a separate kgit process whose environment (from its very start, as
    /proc shows it) holds the secrets, the way a user runs kgit with API keys set."""
    problem_dir, candidate_dir, scratch = stage(tmp_path, action)
    cfg = tmp_path / "kgit.yaml"
    cfg.write_text(fast_config_text(evaluator=evaluator))
    env = {**os.environ, **secrets}
    proc = subprocess.run([sys.executable, "-c", PARENT, str(cfg), str(problem_dir), str(candidate_dir), str(scratch)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _probe_report(doc) -> dict:
    lines = [line for line in doc["stdout"].splitlines() if line.startswith("KGIT-PROBE ")]
    assert lines, f"the hostile kernel never reported: {doc['status']} {doc.get('error')}\n{doc['stderr'][-2000:]}"
    return json.loads(lines[-1][len("KGIT-PROBE "):])


@pytest.fixture(scope="module")
def snooped(tmp_path_factory):
    """One sandboxed evaluation of a kernel that tries every escape at once."""
    tmp_path = tmp_path_factory.mktemp("snoop")
    secret = f"sk-test-{random.getrandbits(64):x}"
    phrase = f"deploy-{random.getrandbits(64):x}"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    outside = tmp_path / "escaped.txt"
    marker = f"{random.randint(10**6, 10**7)}.{random.randint(1, 999)}"
    action = f"hostile.snoop({[secret, phrase]!r}, {port}, {str(outside)!r}, {marker!r})"
    # OPENAI_API_KEY matches the secret pattern; KGIT_TEST_PHRASE does not, and is
    # kept out only because it is not on the allowlist.
    doc = _evaluate_as_kgit(tmp_path, action, {"OPENAI_API_KEY": secret, "KGIT_TEST_PHRASE": phrase})
    try:
        listener.accept()
        accepted = True
    except BlockingIOError:
        accepted = False
    listener.close()
    yield {"doc": doc, "report": _probe_report(doc), "secrets": [secret, phrase], "outside": outside,
           "marker": marker, "accepted": accepted}
    for pid in _processes_with("sleep " + marker):
        os.kill(pid, signal.SIGKILL)


def test_the_probe_detects_leaks_when_nothing_stops_it(tmp_path):
    """Control: run outside any sandbox, the same probe finds the secret and escapes."""
    (tmp_path / "hostile.py").write_text(HOSTILE)
    outside = tmp_path / "escaped.txt"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        code = f"import hostile; hostile.snoop(['sk-control-123'], {port}, {str(outside)!r}, '', {str(tmp_path)!r})"
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "OPENAI_API_KEY": "sk-control-123"}, timeout=60)
    report = json.loads(proc.stdout.split("KGIT-PROBE ", 1)[1])
    assert report["connected"] is True
    assert report["env_has_secret"] is True
    assert report["proc_environ_with_secret"], "the probe must find its own environ"
    assert report["wrote_outside"] is True and outside.read_text() == "escaped"
    assert report["wrote_runtime"] is True


@pytest.mark.slow
def test_kernel_still_passes_while_snooping(snooped):
    assert snooped["doc"]["status"] == "ok", snooped["doc"].get("error")


def test_no_secret_in_the_environment(snooped):
    report = snooped["report"]
    assert report["env_has_secret"] is False
    assert not any(child.SECRET_PATTERN.search(k) for k in report["env_keys"])
    assert "KGIT_TEST_PHRASE" not in report["env_keys"] and "OPENAI_API_KEY" not in report["env_keys"]


def test_no_process_environ_shows_the_secret(snooped):
    """Neither kgit's /proc/<pid>/environ nor any other process's is readable with the key."""
    assert snooped["report"]["proc_environ_with_secret"] == []


@needs_namespaces
def test_network_is_cut(snooped):
    assert snooped["report"]["connected"] is not True
    assert snooped["accepted"] is False


@needs_namespaces
def test_only_the_scratch_folder_is_writable(snooped):
    report = snooped["report"]
    # tmp_path is in the view's /tmp, a private tmpfs: whatever the write did, the host has no file.
    assert not snooped["outside"].exists()
    assert report["wrote_runtime"] is not True and report["wrote_runtime"] in (
        "Read-only file system", "Permission denied"), report["wrote_runtime"]
    assert report["wrote_home"] is True  # HOME is the scratch folder


def test_limits_are_set_and_cannot_be_raised(snooped):
    report = snooped["report"]
    assert report["core"] == [0, 0]
    assert report["nofile"][1] <= 4096
    assert report["raised_nofile"] is not True


@needs_namespaces
def test_detached_process_does_not_outlive_the_evaluation(snooped):
    # The probe forked, setsid() out of kgit's process group and exec'd `sleep MARKER`.
    assert _gone("sleep " + snooped["marker"], within_s=5)


def test_result_says_what_was_applied(snooped):
    box = snooped["doc"]["sandbox"]
    assert box["namespaces"] is NAMESPACES
    assert "read-only filesystem except the scratch folder, /tmp and /dev/shm" in box["applied"] or not NAMESPACES
    if NAMESPACES:
        assert box["missing"] == []
    else:
        assert any("namespace" in m for m in box["missing"])


@pytest.mark.slow
def test_process_group_kill_without_namespaces(tmp_path):
    """sandbox: off keeps the process-group kill: a forked child in the group dies too."""
    marker = f"{random.randint(10**6, 10**7)}.{random.randint(1, 999)}"
    problem_dir, candidate_dir, scratch = stage(tmp_path, f"hostile.escape({marker!r}, detach=False)")
    doc = child.run_child(problem_dir, candidate_dir, _config(sandbox="off"), scratch)
    try:
        assert doc["status"] == "ok", doc.get("error")
        assert any("switched off" in m for m in doc["sandbox"]["missing"])
        assert _gone("sleep " + marker, within_s=5)
    finally:
        for pid in _processes_with("sleep " + marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_segfault_is_a_crash_with_the_stack(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.segfault()")
    doc = child.run_child(problem_dir, candidate_dir, _config(), scratch)
    assert doc["status"] == "crash"
    assert "SIGSEGV" in doc["error"]
    assert "hostile.py" in doc["error"] and "segfault" in doc["error"]  # faulthandler's Python stack


@pytest.mark.slow
def test_infinite_loop_times_out_and_leaves_nothing(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.spin()")
    doc = child.run_child(problem_dir, candidate_dir, _config(timeout_s=10), scratch)
    assert doc["status"] == "timeout"
    assert "10 s" in doc["error"]
    assert _gone(str(scratch), within_s=5)


@pytest.mark.slow
def test_huge_allocation_is_a_runtime_error(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.hog(64)")
    doc = child.run_child(problem_dir, candidate_dir, _config(max_memory_gb=2), scratch)
    assert doc["status"] == "runtime-error", doc.get("error")
    assert "memory" in doc["error"].lower()
    assert any("data=2147483648" in a for a in doc["sandbox"]["applied"])


@pytest.mark.slow
def test_enormous_output_is_cut_not_stored(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.shout(64)")
    doc = child.run_child(problem_dir, candidate_dir, _config(max_output_bytes=4000), scratch)
    assert doc["status"] == "ok", doc.get("error")
    assert len(doc["stdout"]) < 4200
    cut = int(doc["stdout"].split("[... ")[1].split(" bytes cut")[0])
    assert cut > 60 << 20
    assert not (scratch / "stdout.txt").exists()


def test_killing_kgit_kills_the_evaluation(tmp_path):
    """kill -9 of the kgit process: the lifeline pipe closes and the child dies with it."""
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.spin()")
    cfg = tmp_path / "kgit.yaml"
    cfg.write_text(fast_config_text(evaluator={"timeout_s": 300}))
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(cfg), str(problem_dir), str(candidate_dir), str(scratch)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not any(p != parent.pid for p in _processes_with(str(scratch / "spec.json"))):
            assert time.monotonic() < deadline, "the harness never started"
            time.sleep(0.2)
        time.sleep(1.0)  # let it reach the kernel's loop
    finally:
        parent.kill()
        parent.wait()
    assert _gone(str(scratch / "spec.json"), within_s=10)


def _refuse_namespaces(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: (False, "the OS refused new namespaces (test)"))
    monkeypatch.setattr(sandbox, "probe_root", lambda: (False, "the OS refused new namespaces (test)"))


def test_strict_mode_refuses_without_namespaces(monkeypatch):
    _refuse_namespaces(monkeypatch)
    with pytest.raises(sandbox.SandboxUnavailable, match="evaluator.sandbox: auto"):
        sandbox.plan("strict")
    iso = sandbox.plan("auto")
    assert iso.prefix == [] and iso.namespaces is False
    assert "network cut" in iso.missing[0] and "(test)" in iso.missing[0]


def test_output_tail_keeps_head_and_tail():
    tail = child.OutputTail(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        tail.add(chunk)
    text = tail.text()
    assert text.startswith("abcde") and text.endswith("vwxyz")
    assert "[... 16 bytes cut ...]" in text
    small = child.OutputTail(100)
    small.add(b"hello")
    assert small.text() == "hello"


# -- on the GPU (run on the device machine: pytest -m gpu tests/test_sandbox.py) --------------
GPU_FAULTS = {
    "illegal-address": '''
import triton
import triton.language as tl


@triton.jit
def _bad(a_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # Far outside any allocation: an illegal memory access on the device.
    tl.store(out_ptr + offsets + (1 << 40), tl.load(a_ptr + offsets))


def custom_kernel(data):
    a, b, out = data
    _bad[(triton.cdiv(a.numel(), 1024),)](a, out, a.numel(), BLOCK=1024)
    return out
''',
    "spin": '''
import torch
import triton
import triton.language as tl


@triton.jit
def _spin(flag_ptr):
    while tl.load(flag_ptr, volatile=True) == 0:
        pass


def custom_kernel(data):
    a, b, out = data
    _spin[(1,)](torch.zeros(1, dtype=torch.int32, device=a.device))
    return out
''',
    "huge": '''
import torch


def custom_kernel(data):
    a, b, out = data
    hoard = torch.empty(1 << 45, dtype=torch.uint8, device=a.device)  # 32 TiB
    return out
''',
}


def _run_source(tmp_path: Path, source: str, config) -> dict:
    problem_dir, candidate_dir, scratch = stage(tmp_path, "pass")
    (candidate_dir / "kernel.py").write_text(source)
    (candidate_dir / "hostile.py").unlink()
    return child.run_child(problem_dir, candidate_dir, config, scratch)


@pytest.mark.gpu
def test_gpu_evaluation_works_inside_the_sandbox(tmp_path):
    source = (problem_mod.shipped()["vector_add"] / "kernel.py").read_text()
    doc = _run_source(tmp_path, source, _config())
    assert doc["status"] == "ok", doc.get("error")
    assert doc["timing"] == "events" and doc["device"] != "cpu"
    assert doc["sandbox"]["namespaces"] is NAMESPACES
    if NAMESPACES:
        from kgit.evaluation import cgroups

        # Not applied on GPU hosts: a private /dev/shm (CUDA IPC with the judge fails under
        # it); as root, by default, the unprivileged user (the next test applies it); the
        # cgroups where this host gives kgit no hierarchy to write (said so, not hidden).
        memory = cgroups.hierarchy("memory") is not None
        allowed = ["private /dev/shm", "unprivileged runner user"] + ([] if memory else ["memory cgroup"]) + (
            [] if cgroups.hierarchy("pids") else ["process-count limit"])
        assert all(any(m.startswith(a) for a in allowed) for m in doc["sandbox"]["missing"]), doc["sandbox"]
        applied = doc["sandbox"]["applied"]
        for step in ("trusted init as PID 1", "private IPC namespace", "scratch is a tmpfs", "allowlisted filesystem",
                     "read-only libraries", "no capabilities") + (("memory cgroup",) if memory else ()):
            assert any(a.startswith(step) for a in applied), (step, applied)
    # No data limit where a GPU driver is present unless asked for (the memory cgroup holds).
    assert not any("data=" in a for a in doc["sandbox"]["applied"])


@pytest.mark.gpu
@pytest.mark.skipif(os.geteuid() != 0, reason="the unprivileged runner is for kgit running as root")
@needs_namespaces
def test_gpu_unprivileged_runner_is_refused_beside_the_nvidia_driver_and_works_elsewhere(tmp_path):
    """`evaluator.runner_user: unprivileged` on a GPU host. On the H200 the runner, another user,
    could not map the judge's (root's) inputs: CUDA IPC failed with cudaErrorMapBufferObjectFailed
    and the evaluation crashed. So beside the NVIDIA driver kgit refuses the setting before it
    evaluates, with the fix; on a ROCm host the unprivileged runner must evaluate."""
    source = (problem_mod.shipped()["vector_add"] / "kernel.py").read_text()
    if os.path.exists(sandbox.NVIDIA_CONTROL_NODE):
        with pytest.raises(sandbox.SandboxUnavailable, match="evaluator.runner_user: auto"):
            _run_source(tmp_path, source, _config(runner_user="unprivileged"))
        return
    doc = _run_source(tmp_path, source, _config(runner_user="unprivileged"))
    assert doc["status"] == "ok", (doc.get("error"), doc["stderr"][-3000:])
    assert doc["timing"] == "events" and doc["device"] != "cpu"
    applied = doc["sandbox"]["applied"]
    assert any(a.startswith("runs as uid ") for a in applied), doc["sandbox"]
    assert any(a.startswith("allowlisted filesystem") for a in applied), doc["sandbox"]
    assert not any(m.startswith(("allowlisted filesystem", "unprivileged runner user"))
                   for m in doc["sandbox"]["missing"]), doc["sandbox"]


def test_runner_user_unprivileged_is_refused_beside_the_nvidia_driver(tmp_path, monkeypatch):
    node = tmp_path / "nvidiactl"
    node.touch()
    monkeypatch.setattr(sandbox, "NVIDIA_CONTROL_NODE", str(node))
    monkeypatch.setattr(sandbox, "gpu_driver_present", lambda: True)
    with pytest.raises(sandbox.SandboxUnavailable, match="cudaErrorMapBufferObjectFailed.*runner_user: auto"):
        sandbox._unprivileged_runner("unprivileged")
    drop, why = sandbox._unprivileged_runner("auto")
    assert drop is False and "NVIDIA driver refuses CUDA IPC" in why
    node.unlink()
    monkeypatch.setattr(sandbox, "gpu_driver_present", lambda: False)
    monkeypatch.setattr(sandbox, "probe_root", lambda: (True, ""))
    assert sandbox._unprivileged_runner("unprivileged") == (True, "")


@pytest.mark.gpu
@pytest.mark.parametrize("fault, statuses, words", [
    ("illegal-address", {"runtime-error", "crash"}, ("illegal", "memory")),
    ("spin", {"timeout"}, ("30 s",)),
    ("huge", {"runtime-error"}, ("out of memory",)),
])
def test_gpu_faults_become_statuses(tmp_path, fault, statuses, words):
    problem_dir, candidate_dir, scratch = stage(tmp_path / "bad", "pass")
    (candidate_dir / "kernel.py").write_text(GPU_FAULTS[fault])
    (candidate_dir / "hostile.py").unlink()
    doc = child.run_child(problem_dir, candidate_dir, _config(timeout_s=30), scratch)
    assert doc["status"] in statuses, (doc["status"], doc.get("error"))
    assert all(w.lower() in doc["error"].lower() for w in words), doc["error"][-2000:]
    assert _gone(str(scratch), within_s=10)
    # The device is usable again right after.
    source = (problem_mod.shipped()["vector_add"] / "kernel.py").read_text()
    after = _run_source(tmp_path / "good", source, _config())
    assert after["status"] == "ok", after.get("error")


@pytest.mark.slow
def test_the_spec_with_the_secret_seed_is_gone_before_the_candidate_runs(tmp_path):
    # The kernel runs in the folder the spec was written to; by then the file must be gone.
    # (Asked through the helper module, which the static policy does not read.)
    action = 'print("KGIT-SPEC", hostile.spec_exists())'
    problem_dir, candidate_dir, scratch = stage(tmp_path, action)
    doc = child.run_child(problem_dir, candidate_dir, _config(), scratch)
    lines = [line for line in doc["stdout"].splitlines() if line.startswith("KGIT-SPEC ")]
    assert lines, (doc["status"], doc.get("error"), doc["stderr"][-1500:])
    assert lines[0].startswith("KGIT-SPEC False"), lines[0]


# -- the sandbox layer on its own: a script under the same command and confine.apply ---------
CONFINED = textwrap.dedent('''
    import json, sys
    from kgit_harness import confine
    spec = json.loads(sys.argv[1])
    report = confine.apply(spec)
    print("KGIT-CONFINE " + json.dumps(report), flush=True)
    exec(compile(sys.argv[2], "<test>", "exec"))
''')


def _run_confined(scratch: Path, code: str, mode: str = "auto", problem: bool = False, memory_gb=None,
                  python: str = sys.executable, **settings):
    """Run `code` the way the harness runs a candidate: through `Isolation.command` (with
    the trusted init) and `confine.apply`, under `python`. Returns (confine report, completed
    process)."""
    isolation = sandbox.plan(mode)
    candidate_dir = scratch / "candidate"
    candidate_dir.mkdir(parents=True, exist_ok=True)
    (candidate_dir / "kernel.py").write_text("# the candidate\n")
    spec = {"candidate_dir": str(candidate_dir),
            "sandbox": isolation.child_settings(scratch, 60, memory_gb, **settings)}
    if problem:
        (scratch / "problem").mkdir(exist_ok=True)
        (scratch / "problem" / "task.yml").write_text("name: test\n")
        spec["problem_dir"] = str(scratch / "problem")
    life_r, life_w = os.pipe()
    spec["lifeline_fd"] = life_r
    cmd = isolation.command([python, "-I", "-B", "-c", CONFINED, json.dumps(spec), code], lifeline_fd=life_r)
    try:
        proc = subprocess.run(cmd, cwd=scratch, env=child.child_env(scratch), pass_fds=(life_r,),
                              capture_output=True, text=True, timeout=120)
    finally:
        os.close(life_r)
        os.close(life_w)
        for folder in set((spec["sandbox"].get("cgroups") or {}).values()):
            sandbox.cgroups.remove(folder)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("KGIT-CONFINE ")]
    assert lines, proc.stderr[-3000:]
    return json.loads(lines[0][len("KGIT-CONFINE "):]), proc


@needs_namespaces
def test_an_interpreter_under_tmp_is_in_the_view_beside_its_fresh_tmp(tmp_path):
    # A repository cloned under /tmp holds its virtual environment there: the view's fresh
    # /tmp hid it, and the runner could not import torch (`bash scripts/demo.sh` from a clone
    # in /tmp). The fresh /tmp is mounted first; what the view takes from under it goes inside.
    import site
    import venv

    env = Path(tempfile.mkdtemp(dir="/tmp", prefix="kgit-view-venv-"))
    env.chmod(0o755)  # as a clone's folder is: an unprivileged runner reads it
    try:
        venv.EnvBuilder(with_pip=False).create(env)
        here = [p for p in site.getsitepackages() if os.path.isdir(p)]
        packages = next(env.glob("lib/python*/site-packages"))
        # This interpreter's packages (kgit's editable install, torch) through the new one.
        (packages / "kgit_test_paths.pth").write_text(
            "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in here) + "\n")
        (env / "marker.txt").write_text("the environment's own file")
        code = ("import sys, os, json\n"
                "print('KGIT-VIEW ' + json.dumps({'prefix': sys.prefix, 'marker': os.path.exists("
                + repr(str(env / "marker.txt")) + "), 'tmp_writable': os.access('/tmp', os.W_OK), "
                "'tmp_entries': sorted(os.listdir('/tmp'))}), flush=True)")
        report, proc = _run_confined(tmp_path, code, python=str(env / "bin" / "python"))
        seen = _said(proc, "KGIT-VIEW")
        assert seen["prefix"] == str(env) and seen["marker"] is True, (seen, report)
        assert seen["tmp_writable"] is True  # still the view's own /tmp ...
        # ... holding nothing of the host's /tmp but what the view takes from under it: the
        # environment, the scratch (tmp_path) and this checkout with its own environment, when
        # they are there (a clean clone under /tmp)
        taken = {env.name, _top_under_tmp(tmp_path), _top_under_tmp(Path(__file__).resolve().parents[1])}
        assert set(seen["tmp_entries"]) <= taken, seen
    finally:
        shutil.rmtree(env, ignore_errors=True)


def _top_under_tmp(path: Path) -> str | None:
    """The entry of the host's /tmp that `path` lies under, or None."""
    return path.parts[2] if path.parts[:2] == ("/", "tmp") and len(path.parts) > 2 else None


def _said(proc, tag: str):
    lines = [line for line in proc.stdout.splitlines() if line.startswith(tag + " ")]
    assert lines, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    return json.loads(lines[-1][len(tag) + 1:])


SYSV = textwrap.dedent('''
    import ctypes, json, os
    libc = ctypes.CDLL(None, use_errno=True)
    IPC_CREAT = 0o1000
    def probe(key, name, create):
        flags = IPC_CREAT | 0o600 if create else 0
        shm = libc.shmget(key, 4096, flags)
        msg = libc.msgget(key, flags)
        path = "/dev/shm/" + name
        if create:
            open(path, "w").write("left behind")
        return {"shm": shm, "msg": msg, "posix": os.path.exists(path)}
''')


def _ipc_gone(key: int, name: str) -> bool:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.shmget(key, 0, 0) == -1 and libc.msgget(key, 0) == -1 and not os.path.exists("/dev/shm/" + name)


def _ipc_remove(key: int, name: str):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    shm, msg = libc.shmget(key, 0, 0), libc.msgget(key, 0)
    if shm >= 0:
        libc.shmctl(shm, 0, None)  # IPC_RMID
    if msg >= 0:
        libc.msgctl(msg, 0, None)
    if os.path.exists("/dev/shm/" + name):
        os.unlink("/dev/shm/" + name)


def _ipc_twice(tmp_path, mode):
    key, name = random.randint(1 << 20, 1 << 30), f"kgit-test-{random.getrandbits(40):x}"
    first = SYSV + f"print('KGIT-IPC ' + json.dumps(probe({key}, {name!r}, True)))"
    second = SYSV + f"print('KGIT-IPC ' + json.dumps(probe({key}, {name!r}, False)))"
    _, one = _run_confined(tmp_path / "one", first, mode)
    _, two = _run_confined(tmp_path / "two", second, mode)
    return key, name, _said(one, "KGIT-IPC"), _said(two, "KGIT-IPC")


@needs_namespaces
def test_ipc_objects_do_not_outlive_an_evaluation(tmp_path):
    key, name, made, later = _ipc_twice(tmp_path, "auto")
    try:
        assert made["shm"] >= 0 and made["msg"] >= 0 and made["posix"], made
        # The next evaluation (and kgit's own host) sees none of them.
        assert later == {"shm": -1, "msg": -1, "posix": False}, later
        assert _ipc_gone(key, name)
    finally:
        _ipc_remove(key, name)


def test_ipc_objects_persist_without_the_sandbox(tmp_path):
    """Control: with sandbox: off the same two runs share the segment, the queue and the file."""
    key, name, made, later = _ipc_twice(tmp_path, "off")
    try:
        assert made["shm"] >= 0 and later["shm"] >= 0 and later["msg"] >= 0 and later["posix"] is True
    finally:
        _ipc_remove(key, name)


FORK_BOMB = textwrap.dedent('''
    import json, os, resource, time
    raised = None
    for line in open("/proc/self/cgroup"):
        _, names, path = line.strip().split(":", 2)
        folder = "/sys/fs/cgroup/pids" + path if "pids" in names.split(",") else None
        if folder and path != "/":
            try:
                open(folder + "/pids.max", "w").write("max")
                raised = True
            except OSError as e:
                raised = e.strerror
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        raised = True
    except (OSError, ValueError):
        pass
    started, error = 0, None
    while started < 1000:
        try:
            pid = os.fork()
        except OSError as e:
            error = e.strerror
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        started += 1
    print("KGIT-FORKS " + json.dumps({"started": started, "error": error, "raised_limit": raised}), flush=True)
''')


@needs_namespaces
def test_fork_bomb_stops_at_the_process_limit(tmp_path):
    report, proc = _run_confined(tmp_path, FORK_BOMB, max_processes=40)
    forks = _said(proc, "KGIT-FORKS")
    # Root is exempt from RLIMIT_NPROC: there the limit is a pids cgroup.
    assert any("nproc=40" in a or "pids.max=40" in a for a in report["applied"]), report
    assert forks["started"] < 40 and forks["error"] == "Resource temporarily unavailable", forks
    assert forks["raised_limit"] is not True, forks
    # The sleepers were in the namespace: they ended with it.
    assert _gone("time.sleep(60)", within_s=10)


def test_without_namespaces_the_process_limit_is_reported_missing(monkeypatch, tmp_path):
    _refuse_namespaces(monkeypatch)
    iso = sandbox.plan("auto")
    settings = iso.child_settings(tmp_path, 60, None, max_processes=40)
    assert settings["nproc"] is None and settings["scratch_bytes"] is None and settings["view"] is None
    assert settings["cgroups"] == {} and settings["run_as"] is None
    for words in ("process-count limit", "trusted init", "size-capped scratch", "memory cgroup",
                  "allowlisted and read-only filesystem", "unprivileged user"):
        assert words in iso.missing[0], iso.missing
    assert iso.command(["python", "x"], lifeline_fd=5) == ["python", "x"]


DISK_FILL = textwrap.dedent('''
    import json, os
    written, error = 0, None
    chunk = b"x" * (1 << 20)
    try:
        with open("fill.bin", "wb") as f:
            while written < (64 << 20):
                f.write(chunk)
                f.flush()
                written += len(chunk)
    except OSError as e:
        error = e.strerror
    print("KGIT-FILL " + json.dumps({"written": written, "error": error, "cwd": os.getcwd()}), flush=True)
''')


@needs_namespaces
def test_disk_fill_stops_at_the_scratch_size(tmp_path):
    scratch = tmp_path / "scratch"
    report, proc = _run_confined(scratch, DISK_FILL, scratch_gb=8 / 1024)
    fill = _said(proc, "KGIT-FILL")
    assert f"scratch is a tmpfs of {8 << 20} bytes" in report["applied"], report
    assert fill["written"] <= 8 << 20 and fill["error"] == "No space left on device", fill
    assert fill["cwd"] == str(scratch.resolve())
    assert not (scratch / "fill.bin").exists()  # it lived in the tmpfs only


HIDDEN = textwrap.dedent('''
    import json, os, sys
    paths = json.loads(sys.argv[3])
    seen = {name: os.path.exists(path) for name, path in paths.items()}
    try:
        seen["sibling_env_read"] = open(paths["sibling_env"]).read()
    except OSError as e:
        seen["sibling_env_read"] = e.strerror
    try:
        open(os.path.join(paths["candidate"], "new.py"), "w").write("x")
        seen["candidate_writable"] = True
    except OSError as e:
        seen["candidate_writable"] = e.strerror
    seen["fds"] = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            seen["fds"].append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # the descriptor listdir itself used
    print("KGIT-HIDDEN " + json.dumps(seen), flush=True)
''')


def _hidden_setup(tmp_path, monkeypatch):
    home, repo, sibling = tmp_path / "home", tmp_path / "repo", tmp_path / "other-repo"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("a key")
    monkeypatch.setenv("HOME", str(home))
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    (repo / "kernel.py").write_text("# the kernel being optimised\n")
    # Another project of the same user beside it, with its credentials in a .env file.
    (sibling / ".git").mkdir(parents=True)
    (sibling / ".git" / "config").write_text("[core]\n")
    (sibling / ".env").write_text("DEPLOY_PASSWORD=correct-horse-battery-staple\n")
    scratch = repo / ".git" / "kgit" / "scratch" / "eval-1"
    paths = {"home_key": str(home / ".ssh" / "id_ed25519"), "repo_config": str(repo / ".git" / "config"),
             "repo_kernel": str(repo / "kernel.py"), "candidate": str(scratch / "candidate"),
             "candidate_kernel": str(scratch / "candidate" / "kernel.py"),
             "problem_task": str(scratch / "problem" / "task.yml"),
             "sibling_env": str(sibling / ".env"), "sibling_config": str(sibling / ".git" / "config")}
    return scratch, paths


def _run_hidden(scratch, paths, mode="auto", **settings):
    code = HIDDEN.replace("sys.argv[3]", repr(json.dumps(paths)))
    report, proc = _run_confined(scratch, code, mode, problem=True, **settings)
    return report, _said(proc, "KGIT-HIDDEN")


@needs_namespaces
def test_home_and_the_repository_are_not_in_the_view(tmp_path, monkeypatch):
    scratch, paths = _hidden_setup(tmp_path, monkeypatch)
    report, seen = _run_hidden(scratch, paths)
    assert seen["home_key"] is False and seen["repo_config"] is False and seen["repo_kernel"] is False, seen
    assert seen["candidate_kernel"] is True and seen["problem_task"] is True
    assert seen["candidate_writable"] == "Read-only file system"
    # The descriptors used to mount folders into the view are closed: no way back to the host's.
    assert not [fd for fd in seen["fds"] if fd.startswith(str(tmp_path))], seen["fds"]
    assert any(a.startswith("allowlisted filesystem") for a in report["applied"]), report
    assert not any("is in the view" in m for m in report["missing"]), report


@needs_namespaces
def test_a_sibling_repository_and_its_secrets_are_not_readable(tmp_path, monkeypatch):
    # A list of hidden folders (HOME, the repository) left the rest of the disk readable;
    # the view holds what is allowlisted, so another project's .env is simply not there.
    scratch, paths = _hidden_setup(tmp_path, monkeypatch)
    _, seen = _run_hidden(scratch, paths)
    assert seen["sibling_env_read"] == "No such file or directory", seen
    assert seen["sibling_env"] is False and seen["sibling_config"] is False, seen


@needs_namespaces
def test_the_problem_folder_is_hidden_when_asked(tmp_path, monkeypatch):
    scratch, paths = _hidden_setup(tmp_path, monkeypatch)
    _, seen = _run_hidden(scratch, paths, hide_problem=True)
    assert seen["problem_task"] is False and seen["candidate_kernel"] is True, seen


def test_without_namespaces_home_and_the_repository_stay_visible(tmp_path, monkeypatch):
    '''Control, and what `off` (or refused namespaces) leaves: everything readable, said so.'''
    scratch, paths = _hidden_setup(tmp_path, monkeypatch)
    report, seen = _run_hidden(scratch, paths, mode="off")
    assert seen["home_key"] is True and seen["repo_config"] is True
    assert seen["sibling_env_read"].startswith("DEPLOY_PASSWORD=")
    assert not any(a.startswith("allowlisted") for a in report["applied"])
    assert sandbox.plan("off").missing == ["sandbox switched off (evaluator.sandbox: off)"]


OWNER = textwrap.dedent('''
    import json, os, sys
    path = sys.argv[3]
    out = {"euid": os.geteuid(), "uid_map": open("/proc/self/uid_map").read().split()}
    out["owner"] = os.stat(path).st_uid == os.geteuid()
    try:
        out["read"] = open(path).read()
    except OSError as e:
        out["read"] = e.strerror
    print("KGIT-OWNER " + json.dumps(out), flush=True)
''')


@needs_namespaces
@pytest.mark.skipif(os.geteuid() != 0, reason="about kgit running as root (CI, containers); as an ordinary user "
                                               "the runner is that user, who owns no file of root's")
def test_the_runner_owns_none_of_roots_files(tmp_path, monkeypatch):
    # With `--map-root-user` the runner was root of its namespace mapped onto root: the owner
    # of every file of root's in its view. Now it is a user of its own.
    monkeypatch.setattr(sandbox, "gpu_driver_present", lambda: False)  # `auto` gives GPU hosts the old mapping
    private = tmp_path / "candidate" / "root-only.txt"
    private.parent.mkdir(parents=True)
    private.write_text("root's alone")
    private.chmod(0o600)
    report, proc = _run_confined(tmp_path, OWNER.replace("sys.argv[3]", repr(str(private))))
    seen = _said(proc, "KGIT-OWNER")
    assert seen["read"] == "Permission denied" and seen["owner"] is False, seen
    assert seen["euid"] in sandbox.RUNNER_IDS, seen
    assert seen["uid_map"] == ["0", "0", "4294967295"], seen  # no user namespace: the host's own uid
    assert any(a.startswith(f"runs as uid {seen['euid']}") for a in report["applied"]), report


def _memory_hog(how: str, mib: int) -> str:
    return textwrap.dedent(f'''
        import mmap, os
        chunk, held = b"x" * (16 << 20), 0
        if {how!r} == "memfd":
            fd = os.memfd_create("hog")
        else:
            area = mmap.mmap(-1, {mib} << 20, flags=mmap.MAP_SHARED)
        while held < ({mib} << 20):
            if {how!r} == "memfd":
                os.write(fd, chunk)
            else:
                area[held:held + len(chunk)] = chunk
            held += len(chunk)
            print("KGIT-HELD", held, flush=True)
        print("KGIT-HOG done", flush=True)
    ''')


@needs_namespaces
@pytest.mark.parametrize("how", ["memfd", "shared mapping"])
def test_memory_past_the_limit_through_memfd_or_a_shared_mapping_is_stopped(tmp_path, how):
    # RLIMIT_DATA (the only limit before) counts neither: both ran to 512 MiB under a 256 MiB limit.
    report, proc = _run_confined(tmp_path, _memory_hog(how, 512), memory_gb=0.25)
    held = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("KGIT-HELD ")]
    assert "KGIT-HOG done" not in proc.stdout and max(held, default=0) <= 256 << 20, (held, proc.stderr[-2000:])
    assert proc.returncode == 128 + signal.SIGKILL  # the kernel's out-of-memory kill, passed on by the init
    assert any(a.startswith(f"memory cgroup (limit={256 << 20} bytes") for a in report["applied"]), report


@needs_namespaces
@pytest.mark.slow
def test_an_evaluation_past_its_memory_limit_says_so(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.memfd_hog(3072)")
    doc = child.run_child(problem_dir, candidate_dir, _config(max_memory_gb=1), scratch)
    assert doc["status"] != "ok"
    assert "went past its host memory limit (1 GiB" in doc["error"], doc["error"][-2000:]


@needs_namespaces
def test_fork_bomb_stops_where_no_pids_cgroup_can_be_made(tmp_path, monkeypatch):
    # As root without a pids cgroup the runner had no process limit at all (root is exempt
    # from RLIMIT_NPROC); an unprivileged runner is held by RLIMIT_NPROC.
    from kgit.evaluation import cgroups

    found = cgroups.hierarchy if hasattr(cgroups, "hierarchy") else None
    monkeypatch.setattr(cgroups, "pids_hierarchy", lambda: None)
    monkeypatch.setattr(cgroups, "hierarchy", lambda controller: None if controller == "pids" else found(controller),
                        raising=False)
    monkeypatch.setattr(sandbox, "gpu_driver_present", lambda: False)  # `auto`: unprivileged where kgit is root
    report, proc = _run_confined(tmp_path, FORK_BOMB, max_processes=40)
    forks = _said(proc, "KGIT-FORKS")
    assert forks["started"] < 40 and forks["error"] == "Resource temporarily unavailable", forks
    assert forks["raised_limit"] is not True, forks
    assert not any(a.startswith("pids cgroup") for a in report["applied"]), report
    assert any("nproc=40" in a for a in report["applied"]), report
    assert _gone("time.sleep(60)", within_s=10)


INIT_ATTACK = textwrap.dedent('''
    import json, os, signal, sys
    out = {"pid": os.getpid(), "ppid": os.getppid()}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
        try:
            os.kill(1, sig)
            out[sig.name] = "sent"
        except OSError as e:
            out[sig.name] = e.strerror
    for name in ("mem", "environ"):
        try:
            open(f"/proc/1/{name}", "rb").read(16)
            out[name] = "read"
        except OSError as e:
            out[name] = e.strerror
    try:
        # The init's working directory is the scratch as it was before the tmpfs covered it.
        out["cwd"] = os.listdir("/proc/1/cwd")
    except OSError as e:
        out["cwd"] = e.strerror
    print("KGIT-INIT " + json.dumps(out), flush=True)
    sys.exit(3)
''')


@needs_namespaces
def test_the_trusted_init_withstands_the_candidate(tmp_path):
    report, proc = _run_confined(tmp_path, INIT_ATTACK)
    seen = _said(proc, "KGIT-INIT")
    assert any(a.startswith("trusted init as PID 1") for a in report["applied"]), report
    assert seen["pid"] == 2 and seen["ppid"] == 1
    # Signals from inside never reach it (the script carried on), and its memory is closed.
    assert seen["mem"] != "read" and seen["environ"] != "read" and not isinstance(seen["cwd"], list), seen
    assert proc.returncode == 3  # the harness's exit status, passed on by the init and unshare


def _lifeline_attack(tmp_path, sandbox_mode):
    marker = f"{random.randint(10**6, 10**7)}.{random.randint(1, 999)}"
    problem_dir, candidate_dir, scratch = stage(tmp_path, f"hostile.defeat_lifeline({marker!r})")
    cfg = tmp_path / "kgit.yaml"
    cfg.write_text(fast_config_text(evaluator={"timeout_s": 300, "sandbox": sandbox_mode}))
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(cfg), str(problem_dir), str(candidate_dir), str(scratch)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not _processes_with("sleep " + marker):
            assert time.monotonic() < deadline, "the hostile kernel never started its daemon"
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        parent.kill()
        parent.wait()
    return marker, scratch


@needs_namespaces
@pytest.mark.slow
def test_killing_kgit_ends_a_kernel_that_defeats_the_lifeline(tmp_path):
    marker, scratch = _lifeline_attack(tmp_path, "auto")
    assert _gone("sleep " + marker, within_s=10)
    assert _gone(str(scratch / "spec.json"), within_s=10)


@pytest.mark.slow
def test_without_namespaces_a_defeated_lifeline_survives(tmp_path):
    """Control: the same kernel under sandbox: off outlives kgit (what docs/sandbox.md says)."""
    marker, scratch = _lifeline_attack(tmp_path, "off")
    try:
        time.sleep(3)
        assert _processes_with("sleep " + marker), "the daemon died although nothing should have killed it"
    finally:
        for text in ("sleep " + marker, str(scratch / "spec.json")):
            for pid in _processes_with(text):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_key_shaped_text_is_redacted_from_the_error(tmp_path, monkeypatch):
    secret = f"sk-test-{random.getrandbits(64):x}"
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    problem_dir, candidate_dir, scratch = stage(tmp_path, f"hostile.leak_key({secret!r})")
    doc = child.run_child(problem_dir, candidate_dir, _config(), scratch)
    assert doc["status"] == "runtime-error", (doc["status"], doc.get("error"))
    assert "could not log in with [redacted]" in doc["error"]
    text = doc["error"] + doc["stdout"] + doc["stderr"]
    for leaked in (secret, "ghp_a1B2", "MIIEowIBAAKCAQEA", "BEGIN RSA PRIVATE KEY"):
        assert leaked not in text


COMMIT_SECRETS = {
    "a .env line": ("DEPLOY_PASSWORD=correct-horse-battery-staple", "correct-horse-battery-staple"),
    "a JSON web token": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJrZ2l0LXRlc3QifQ.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg",
                         "c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"),
    "a password in a URL": ("postgres://admin:s3cr3tPassw0rd@db.internal/prod", "s3cr3tPassw0rd"),
    "a generated key": ("Zq8vR2mK9xLp4Tn7Wb3Yc6Hd1Fg5Js0Qa", "Zq8vR2mK9xLp4Tn7Wb3Yc6Hd1Fg5Js0Qa"),
}


def test_secret_shaped_text_is_kept_out_of_the_commit(tmp_path, monkeypatch):
    """A candidate that read another project's .env printed it in its error: the commit
    body, its Kgit-Cause and the notes beside it keep none of it, whatever wrote the text."""
    from conftest import git, init_with_one_attempt

    from kgit.archive.refs import NOTES_REF
    from kgit.archive.repo import Repo
    from kgit_harness import result as result_mod

    leaked = " ".join(text for text, _ in COMMIT_SECRETS.values())
    error = ("Traceback (most recent call last):\n  File \"kernel.py\", line 3, in custom_kernel\n"
             f"RuntimeError: could not parse ../other-repo/.env: {leaked}")
    baseline = result_mod.new("ok", device="cpu", timing="wall", geomean_us=10.0,
                              shapes=[{"key": "n=1", "mean_us": 10.0}], eval_s=0.5)
    root = tmp_path / "k"
    _, sha = init_with_one_attempt(root, monkeypatch, baseline, result_mod.new("runtime-error", error=error, eval_s=0.5))
    Repo(root).add_note(sha, {"lessons": f"the kernel printed {leaked}"})
    message = git(root, "show", "-s", "--format=%B", sha)
    cause = git(root, "show", "-s", "--format=%(trailers:key=Kgit-Cause,valueonly)", sha)
    note = git(root, "notes", "--ref", NOTES_REF, "show", sha)
    assert "could not parse ../other-repo/.env" in message and "[redacted]" in cause, (message, cause)
    for name, (_, core) in COMMIT_SECRETS.items():
        for where, text in (("body", message), ("Kgit-Cause", cause), ("notes", note)):
            assert core not in text, f"{name} kept in the {where}: {text}"


@pytest.mark.slow
def test_an_aten_alias_of_a_forbidden_op_is_rejected(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.aten_add(data)")
    doc = child.run_child(problem_dir, candidate_dir, _config(), scratch)
    assert (doc["status"], doc["reason"]) == ("rejected", "forbidden by the problem: torch.add"), doc.get("error")
    assert "aten::add" in doc["error"]


# -- units: the secrets module, the remover, the ATen guard -------------------------------------
@pytest.mark.parametrize("text", [
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC (cut here)",
    "sk-ant-api03-abcdefghijklmnopqrstuvwx", "sk-proj-0123456789abcdefABCDEF",
    "ghp_0123456789abcdefghijABCDEFGHIJ", "github_pat_11ABCDEFG0123456789_abcdefghij",
    "AKIAIOSFODNN7EXAMPLE", "xoxb-123456789012-abcdefghijkl", "hf_abcdefghijklmnopqrstuvwxyz012345",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload", "api_key=9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", 'TOKEN: "a1b2c3d4e5f6a7b8c9d0e1f2"',
    "DEPLOY_PASSWORD=correct-horse-battery-staple", "export DB_PASS='hunter2hunter2'",
    '"client_secret": "plainwordsonly"', "password: 'longenoughpassphrase'",
    "postgres://admin:s3cr3tPassw0rd@db", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLW9mLWl0",
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "ya29.a0AfH6SMBx3kAbCdEfGhIjKlMnOp", "npm_abcdefghijklmnopqrstuvwxyz0123456789",
    "login bob password tr0ub4dor", "generated Zq8vR2mK9xLp4Tn7Wb3Yc6Hd1Fg5Js0Qa",
])
def test_key_shaped_text_is_masked(text):
    from kgit import secrets

    masked = secrets.redact_text(f"error: {text} (while loading)", environ={})
    assert "[redacted]" in masked
    assert masked.startswith("error: ")
    core = text.split("\n")[1] if "\n" in text else text.split()[-1].strip('"\'').split("=")[-1].split(":")[-1]
    assert core not in masked, masked


@pytest.mark.parametrize("text", [
    "RuntimeError: shape mismatch for key (4096, 4096) at tile_k=64",
    "triton autotune key=['M', 'N', 'K'] best config BLOCK_M=128",
    "the token budget is 6000; cache key a1b2 is short",
    "File \"/home/me/kernels/kernel.py\", line 12, in custom_kernel",
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_23gelu_kernel_implERNS_18TensorIteratorBaseE",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b of kgit/12-tile-over-BLOCK_K",
    "TritonKernel_BLOCK_SIZE_M128_N64_K32_NumWarps8Stages3 and GemmUniversalAdapter2Sm90TmaWarpSpecialized",
    "kernels nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT and cutlass_80_wmma_Tensorop_bf16_s161616gemm_32x32",
    "MAX_TOKENS = 4096; key_states = self.k_proj(hidden_states); PAD_TOKEN = tokenizer.pad_token_id(x)",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True on NVIDIA H200 sm_90a",
])
def test_ordinary_error_text_is_left_alone(text):
    from kgit import secrets

    assert secrets.redact_text(text, environ={}) == text


def test_secret_values_from_the_environment_are_masked():
    from kgit import secrets

    env = {"OPENAI_API_KEY": "plain-value-without-shape", "MY_SESSION_ID": "session-0001", "PATH": "/usr/bin"}
    out = secrets.redact_text("saw plain-value-without-shape, session-0001 and /usr/bin", environ=env)
    assert out == "saw [redacted], [redacted] and /usr/bin"
    doc = secrets.redact_result({"error": "x plain-value-without-shape", "tests": [{"message": "session-0001"}]}, env)
    assert doc["error"] == "x [redacted]" and doc["tests"][0]["message"] == "[redacted]"
    # One pattern for the environment of evaluated code and for redaction.
    assert child.SECRET_PATTERN is secrets.SECRET_NAME
    assert secrets.allowed_env(env) == {"PATH": "/usr/bin"}


def _hostile_tree(root: Path, outside: Path):
    fd = os.open(root, os.O_RDONLY)
    current = fd
    for _ in range(1500):
        os.mkdir("d" * 50, dir_fd=current)
        deeper = os.open("d" * 50, os.O_RDONLY, dir_fd=current)
        if current != fd:
            os.close(current)
        current = deeper
    os.symlink(str(outside), "to-outside", dir_fd=current)
    os.close(current)
    os.close(fd)
    (root / "locked" / "inner").mkdir(parents=True)
    (root / "locked" / "inner" / "file").write_text("x")
    os.chmod(root / "locked" / "inner", 0)
    os.chmod(root / "locked", 0o500)
    os.mkfifo(root / "fifo")
    os.symlink(str(outside), root / "link-to-outside")


def test_remove_tree_survives_a_hostile_tree(tmp_path):
    from kgit.cleanup import remove_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("must survive")
    control, root = tmp_path / "control", tmp_path / "scratch"
    for folder in (control, root):
        folder.mkdir()
        _hostile_tree(folder, outside)
    # Control: what every cleanup did before (ignore_errors does not cover RecursionError).
    with pytest.raises(RecursionError):
        import shutil
        shutil.rmtree(control, ignore_errors=True)
    assert remove_tree(root) is True and not root.exists()
    assert remove_tree(control) is True and not control.exists()
    assert (outside / "keep.txt").read_text() == "must survive"
    assert remove_tree(tmp_path / "never-existed") is True


@pytest.mark.parametrize("forbidden, call", [
    (["torch.softmax"], lambda torch, x: torch._softmax(x, -1, False)),
    (["torch.softmax"], lambda torch, x: torch.ops.aten._softmax(x, -1, False)),
    (["torch.nn.functional.softmax"], lambda torch, x: torch.special.softmax(x, -1)),
    (["torch.matmul"], lambda torch, x: torch.linalg.matmul(x, x)),
    (["torch.matmul"], lambda torch, x: x.unsqueeze(0) @ x.unsqueeze(0)),
    (["torch.mm"], lambda torch, x: torch.einsum("ij,jk->ik", x, x)),
    (["torch.add"], lambda torch, x: x + x),
    (["torch.cumsum"], lambda torch, x: torch.ops.aten.cumsum(x, 0)),  # not in the table: traced
])
def test_aten_aliases_of_forbidden_ops_trip_the_guard(forbidden, call):
    import torch

    from kgit_harness.guards import Guards, Tripped

    guards = Guards(torch, forbidden, None)
    with pytest.raises(Tripped):
        with guards.armed():
            call(torch, torch.ones(4, 4))
    assert guards.violation[0] == f"forbidden by the problem: {forbidden[0]}"
    assert "ATen op aten::" in guards.violation[1]


def test_allowed_ops_pass_the_aten_guard_and_removing_it_is_seen():
    import torch

    from kgit_harness.guards import Guards

    guards = Guards(torch, ["torch.softmax", "torch.matmul"], None)
    x = torch.ones(4, 4)
    with guards.armed():
        manual = (x - x.amax(-1, keepdim=True)).exp()
        manual / manual.sum(-1, keepdim=True)
    assert guards.violation is None
    with guards.armed():
        # What a candidate past the static policy could do: take the trap's key off its thread.
        torch._C._dispatch_tls_set_dispatch_key_included(guards._key, False)
    assert guards.violation == ("op guard removed", "the kernel took the harness's dispatch key off its thread")


def test_a_hostile_leftover_scratch_does_not_break_cleanup(tmp_path):
    """A scratch folder left by a killed kgit, shaped by the candidate: the next command's
    cleanup removes it instead of raising RecursionError on every later `kgit record`."""
    from conftest import make_git_repo

    from kgit.archive.repo import Repo

    root = make_git_repo(tmp_path / "repo")
    repo = Repo(root)
    outside = tmp_path / "outside"
    outside.mkdir()
    leftover = repo.state / "scratch" / "eval-999999999-dead"  # no such pid: its owner is gone
    leftover.mkdir(parents=True)
    _hostile_tree(leftover, outside)
    assert repo.clean_worktrees() == 1
    assert not leftover.exists() and outside.exists()
    assert repo.clean_worktrees() == 0


def test_cgroup_folders_are_found_in_v1_v2_and_containers():
    from kgit.evaluation import cgroups

    mountinfo = "\n".join([
        "30 25 0:26 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids",
        "31 25 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
        "32 25 0:28 /kubepods/pod1 /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw",
    ])
    membership = "8:pids:/user.slice/session-3\n4:memory:/x\n0::/kubepods/pod1/box\n"
    assert cgroups.candidates(mountinfo, membership) == [
        (Path("/sys/fs/cgroup/pids/user.slice/session-3"), 1), (Path("/sys/fs/cgroup/unified/box"), 2)]
    assert cgroups.candidates("20 1 0:5 / /proc rw - proc proc rw", membership) == []
    # memory: its own v1 hierarchy first, then the unified one.
    assert cgroups.candidates(mountinfo, membership, "memory") == [
        (Path("/sys/fs/cgroup/memory/x"), 1), (Path("/sys/fs/cgroup/unified/box"), 2)]


def test_out_of_memory_kills_are_read_from_v1_and_v2(tmp_path):
    from kgit.evaluation import cgroups

    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\n")
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert cgroups.oom_kills(str(tmp_path / "v2")) == 1 and cgroups.oom_kills(str(tmp_path / "v1")) == 3
    assert cgroups.oom_kills(None) == 0 and cgroups.oom_kills(str(tmp_path / "none")) == 0


@needs_namespaces
@pytest.mark.slow
def test_scratch_size_and_process_count_come_from_the_config(tmp_path):
    """End to end through run_child: evaluator.scratch_gb and evaluator.max_processes reach the child."""
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.hoard(256)")
    doc = child.run_child(problem_dir, candidate_dir, _config(scratch_gb=16 / 1024, max_processes=48), scratch)
    assert doc["status"] == "ok", doc.get("error")
    seen = json.loads(doc["stdout"].split("KGIT-HOARD ", 1)[1].splitlines()[0])
    assert seen["written"] <= 16 << 20 and seen["fill_error"] == "No space left on device", seen
    assert seen["forks"] < 48 and seen["fork_error"] == "Resource temporarily unavailable", seen
    assert any("pids.max=48" in a or "nproc=48" in a for a in doc["sandbox"]["applied"]), doc["sandbox"]
