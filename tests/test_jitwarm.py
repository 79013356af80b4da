"""A runner started ahead of need pays Triton's one-time costs (harness/jitwarm.py) into its own cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_WARM = '''
import torch
from kgit_harness import jitwarm
jitwarm.before_device()
if torch.cuda.is_available():
    torch.empty(1, device="cuda")
jitwarm.after_device(torch)
print("warmed")
'''


def _warm_in(cache: Path, gpu: bool) -> list[str]:
    """Run both halves in a fresh process whose Triton cache is `cache`; the files left there."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(cache), TRITON_HOME=str(cache.parent))
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run([sys.executable, "-c", _WARM], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "warmed" in done.stdout, done.stderr[-2000:]
    return sorted(p.name for p in cache.rglob("*") if p.is_file())


def test_without_a_gpu_driver_the_warm_up_does_nothing_and_raises_nothing(tmp_path):
    assert _warm_in(tmp_path / "cache", gpu=False) == []


@pytest.mark.gpu
def test_the_warm_up_builds_the_driver_helper_and_compiles_for_the_device_without_loading(tmp_path):
    files = _warm_in(tmp_path / "cache", gpu=True)
    assert any(name.startswith("cuda_utils") and name.endswith(".so") for name in files), files
    assert any(name == "scale.cubin" for name in files), files
    # Compiled, never launched: a launch would have built the kernel's launcher as well.
    assert not any("launcher" in name for name in files), files
