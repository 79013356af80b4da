"""Hostile candidates for the sandbox tests and benchmarks/faults.py.

The static policy check rejects `os`, `socket` and `ctypes` in the editable files, so
these candidates keep their hostile code in a helper module, `hostile.py`, that the
policy does not read (it reads only the problem's editable files), and reach the
network through libc rather than `socket`, which the harness's audit hook watches:
they stand in for a kernel that found a way around both, so the sandbox is what
meets them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kgit_harness import problem as problem_mod

HOSTILE = '''
import json, os, resource, sys

DONE = set()  # the kernel is called many times; each escape is tried once


def once(name):
    if name in DONE:
        return False
    DONE.add(name)
    return True


def snoop(secrets, port, outside, marker, runtime=None):
    if not once("snoop"):
        return
    report = {"env_keys": sorted(os.environ)}
    report["env_has_secret"] = any(s in v for s in secrets for v in os.environ.values())
    leaked = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                data = open(f"/proc/{pid}/environ", "rb").read()
            except OSError:
                continue
            if any(s.encode() in data for s in secrets):
                leaked.append(pid)
    report["proc_environ_with_secret"] = leaked
    try:
        open(f"/proc/{os.getppid()}/environ", "rb").read()
        report["read_parent_environ"] = True
    except OSError as e:
        report["read_parent_environ"] = str(e)
    report["connected"] = raw_connect(port)
    try:
        with open(outside, "w") as f:
            f.write("escaped")
        report["wrote_outside"] = True
    except OSError as e:
        report["wrote_outside"] = str(e)
    try:
        # Python's folder, which the view holds (the control run names a folder of its own).
        with open(os.path.join(runtime or sys.prefix, "escaped.txt"), "w") as f:
            f.write("escaped")
        report["wrote_runtime"] = True
    except OSError as e:
        report["wrote_runtime"] = e.strerror
    try:
        with open(os.path.join(os.environ.get("HOME", "."), "allowed.txt"), "w") as f:
            f.write("fine")
        report["wrote_home"] = True
    except OSError as e:
        report["wrote_home"] = str(e)
    report["core"] = resource.getrlimit(resource.RLIMIT_CORE)
    report["nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
        report["raised_nofile"] = True
    except (OSError, ValueError) as e:
        report["raised_nofile"] = str(e)
    if marker:
        escape(marker, detach=True)
    print("KGIT-PROBE " + json.dumps(report))
    sys.stdout.flush()


def raw_connect(port):
    """connect() through libc, so neither the policy nor the audit hook on
    socket.connect sees it: only the network namespace stands in the way."""
    import ctypes, struct
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM
    addr = struct.pack("=H", 2) + struct.pack("!H", port) + bytes([127, 0, 0, 1]) + bytes(8)
    ok = libc.connect(fd, addr, len(addr)) == 0
    err = ctypes.get_errno()
    os.close(fd)
    return True if ok else os.strerror(err)


def escape(marker, detach):
    if not once("escape"):
        return
    pid = os.fork()
    if pid == 0:
        if detach:
            os.setsid()  # leave the process group kgit kills
            if os.fork():
                os._exit(0)
        os.execv("/bin/sleep", ["sleep", marker])
    if detach:
        os.waitpid(pid, 0)


def spec_exists():
    return os.path.exists("spec.json")


def segfault():
    import ctypes
    ctypes.string_at(0)


def spin():
    while True:
        pass


def hog(gib):
    import torch
    return [torch.empty(1 << 28, dtype=torch.float32) for _ in range(gib)]


HELD = []


def memfd_hog(mib):
    """Host memory RLIMIT_DATA does not count: a memfd filled with write(), kept open."""
    if not once("memfd"):
        return
    fd = os.memfd_create("hog")
    for _ in range(mib // 16):
        os.write(fd, b"x" * (16 << 20))
    HELD.append(fd)


def shout(megabytes):
    if not once("shout"):
        return
    line = "x" * 1023 + "\\n"
    for _ in range(megabytes * 1024):
        sys.stdout.write(line)


def defeat_lifeline(marker):
    """Everything that beat the in-process lifeline: os._exit patched to do nothing, the
    parent-death signal cleared, a daemon in a session of its own; then work forever."""
    if not once("defeat"):
        return
    import ctypes
    os._exit = lambda *args: None
    ctypes.CDLL(None, use_errno=True).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG, 0
    escape(marker, detach=True)
    print("KGIT-DEFEATED", flush=True)
    spin()


def leak_key(secret):
    """An error whose message carries key-shaped text and the user's own secret."""
    pem = "-----BEGIN RSA PRIVATE KEY-----\\nMIIEowIBAAKCAQEAq7BFUpkGp3+Xs1\\n-----END RSA PRIVATE KEY-----"
    raise RuntimeError(f"could not log in with {secret} ghp_{'a1B2c3D4' * 5} {pem}")


def aten_add(data):
    """vector_add forbids torch.add; the ATen op under it, reached without the Python name."""
    import torch
    torch.ops.aten.add.Tensor(data[0], data[1])


def hoard(limit_mb):
    """Fill the scratch (HOME) and fork until refused; report how far each got."""
    if not once("hoard"):
        return
    import time
    written, fill_error = 0, None
    try:
        with open(os.path.join(os.environ["HOME"], "fill.bin"), "wb") as f:
            while written < limit_mb << 20:
                f.write(b"x" * (1 << 20))
                f.flush()
                written += 1 << 20
    except OSError as e:
        fill_error = e.strerror
    os.unlink(os.path.join(os.environ["HOME"], "fill.bin"))
    forks, fork_error = [], None
    while len(forks) < 1000:
        try:
            pid = os.fork()
        except OSError as e:
            fork_error = e.strerror
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        forks.append(pid)
    for pid in forks:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    print("KGIT-HOARD " + json.dumps({"written": written, "fill_error": fill_error, "forks": len(forks),
                                      "fork_error": fork_error}), flush=True)
'''

def kernel_source(action: str) -> str:
    """The shipped baseline kernel, with the hostile action run first on every call."""
    baseline = (problem_mod.shipped()["vector_add"] / "kernel.py").read_text()
    body = baseline.replace("def custom_kernel(data):\n", f"def custom_kernel(data):\n    {action}\n")
    assert body != baseline
    return "import hostile\n" + body


def stage(tmp_path: Path, action: str) -> tuple[Path, Path, Path]:
    scratch = tmp_path / "scratch"
    problem_dir, candidate_dir = scratch / "problem", scratch / "candidate"
    shutil.copytree(problem_mod.shipped()["vector_add"], problem_dir)
    candidate_dir.mkdir()
    (candidate_dir / "kernel.py").write_text(kernel_source(action))
    (candidate_dir / "hostile.py").write_text(HOSTILE)
    return problem_dir, candidate_dir, scratch
