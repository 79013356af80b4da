"""A throwaway kernel repository for the benchmarks: the default .kgit.yaml, optionally fast timing.

Imported by the scripts beside it (`python benchmarks/X.py` puts this folder on sys.path).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from kgit import config as config_mod
from kgit import workflow

FAST_TIMING = {"target_rse": 0.5, "max_time_s": 0.05, "min_reps": 2, "warmup": 0}


def make_repo(root: Path, problem: str, fast: bool, edit=None) -> Path:
    """`kgit init` of `problem` in a new git repository at `root`; `edit(data)` may change the config first."""
    data = yaml.safe_load(config_mod.default_text())
    if fast:
        data["timing"] = dict(FAST_TIMING)
    if edit is not None:
        edit(data)
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    for key, value in (("user.name", "kgit bench"), ("user.email", "bench@localhost")):
        subprocess.run(["git", "-C", str(root), "config", key, value], check=True)
    workflow.init(root, problem, config_text=yaml.safe_dump(data, sort_keys=False))
    return root
