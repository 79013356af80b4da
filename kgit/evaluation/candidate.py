"""The candidate folder: what a remote evaluator receives, and how one is evaluated.

Layout (docs/evaluators.md):

    kgit-candidate.json   manifest: schema, sha, editable files, timing settings, timeout,
                          a nonce and the digest of the files below
    problem/              task.yml and reference.py
    kernel/               the editable file(s), e.g. kernel.py

The problem and the kernel sit in sibling folders so the kernel cannot import the
reference as a neighbouring module. `kgit eval-candidate FOLDER` evaluates such a folder
with the local harness and prints the result document; that is what an ssh-reachable
box or a Ray worker runs. The result echoes the manifest's nonce and the digest of the
files it evaluated (`answer`), and kgit refuses a result that answers another candidate
(`check_answer`): two evaluations sharing a remote folder cannot swap verdicts.

`kgit eval-candidate -` takes the folder as a tar archive on its standard input (what
the command backend writes there, `send_bytes`) and then watches that input: when the
archive says the sender holds it open (a `HOLD` member) and it closes, because kgit
gave up or died or the ssh connection carrying it broke, the evaluation stops and its
folder goes.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import shutil
import signal
import socket
import tarfile
import tempfile
import threading
from dataclasses import asdict
from pathlib import Path

from kgit import __version__
from kgit import config as config_mod
from kgit.cleanup import remove_tree
from kgit.errors import KgitError
from kgit.evaluation import child
from kgit.problems import load_task

SCHEMA = "kgit.candidate/1"
MANIFEST = "kgit-candidate.json"
# The parts of the folder the digest covers: everything that is evaluated.
DIGESTED = ("problem", "kernel")
# A member of the archive on a command's stdin, not of the folder: the sender keeps that
# input open until the result arrives, so its end of file means the sender is gone.
HOLD = "kgit-holds-stdin"


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
                "timeout_s": config.evaluator.timeout_s, "max_output_bytes": config.evaluator.max_output_bytes,
                "nonce": secrets.token_hex(16), "digest": digest(dest), "kgit": __version__}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return dest


def digest(folder: Path) -> str:
    """sha256 over the paths and bytes of the problem and kernel files under `folder`."""
    folder = Path(folder)
    h = hashlib.sha256()
    for part in DIGESTED:
        for path in sorted(p for p in (folder / part).rglob("*") if p.is_file()):
            data = path.read_bytes()
            h.update(f"{path.relative_to(folder).as_posix()}\0{len(data)}\0".encode())
            h.update(data)
    return "sha256:" + h.hexdigest()


def answer(folder: Path, manifest: dict) -> dict:
    """What a result echoes to say which candidate it answers: the manifest's sha and nonce,
    and the digest of the files under `folder` that were evaluated.

    An adapter that makes results itself (docs/evaluators.md) adds it as the result's
    `candidate` key: `doc["candidate"] = answer(folder, read_manifest(folder))`."""
    return {"sha": manifest.get("sha"), "nonce": manifest.get("nonce"), "digest": digest(folder)}


def check_answer(doc: dict, sent: dict) -> str | None:
    """Why the result `doc` does not answer the candidate whose manifest was `sent`; None when it does."""
    echo = doc.get("candidate")
    if not isinstance(echo, dict) or not echo.get("nonce"):
        return ("the result does not say which candidate it answers (no `candidate` with the nonce and digest "
                "of the folder kgit sent): the remote kgit predates this check, or the command makes its "
                f"result itself. Install kgit {__version__} there, or add the echo (docs/evaluators.md).")
    if echo.get("nonce") != sent.get("nonce"):
        whose = f"commit {str(echo.get('sha'))[:10]}" if echo.get("sha") else "a candidate of unknown commit"
        return (f"the result answers another candidate: {whose} (nonce {str(echo['nonce'])[:12]}...), not commit "
                f"{str(sent.get('sha'))[:10]} (nonce {str(sent.get('nonce'))[:12]}...) that kgit sent. Two "
                "evaluations shared a remote folder, or the command returned an old result; give each "
                "evaluation a folder of its own (`kgit eval-candidate -` makes one, docs/evaluators.md).")
    if echo.get("digest") != sent.get("digest"):
        return (f"the files evaluated for commit {str(sent.get('sha'))[:10]} are not the files kgit sent "
                f"(digest {echo.get('digest')}, sent {sent.get('digest')}): something changed the remote "
                "folder before or while it was evaluated; give each evaluation a folder of its own.")
    return None


def send_bytes(folder: Path) -> bytes:
    """The candidate folder as an uncompressed tar archive with the `HOLD` member: what the
    command backend writes on its command's standard input (`kgit eval-candidate -`)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(Path(folder).rglob("*")):
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
        hold = tarfile.TarInfo(HOLD)
        tar.addfile(hold, io.BytesIO(b""))
    return buffer.getvalue()


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
    """Evaluate a candidate folder with the local harness in a child process.

    The result echoes the candidate it answers (`answer`, taken from the copy that is
    evaluated) and names this host in `worker`."""
    folder = Path(folder).resolve()
    manifest = read_manifest(folder)
    config = manifest_config(manifest)
    scratch = Path(tempfile.mkdtemp(prefix="kgit-candidate-"))
    try:
        # A copy, so the kernel cannot change what a later evaluation of this folder reads.
        problem_dir = shutil.copytree(folder / "problem", scratch / "problem")
        kernel_dir = shutil.copytree(folder / "kernel", scratch / "kernel")
        echo = answer(scratch, manifest)
        doc = child.run_child(problem_dir, kernel_dir, config, scratch, devices_env)
    finally:
        remove_tree(scratch)
    doc["candidate"] = echo
    doc["worker"] = {"host": socket.gethostname(), "kgit": __version__}
    return doc


class StdinClosed(KgitError):
    """`kgit eval-candidate -`: the sender closed the input it promised to hold open."""


class _HungUp(BaseException):
    """Raised in the main thread when the input closes (or SIGHUP/SIGTERM arrive) mid-evaluation:
    a BaseException, so that no `except Exception` on the way swallows it."""


def evaluate_stream(stream, devices_env: dict | None = None) -> dict:
    """`kgit eval-candidate -`: the candidate folder as a tar archive on `stream` (binary, the
    process's stdin), then, when the archive held `HOLD`, its end of file as the signal to stop.

    The folder is unpacked into a private temporary folder, evaluated, and removed however
    the evaluation ends; when the input closes first, the harness's processes are ended
    with it and StdinClosed is raised. Call from the main thread (it sets signal handlers)."""
    root = Path(tempfile.mkdtemp(prefix="kgit-remote-"))
    try:
        folder = root / "candidate"
        _untar(stream, folder)
        hold = folder / HOLD
        with _Lifeline(stream.fileno()) if hold.is_file() else contextlib.nullcontext():
            hold.unlink(missing_ok=True)
            return evaluate_folder(folder, devices_env)
    except _HungUp:
        raise StdinClosed("the evaluation was stopped: its input closed (the sender gave up or ended, or the "
                          "ssh connection broke), so nobody waits for the result.") from None
    finally:
        remove_tree(root)


def _untar(stream, dest: Path):
    dest.mkdir()
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            # "data": regular files and folders inside dest only, no links out, no devices.
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise KgitError(f"standard input did not hold a candidate folder as a tar archive ({e}). Send one: "
                        "`tar -C FOLDER -cf - . | kgit eval-candidate -`, or give the folder: "
                        "`kgit eval-candidate FOLDER`.") from None


class _Lifeline:
    """While in effect, a thread reads the rest of the input (file descriptor `fd`) and
    when it ends, sends the main thread SIGHUP, which (like SIGHUP and SIGTERM from
    outside) raises _HungUp there. Only for an archive with `HOLD`: a hand-made
    `tar ... | kgit eval-candidate -` ends its input at once without stopping anything."""

    SIGNALS = (signal.SIGHUP, signal.SIGTERM)

    def __init__(self, fd: int):
        self.fd, self.active, self.main = fd, True, threading.main_thread().ident

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self._raise) for sig in self.SIGNALS}
        threading.Thread(target=self._watch, name="kgit-lifeline", daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.active = False
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False

    def _raise(self, signum, frame):
        if self.active:
            self.active = False  # once: cleaning up must not be interrupted again
            raise _HungUp()

    def _watch(self):
        # The descriptor itself, not the buffered stream the archive came through: a thread
        # blocked in the stream's read holds its lock, which the interpreter's exit needs.
        # Whatever that stream buffered is padding of the archive; only the end matters.
        while True:
            try:
                if not os.read(self.fd, 1 << 16):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        if self.active:
            signal.pthread_kill(self.main, signal.SIGHUP)


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
