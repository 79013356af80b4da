"""Which GPUs this host has, how a child is pinned to one, and who holds which.

Discovery never imports torch in the driving process: importing it costs seconds and
initialising CUDA there would hold memory on every GPU for the whole run. It reads the
visibility variables, the driver's device files and the vendors' command-line tools,
and only when those say nothing definite asks a short-lived child.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from kgit.errors import ConfigError

CPU = "cpu"
KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")


@dataclass(frozen=True)
class Host:
    """The GPUs this process may use: vendor ("nvidia", "amd" or None) and their ids."""

    vendor: str | None
    ids: tuple[str, ...]

    @property
    def pin_var(self) -> str | None:
        return {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "HIP_VISIBLE_DEVICES"}.get(self.vendor)


def _listed(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def discover(env=None) -> Host:
    """The GPUs visible to this process, as ids a child's visibility variable accepts."""
    env = os.environ if env is None else env
    if Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi"):
        if "CUDA_VISIBLE_DEVICES" in env:
            return Host("nvidia", _listed(env["CUDA_VISIBLE_DEVICES"]))
        return Host("nvidia", _nvidia_smi_ids() or _torch_ids())
    if Path("/dev/kfd").exists():
        for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
            if var in env:
                return Host("amd", _listed(env[var]))
        # HIP numbers devices after ROCR's mask, so the mask's length is the count.
        if "ROCR_VISIBLE_DEVICES" in env:
            count = len(_listed(env["ROCR_VISIBLE_DEVICES"]))
        else:
            count = _kfd_gpu_count()
        return Host("amd", tuple(str(i) for i in range(count)) if count else _torch_ids())
    return Host(None, ())


def _nvidia_smi_ids() -> tuple[str, ...]:
    if not shutil.which("nvidia-smi"):
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in out.splitlines() if line.strip().isdigit())


def _kfd_gpu_count() -> int:
    """GPU nodes in the ROCm topology (CPU nodes have no SIMDs)."""
    count = 0
    for props in sorted(KFD_NODES.glob("*/properties")):
        for line in props.read_text(errors="replace").splitlines():
            name, _, value = line.partition(" ")
            if name == "simd_count" and value.strip().isdigit() and int(value) > 0:
                count += 1
    return count


def _torch_ids() -> tuple[str, ...]:
    try:
        out = subprocess.run([sys.executable, "-I", "-c", "import torch; print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=120).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(str(i) for i in range(int(out))) if out.isdigit() else ()


def select(host: Host, devices) -> list[str | None]:
    """Worker slots for `evaluator.devices`: one per chosen GPU, or one CPU slot on a host without any."""
    if devices == "all":
        return list(host.ids) or [None]
    if not host.ids:
        raise ConfigError(f"evaluator.devices lists GPUs {devices} but this host shows none (no NVIDIA or "
                          "AMD driver, or an empty CUDA_VISIBLE_DEVICES). Set `devices: all` to evaluate "
                          "on the CPU, or run kgit on the GPU host.")
    wrong = [d for d in devices if d >= len(host.ids)]
    if wrong:
        raise ConfigError(f"evaluator.devices lists {wrong}, but only {len(host.ids)} GPU(s) are visible "
                          f"(indices 0..{len(host.ids) - 1}). Fix the list in .kgit.yaml, or use `devices: all`.")
    return [host.ids[d] for d in dict.fromkeys(devices)]


def pin_env(host: Host, device: str | None) -> dict:
    """Variables that make `device` the only GPU a child sees (nothing on the CPU)."""
    if device is None or host.pin_var is None:
        return {}
    if host.vendor == "amd":
        # ROCm reads CUDA_VISIBLE_DEVICES as an alias of HIP's: one inherited from the
        # parent and disagreeing with the pin would hide the GPU, so both name it.
        return {"HIP_VISIBLE_DEVICES": device, "CUDA_VISIBLE_DEVICES": device}
    return {host.pin_var: device}


class Board:
    """Process-wide record of busy devices, so that every evaluator of this process shares them.

    A re-timing of a base and the `evolve` pool must never time two kernels on one GPU
    at once, even when they were made from different config objects.
    """

    def __init__(self):
        self._cv = threading.Condition()
        self._busy: set = set()

    def acquire(self, keys: list):
        """Block until one of `keys` is free; take it and return it."""
        with self._cv:
            while True:
                for key in keys:
                    if key not in self._busy:
                        self._busy.add(key)
                        return key
                self._cv.wait()

    def release(self, key):
        with self._cv:
            self._busy.discard(key)
            self._cv.notify_all()

    def busy(self) -> set:
        with self._cv:
            return set(self._busy)


BOARD = Board()


def host_lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"kgit-devices-{os.getuid()}"


@contextlib.contextmanager
def host_slot(key):
    """Hold `key`'s lock file: one holder at a time among all of this user's kgit processes.

    The Board keeps one process's evaluators apart; two kgit processes on one host
    (two repositories evolved at once, a conformance run with 4 workers) would each
    think a GPU free and run side by side, and a correct kernel then fails for want
    of GPU memory. flock is released by the kernel when its holder dies, so a killed
    kgit leaves nothing held.
    """
    folder = host_lock_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(str(k) for k in key)) + ".lock"
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def ray_safe_env(env: dict) -> dict:
    """The visibility variables rewritten so Ray accepts them on AMD nodes.

    Ray (since 2.45) raises on ROCR_VISIBLE_DEVICES unless HIP_VISIBLE_DEVICES is set, and
    on CUDA/HIP_VISIBLE_DEVICES that disagree. ROCR masks below HIP and HIP numbers what
    is left, so the same GPUs are selected by HIP_VISIBLE_DEVICES alone: ROCR's entries,
    picked by HIP's indices when both are set.
    """
    env = dict(env)
    rocr = env.pop("ROCR_VISIBLE_DEVICES", None)
    if rocr is not None:
        rocr_ids = _listed(rocr)
        hip = env.get("HIP_VISIBLE_DEVICES")
        if hip is None:
            env["HIP_VISIBLE_DEVICES"] = ",".join(rocr_ids)
        else:
            picked = []
            for index in _listed(hip):
                if not index.isdigit() or int(index) >= len(rocr_ids):
                    raise ConfigError(f"HIP_VISIBLE_DEVICES={hip} does not index ROCR_VISIBLE_DEVICES={rocr}; "
                                      "set only HIP_VISIBLE_DEVICES before starting kgit with Ray.")
                picked.append(rocr_ids[int(index)])
            env["HIP_VISIBLE_DEVICES"] = ",".join(picked)
        if "CUDA_VISIBLE_DEVICES" in env:
            env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"]
    return env
