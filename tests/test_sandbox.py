"""Each claim of docs/sandbox.md, tested with a kernel that tries.

The static policy check (harness/policy.py) rejects `os`, `socket` and `ctypes`
imports before any code runs, so a plain hostile kernel.py never reaches the runtime
defences. These tests stand in for a kernel that found a way around the static check:
they call `evaluate.run_child` on a candidate folder whose kernel.py imports a helper
module, `hostile.py`, that the policy does not read (it reads only the problem's
editable files). Everything the helper does then meets the sandbox alone.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kgit import config as config_mod
from kgit.evaluation import child as evaluate, sandbox
from kgit_harness import problem as problem_mod

from conftest import fast_config_text
from hostile_kernels import HOSTILE, stage

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
    from kgit.evaluation import child as evaluate
    cfg = config.parse(Path(sys.argv[1]).read_text())
    doc = evaluate.run_child(Path(sys.argv[2]), Path(sys.argv[3]), cfg, Path(sys.argv[4]))
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
        code = f"import hostile; hostile.snoop(['sk-control-123'], {port}, {str(outside)!r}, '')"
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "OPENAI_API_KEY": "sk-control-123"}, timeout=60)
    report = json.loads(proc.stdout.split("KGIT-PROBE ", 1)[1])
    assert report["connected"] is True
    assert report["env_has_secret"] is True
    assert report["proc_environ_with_secret"], "the probe must find its own environ"
    assert report["wrote_outside"] is True and outside.read_text() == "escaped"


def test_kernel_still_passes_while_snooping(snooped):
    assert snooped["doc"]["status"] == "ok", snooped["doc"].get("error")


def test_no_secret_in_the_environment(snooped):
    report = snooped["report"]
    assert report["env_has_secret"] is False
    assert not any(evaluate.SECRET_PATTERN.search(k) for k in report["env_keys"])
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
    assert report["wrote_outside"] is not True and "Read-only" in report["wrote_outside"]
    assert not snooped["outside"].exists()
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
    assert "read-only filesystem except the scratch folder" in box["applied"] or not NAMESPACES
    if NAMESPACES:
        assert box["missing"] == []
    else:
        assert any("namespace" in m for m in box["missing"])


def test_process_group_kill_without_namespaces(tmp_path):
    """sandbox: off keeps the process-group kill: a forked child in the group dies too."""
    marker = f"{random.randint(10**6, 10**7)}.{random.randint(1, 999)}"
    problem_dir, candidate_dir, scratch = stage(tmp_path, f"hostile.escape({marker!r}, detach=False)")
    doc = evaluate.run_child(problem_dir, candidate_dir, _config(sandbox="off"), scratch)
    try:
        assert doc["status"] == "ok", doc.get("error")
        assert any("switched off" in m for m in doc["sandbox"]["missing"])
        assert _gone("sleep " + marker, within_s=5)
    finally:
        for pid in _processes_with("sleep " + marker):
            os.kill(pid, signal.SIGKILL)


def test_segfault_is_a_crash_with_the_stack(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.segfault()")
    doc = evaluate.run_child(problem_dir, candidate_dir, _config(), scratch)
    assert doc["status"] == "crash"
    assert "SIGSEGV" in doc["error"]
    assert "hostile.py" in doc["error"] and "segfault" in doc["error"]  # faulthandler's Python stack


def test_infinite_loop_times_out_and_leaves_nothing(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.spin()")
    doc = evaluate.run_child(problem_dir, candidate_dir, _config(timeout_s=10), scratch)
    assert doc["status"] == "timeout"
    assert "10 s" in doc["error"]
    assert _gone(str(scratch), within_s=5)


def test_huge_allocation_is_a_runtime_error(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.hog(64)")
    doc = evaluate.run_child(problem_dir, candidate_dir, _config(max_memory_gb=2), scratch)
    assert doc["status"] == "runtime-error", doc.get("error")
    assert "memory" in doc["error"].lower()
    assert any("data=2147483648" in a for a in doc["sandbox"]["applied"])


def test_enormous_output_is_cut_not_stored(tmp_path):
    problem_dir, candidate_dir, scratch = stage(tmp_path, "hostile.shout(64)")
    doc = evaluate.run_child(problem_dir, candidate_dir, _config(max_output_bytes=4000), scratch)
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


def test_strict_mode_refuses_without_namespaces(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: (False, "the OS refused new namespaces (test)"))
    with pytest.raises(sandbox.SandboxUnavailable, match="evaluator.sandbox: auto"):
        sandbox.plan("strict")
    iso = sandbox.plan("auto")
    assert iso.prefix == [] and iso.namespaces is False
    assert "network cut" in iso.missing[0] and "(test)" in iso.missing[0]


def test_output_tail_keeps_head_and_tail():
    tail = evaluate.OutputTail(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        tail.add(chunk)
    text = tail.text()
    assert text.startswith("abcde") and text.endswith("vwxyz")
    assert "[... 16 bytes cut ...]" in text
    small = evaluate.OutputTail(100)
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
    return evaluate.run_child(problem_dir, candidate_dir, config, scratch)


@pytest.mark.gpu
def test_gpu_evaluation_works_inside_the_sandbox(tmp_path):
    source = (problem_mod.shipped()["vector_add"] / "kernel.py").read_text()
    doc = _run_source(tmp_path, source, _config())
    assert doc["status"] == "ok", doc.get("error")
    assert doc["timing"] == "events" and doc["device"] != "cpu"
    assert doc["sandbox"]["namespaces"] is NAMESPACES
    if NAMESPACES:
        # The one thing not applied on GPU hosts: CUDA does not start on a read-only filesystem.
        assert all("read-only filesystem" in m for m in doc["sandbox"]["missing"]), doc["sandbox"]
    # No host-memory limit where a GPU driver is present unless asked for.
    assert not any("data=" in a for a in doc["sandbox"]["applied"])


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
    doc = evaluate.run_child(problem_dir, candidate_dir, _config(timeout_s=30), scratch)
    assert doc["status"] in statuses, (doc["status"], doc.get("error"))
    assert all(w.lower() in doc["error"].lower() for w in words), doc["error"][-2000:]
    assert _gone(str(scratch), within_s=10)
    # The device is usable again right after.
    source = (problem_mod.shipped()["vector_add"] / "kernel.py").read_text()
    after = _run_source(tmp_path / "good", source, _config())
    assert after["status"] == "ok", after.get("error")


def test_the_spec_with_the_secret_seed_is_gone_before_the_candidate_runs(tmp_path):
    # The kernel runs in the folder the spec was written to; by then the file must be gone.
    # (`os` reached by a computed name: the static policy would reject the plain one first.)
    action = 'print("KGIT-SPEC", getattr(hostile, "o" + "s").path.exists("spec.json"))'
    problem_dir, candidate_dir, scratch = stage(tmp_path, action)
    doc = evaluate.run_child(problem_dir, candidate_dir, _config(), scratch)
    lines = [line for line in doc["stdout"].splitlines() if line.startswith("KGIT-SPEC ")]
    assert lines, (doc["status"], doc.get("error"), doc["stderr"][-1500:])
    assert lines[0].startswith("KGIT-SPEC False"), lines[0]
