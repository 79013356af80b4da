"""The candidate folder: what a remote evaluator receives, and how one is evaluated.

Layout (docs/evaluators.md):

    kgit-candidate.json   manifest: schema, sha, editable files, timing settings, timeout
    problem/              task.yml and reference.py
    kernel/               the editable file(s), e.g. kernel.py

The problem and the kernel sit in sibling folders so the kernel cannot import the
reference as a neighbouring module. `kgit eval-candidate FOLDER` evaluates such a folder
with the local harness and prints the result document; that is what an ssh-reachable
box or a Ray worker runs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from kgit.cleanup import remove_tree
from kgit import config as config_mod
from kgit.evaluation import child as evaluate
from kgit.errors import KgitError
from kgit.problems import load_task

SCHEMA = "kgit.candidate/1"
MANIFEST = "kgit-candidate.json"


def stage(source_root: Path, config, dest: Path, sha: str | None = None) -> Path:
    """Write the candidate folder for the tree at `source_root` into `dest` (created)."""
    source_root = Path(source_root)
    task = load_task(source_root / config.problem)
    dest.mkdir(parents=True)
    shutil.copytree(source_root / config.problem, dest / "problem")
    kernel = dest / "kernel"
    kernel.mkdir()
    for name in task.files:
        src = source_root / name
        if src.exists():
            (kernel / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, kernel / name)
    manifest = {"schema": SCHEMA, "sha": sha, "files": list(task.files), "timing": asdict(config.timing),
                "timeout_s": config.evaluator.timeout_s, "max_output_bytes": config.evaluator.max_output_bytes}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return dest


def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KgitError(f"{folder} is not a kgit candidate folder: {MANIFEST} is missing. Candidate folders "
                        "are made by the command and Ray evaluators (see docs/evaluators.md).") from None
    except json.JSONDecodeError as e:
        raise KgitError(f"{path} is not valid JSON ({e}); copy the candidate folder again.") from None
    if manifest.get("schema") != SCHEMA:
        raise KgitError(f"{path} has schema {manifest.get('schema')!r}, this kgit reads {SCHEMA}: "
                        "install the same kgit version on both machines.")
    return manifest


def manifest_config(manifest: dict) -> config_mod.Config:
    """The settings the evaluation needs, taken from the sender's configuration."""
    try:
        timing = config_mod.TimingConfig(**manifest["timing"])
        evaluator = config_mod.EvaluatorConfig(timeout_s=manifest["timeout_s"],
                                               max_output_bytes=manifest["max_output_bytes"])
    except (KeyError, TypeError) as e:
        raise KgitError(f"the candidate manifest lacks or has unknown settings ({e}); install the same kgit "
                        "version on both machines.") from None
    return config_mod.Config(timing=timing, evaluator=evaluator)


def evaluate_folder(folder: Path, devices_env: dict | None = None) -> dict:
    """Evaluate a candidate folder with the local harness in a child process."""
    folder = Path(folder).resolve()
    config = manifest_config(read_manifest(folder))
    scratch = Path(tempfile.mkdtemp(prefix="kgit-candidate-"))
    try:
        # A copy, so the kernel cannot change what a later evaluation of this folder reads.
        problem_dir = shutil.copytree(folder / "problem", scratch / "problem")
        kernel_dir = shutil.copytree(folder / "kernel", scratch / "kernel")
        return evaluate.run_child(problem_dir, kernel_dir, config, scratch, devices_env)
    finally:
        remove_tree(scratch)


def pack(folder: Path) -> dict[str, bytes]:
    """The folder's files by relative path, to ship to a machine that does not share the disk."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def unpack(files: dict[str, bytes], dest: Path) -> Path:
    dest = Path(dest)
    for rel, data in files.items():
        path = (dest / rel).resolve()
        if dest.resolve() not in path.parents:
            raise KgitError(f"refusing to unpack {rel!r} outside the candidate folder.")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return dest
