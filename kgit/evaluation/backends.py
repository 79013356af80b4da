"""Evaluators: `get_evaluator(repo, config)` returns a callable `(sha) -> result document`.

Three backends, chosen by `evaluator.backend`:

- local: a harness child per evaluation on this host, one slot per GPU, the child pinned
  to its GPU through CUDA_VISIBLE_DEVICES (NVIDIA) or HIP_VISIBLE_DEVICES (AMD);
- ray: one Ray task per evaluation with num_gpus=1, on any node of a cluster;
- command: your command gets a candidate folder (as a path, and as a tar archive on its
  stdin, which stays open while kgit waits) and prints the result (an ssh-reachable box,
  a competition's submission CLI); a result must echo the candidate it answers.

Every evaluator is thread-safe and blocks until a slot is free, so J threads (`kgit
evolve --jobs J`) can share one. Each call checks `sha` out in a throwaway worktree of
its own. The result's `worker` field says where it ran.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kgit import __version__, secrets
from kgit.cleanup import remove_tree
from kgit.errors import KgitError
from kgit.evaluation import candidate, child, gpus
from kgit.secrets import redact_result
from kgit.secrets import redact_text as redact
from kgit_harness import result as result_mod


class EvaluatorError(KgitError):
    """The evaluator itself failed (unreachable host, broken command): no verdict on the kernel."""


def get_evaluator(repo, config, *, warm: bool = False):
    """`warm`: many evaluations follow (`kgit evolve`), so the local backend keeps a spare
    judge/runner pair per slot started ahead of need (when `evaluator.warm` allows)."""
    backend = config.evaluator.backend
    if backend == "local":
        return LocalEvaluator(repo, config, warm=warm)
    if backend == "ray":
        return RayEvaluator(repo, config)
    if backend == "command":
        return CommandEvaluator(repo, config)
    raise KgitError(f"unknown evaluator.backend {backend!r}; use local, ray or command.")


# Spares kept started for each slot. A GPU slot keeps two: on the H200 a spare needs about 9 s
# from its start to `ready` (torch and triton imports, then the profiler's libraries, 4.5 s of
# it: benchmarks/eval_breakdown.py), while an fp8 attempt takes 4-7 s when racing stops it,
# so with one spare, started as its predecessor was taken, the next attempt often waited for it.
# The CPU slot's pairs skip the profiler and its evaluations are slower: one is enough there.
SPARES = {"gpu": 2, "cpu": 1}


class WarmPairs:
    """Spare judge/runner pairs for each slot, started ahead of need (docs/evaluators.md):
    two for a GPU slot, one for the CPU slot (SPARES).

    A spare is taken by the next evaluation on its slot, which at once has the next one
    started: its Python start, torch and triton imports and device context happen while
    the current candidate is evaluated, off the critical path. A pair is never used for
    a second candidate. A spare started under other settings than the evaluation's
    (another config, another scratch folder) is discarded, not used.

    A spare does its CPU work (Python, torch and triton imports, the profiler's libraries)
    at once, beside anything; its device contexts wait at its gate (child.Pair.open_gate),
    which opens once the pair waits at it (child.Pair.when_at_gate) while no evaluation on
    that device is in its timed loop (`quiet`: the loop's begin and end, from the judge's
    notices), when such a loop ends, or when the spare is taken. A context made
    beside a timed loop would land in its figures; the imports, on other cores, do not stall
    it, and holding them too (SIGSTOP, before) left the spare unready whenever the timed
    loop was most of an evaluation, as under the fresh-input protocols.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._spares: dict = {}  # slot -> deque of Futures of child.Pairs, the oldest first
        self._timing: dict = {}  # device -> how many of its evaluations are in their timed loop
        self._waiting: dict = {}  # child.Pair at its gate, shut while its device times -> that device
        atexit.register(self.close)

    def take(self, slot, config, state_dir: Path, env: dict):
        """The slot's oldest spare if it was started for these settings and is still alive; else
        None. Spares started under other settings are discarded, not kept for later."""
        while True:
            with self._lock:
                queue = self._spares.get(slot)
                future = queue.popleft() if queue else None
            if future is None:
                return None
            try:
                pair = future.result()
            except Exception:  # noqa: BLE001 - the evaluation starts its own pair and meets the same error
                return None
            with self._lock:
                self._waiting.pop(pair, None)  # taken or discarded: no loop's end opens it any more
            if pair.alive() and pair.key == child.start_key(config, env) and pair.scratch.parent == state_dir:
                return pair
            pair.discard()

    def refill(self, slot, config, state_dir: Path, env: dict, device=None):
        """Start pairs for the slot until it has its SPARES, for `device` (their device contexts
        wait while that device times: `quiet`; None or gpus.CPU: the CPU slot).

        From one long-lived thread: the parent-death signal of a child fires when the
        *thread* that started it ends, and a hypothesis thread of `kgit evolve` ends with
        its hypothesis."""
        with self._lock:
            queue = self._spares.setdefault(slot, deque())
            wanted = SPARES["cpu" if device is None or device == gpus.CPU else "gpu"]
            started = [_spawner().submit(child.Pair.ahead, config, state_dir, env)
                       for _ in range(wanted - len(queue))]
            queue.extend(started)
        for future in started:
            # Its gate opens once it waits at it, unless its device is timing then (`_end` opens it).
            future.add_done_callback(lambda f: self._watch_gate(f, device))

    def quiet(self, device) -> Quiet:
        """What an evaluation on `device` tells when its timed loop begins and ends."""
        return Quiet(self, device)

    def _begin(self, device):
        with self._lock:
            self._timing[device] = self._timing.get(device, 0) + 1

    def _end(self, device):
        with self._lock:
            self._timing[device] = self._timing.get(device, 0) - 1
            if self._timing[device] <= 0:
                self._timing.pop(device)
                for pair in [p for p, d in self._waiting.items() if d == device]:
                    del self._waiting[pair]
                    pair.open_gate()

    def _watch_gate(self, future, device):
        if future.exception() is None:
            future.result().when_at_gate(lambda pair: self._reached(pair, device))

    def _reached(self, pair, device):
        # Under the lock, as `_end`: a spare at its gate is never left shut after its device's timing ended.
        with self._lock:
            if self._timing.get(device):
                self._waiting[pair] = device
            else:
                pair.open_gate()

    def close(self):
        """End every spare (kgit exiting, or the evaluator no longer needed)."""
        with self._lock:
            spares, self._spares = [f for queue in self._spares.values() for f in queue], {}
        for future in spares:
            _discard(future)


class Quiet:
    """One evaluation's timed loop, as its judge reports it: `begin` and `end` (the second
    `end` of an evaluation does nothing, so an evaluation that ends mid-loop still ends it)."""

    def __init__(self, pairs: WarmPairs, device):
        self.pairs, self.device, self.timing = pairs, device, False

    def begin(self):
        if not self.timing:
            self.timing = True
            self.pairs._begin(self.device)

    def end(self):
        if self.timing:
            self.timing = False
            self.pairs._end(self.device)


def _discard(future):
    try:
        future.result().discard()
    except Exception:  # noqa: BLE001 - a spare that failed to start holds nothing
        pass


_SPAWNER = None
_SPAWNER_LOCK = threading.Lock()


def _spawner():
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgit-warm-start")
        return _SPAWNER


class LocalEvaluator:
    """Harness children on this host, at most one per GPU at a time."""

    # Accepts `race=` (an incumbent to race against; harness/racing.py) and `watch=` (told each
    # stage of the evaluation, for a progress line).
    races = True
    watches = True

    def __init__(self, repo, config, host: gpus.Host | None = None, board: gpus.Board = gpus.BOARD,
                 warm: bool = False):
        self.repo, self.config, self.board = repo, config, board
        self.host = host or gpus.discover()
        self.devices = gpus.select(self.host, config.evaluator.devices)
        # Spare pairs only where more evaluations follow (`kgit evolve`): for one evaluation
        # a spare would only compete with it for the CPU and then be thrown away.
        self.warm = WarmPairs() if warm and config.evaluator.warm else None

    def close(self):
        if self.warm is not None:
            self.warm.close()

    @property
    def slots(self) -> int:
        return len(self.devices) * self.config.evaluator.per_gpu

    def _keys(self) -> list[tuple]:
        """The slots in the order an evaluation asks the board for them."""
        return [("local", d or gpus.CPU, k) for k in range(self.config.evaluator.per_gpu) for d in self.devices]

    def _pinned(self, key) -> tuple[str | None, dict]:
        """(the slot's GPU, None for the CPU slot; the environment that pins an evaluation to it).
        A spare is taken only by an evaluation whose environment is its own (WarmPairs.take)."""
        device = None if key[1] == gpus.CPU else key[1]
        return device, gpus.pin_env(self.host, device)

    @property
    def _scratch(self) -> Path:
        return self.repo.state / "scratch"

    def prestart(self, jobs: int = 1) -> None:
        """Start the spares of the slots the first `jobs` evaluations take (nothing without
        warm pairs). `kgit evolve` calls it before its first model call: otherwise the run's
        first attempt started its own pair (on the H200, 16.7 s for an fp8 attempt; the others,
        with a spare ready, took 3.9-8.6 s) and the spare it started then was not ready for the second."""
        if self.warm is None:
            return
        for key in self._keys()[:max(1, jobs)]:
            self.warm.refill(key, self.config, self._scratch, self._pinned(key)[1], device=key[1])

    def __call__(self, sha: str, race: dict | None = None, watch=None) -> dict:
        if watch is not None:
            watch("waiting for a free " + ("GPU" if any(self.devices) else "CPU slot"))
        key = self.board.acquire(self._keys())
        if watch is not None:
            watch("start")
        device, env = self._pinned(key)
        try:
            # A GPU is held host-wide, across kgit processes; the CPU slot only within this one.
            with gpus.host_slot(key) if device is not None else contextlib.nullcontext():
                with self.repo.checkout_copy(sha) as path:
                    pair = quiet = None
                    if self.warm is not None:
                        pair = self.warm.take(key, self.config, self._scratch, env)
                        self.warm.refill(key, self.config, self._scratch, env, device=key[1])
                        quiet = self.warm.quiet(key[1])
                    given: dict[str, Any] = {k: v for k, v in (("race", race), ("pair", pair), ("quiet", quiet), ("watch", watch))
                             if v is not None}
                    doc = self.run(path, env, **given)
        finally:
            self.board.release(key)
        doc["worker"] = {**this_host(), "device": device or gpus.CPU, "env": env}
        return doc

    def run(self, path: Path, env: dict, race: dict | None = None, pair=None, quiet=None, watch=None) -> dict:
        return child.evaluate_tree(path, self.config, state_dir=self._scratch, devices_env=env,
                                      race=race, pair=pair, quiet=quiet, watch=watch)


def this_host() -> dict:
    """The `worker` of an evaluation by the local harness of this process's host."""
    return {"backend": "local", "host": socket.gethostname()}


class CommandEvaluator:
    """Runs `evaluator.command` on a candidate folder and reads the result it leaves.

    Placeholders: {candidate} (the folder), {result} (a file the command may write the
    JSON result into; otherwise its stdout is read), {device} (one entry of
    `evaluator.devices`, so a many-GPU remote box runs one command per GPU), {sha}.
    The command's stdin carries the same folder as a tar archive and then stays open
    until kgit stops waiting, so `ssh BOX kgit eval-candidate -` needs no copy of its own
    and ends when kgit gives up or dies (candidate.evaluate_stream). A result counts only
    when it echoes the nonce and digest of the folder sent (candidate.check_answer).
    """

    def __init__(self, repo, config, board: gpus.Board = gpus.BOARD):
        self.repo, self.config, self.board = repo, config, board
        listed = config.evaluator.devices
        self.devices = [str(d) for d in listed] if isinstance(listed, list) else [""]

    @property
    def slots(self) -> int:
        return len(self.devices)

    def __call__(self, sha: str) -> dict:
        key = self.board.acquire([("command", self.config.evaluator.command, d) for d in self.devices])
        try:
            with self.repo.checkout_copy(sha) as path:
                doc = self.run(path, sha, key[2])
        finally:
            self.board.release(key)
        return doc

    def run(self, tree: Path, sha: str, device: str) -> dict:
        ev = self.config.evaluator
        self.repo.state.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="cmd-", dir=self.repo.state))
        keep = False
        try:
            folder = candidate.stage(tree, self.config, scratch / "candidate", sha)
            sent = candidate.read_manifest(folder)
            result_path = scratch / "result.json"
            command = render(ev.command, candidate=folder, result=result_path, device=device, sha=sha)
            started = time.monotonic()
            # From the repository root, so relative commands (./mi300-eval.sh) work as documented.
            code, out, err, timed_out = run_command(command, self.repo.root, command_env(ev.pass_env), ev.timeout_s,
                                                    send=candidate.send_bytes(folder))
            elapsed = round(time.monotonic() - started, 3)
            worker = {"backend": "command", "host": None, "device": device or None, "exit_code": code,
                      "wall_s": elapsed}
            if timed_out:
                # The command may see credentials (evaluator.pass_env); its output goes into
                # commits and prompts, so known secret values are masked.
                doc = result_mod.new("timeout", error=f"the evaluator command gave no result within "
                                     f"{ev.timeout_s:g} s and was killed.\n" + redact(err[-2000:]))
                doc["eval_s"] = elapsed
            else:
                try:
                    doc = parse_result(result_path, out, err, code, command, folder, sha)
                except EvaluatorError:
                    keep = True  # the message tells how to run the command by hand on it
                    raise
                wrong = candidate.check_answer(doc, sent)
                if wrong:
                    keep = True
                    raise EvaluatorError(f"the evaluator command's result was refused: {wrong} Nothing was "
                                         f"recorded from it. {_by_hand(folder, command)}")
                doc.pop("candidate", None)
                # The host the remote harness ran on, as its `kgit eval-candidate` names it.
                remote = doc.get("worker") if isinstance(doc.get("worker"), dict) else {}
                worker["host"] = remote.get("host") if isinstance(remote.get("host"), str) else None
            doc.setdefault("stdout", redact(out[-ev.max_output_bytes:]))
            doc.setdefault("stderr", redact(err[-ev.max_output_bytes:]))
            doc["worker"] = worker
            return redact_result(doc)
        finally:
            if not keep:
                remove_tree(scratch)


def render(template: str, **values) -> str:
    """The command line with each placeholder replaced by its shell-quoted value."""
    out = template
    for name, value in values.items():
        out = out.replace("{" + name + "}", shlex.quote(str(value)))
    return out


def command_env(pass_env: list) -> dict:
    """The command's environment: the harness's allowlist, the user's home (ssh reads its
    keys and known hosts there), and only the extra variables `evaluator.pass_env` names."""
    env = secrets.allowed_env()
    for name in ("HOME", "USER", "LOGNAME", "SHELL", "TERM"):
        if name in os.environ:
            env[name] = os.environ[name]
    for name in pass_env:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def run_command(command: str, cwd: Path, env: dict, timeout: float,
                send: bytes = b"") -> tuple[int | None, str, str, bool]:
    """(exit code, stdout, stderr, timed out) of a shell command; its whole process group dies on timeout.

    Its stdin gets `send`, and then stays open until the command ends or is killed: the
    command's lifeline. Only kgit holds the other end (the pipe is not inherited by any
    other child), so it closes when kgit stops waiting, and when kgit dies, kill -9
    included; `ssh` carries that end of file to the remote command.
    """
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, env=env, stdin=read_end,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    done = threading.Event()
    threading.Thread(target=_hold_stdin, args=(write_end, send, done), name="kgit-command-stdin",
                     daemon=True).start()
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            out, err = proc.communicate()
            timed_out = True
    finally:
        done.set()
    decode = lambda b: (b or b"").decode("utf-8", errors="replace")  # noqa: E731
    return proc.returncode, decode(out), decode(err), timed_out


def _hold_stdin(fd: int, data: bytes, done: threading.Event):
    """Write `data` to the command's stdin and keep it open until `done`.

    In a thread of its own: a command that never reads its stdin leaves the write blocked
    on a full pipe until it exits (then the write fails, as it should)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass  # the command has gone, or closed its stdin: it did not want the archive
    finally:
        done.wait()
        os.close(fd)


def parse_result(result_path: Path, stdout: str, stderr: str, code: int | None, command: str,
                 folder: Path | None = None, sha: str | None = None) -> dict:
    """The result document from the result file, else from stdout; EvaluatorError if neither holds one."""
    sources = []
    if result_path.exists() and result_path.stat().st_size:
        sources.append(("the {result} file", result_path.read_text(encoding="utf-8", errors="replace")))
    sources.append(("stdout", stdout))
    problems, schemas = [], set()
    for where, text in sources:
        for candidate_text in _json_candidates(text):
            try:
                doc = json.loads(candidate_text)
            except json.JSONDecodeError:
                continue
            try:
                return result_mod.validate(doc)
            except ValueError as e:
                if isinstance(doc, dict) and isinstance(doc.get("schema"), str) and doc["schema"].startswith("kgit."):
                    schemas.add(doc["schema"])
                problem = f"{where}: {e}"
                if problem not in problems:  # the whole text and its last line are often the same object
                    problems.append(problem)
    detail = "; ".join(problems) or "no JSON object found in the {result} file or on stdout"
    versions = ""
    if schemas - {result_mod.SCHEMA}:
        versions = (f" The remote side speaks {', '.join(sorted(schemas))} and this kgit ({__version__}) reads "
                    f"{result_mod.SCHEMA}: install the same kgit version on both machines.")
    how = _by_hand(folder, command) if folder is not None else f"Run it by hand to see why: {command}"
    raise EvaluatorError(f"the evaluator command (exit code {code}) returned no kgit result for "
                         f"{(sha or 'the candidate')[:10]} ({detail}).{versions} {how}\n"
                         f"Its stderr ended with:\n{stderr[-1500:]}")


def _by_hand(folder: Path, command: str) -> str:
    """How to run the failed command again, on the candidate folder kept for it."""
    return (f"Run it by hand from the repository's top folder to see why (the candidate folder is kept for that; "
            f"remove {shlex.quote(str(folder.parent))} when done):\n  tar -C {shlex.quote(str(folder))} -cf - . | "
            f"{command}")


def _json_candidates(text: str):
    """The whole text, then each line that looks like a JSON object, last first (banners come first)."""
    text = text.strip()
    if text:
        yield text
    for line in reversed(text.splitlines()):
        if line.strip().startswith("{"):
            yield line.strip()


class RayEvaluator:
    """One Ray task per evaluation, `num_gpus=1`; the cluster picks the node and the GPU."""

    _lock = threading.Lock()
    _limits: dict = {}

    def __init__(self, repo, config):
        self.repo, self.config = repo, config
        self.ray = import_ray()
        if not self.ray.is_initialized():
            address = config.evaluator.address
            try:
                self.ray.init(address=None if address == "local" else address, log_to_driver=False)
            except ConnectionError as e:
                raise EvaluatorError(f"cannot reach a Ray cluster at evaluator.address={address!r} ({e}). "
                                     "Start one with `ray start --head`, or set the address to ray://HOST:10001, "
                                     "or \"local\" to start a private one on this host.") from None
        gpu_count = int(self.ray.cluster_resources().get("GPU", 0))
        if gpu_count < 1:
            raise EvaluatorError("the Ray cluster has no GPUs, so no task with num_gpus=1 could ever run. "
                                 "Start the workers on GPU nodes (`ray start --address=HEAD:6379`), or use "
                                 "evaluator.backend: local.")
        with self._lock:
            # One limit per process: tasks beyond the cluster's GPUs would only wait in Ray's
            # queue, where a timeout could not tell waiting from hanging.
            self.limit = self._limits.setdefault((config.evaluator.address, gpu_count),
                                                 threading.BoundedSemaphore(gpu_count))
        self.slots = gpu_count
        self.task = self.ray.remote(num_gpus=1, max_retries=0)(evaluate_packed)

    def __call__(self, sha: str) -> dict:
        with self.limit:
            with self.repo.checkout_copy(sha) as path:
                self.repo.state.mkdir(parents=True, exist_ok=True)
                scratch = Path(tempfile.mkdtemp(prefix="ray-", dir=self.repo.state))
                try:
                    folder = candidate.stage(path, self.config, scratch / "candidate", sha)
                    sent, files = candidate.read_manifest(folder), candidate.pack(folder)
                finally:
                    remove_tree(scratch)
            ref = self.task.remote(files)
            # Startup, scheduling and transfers on top of the harness's own limit.
            try:
                doc = self.ray.get(ref, timeout=self.config.evaluator.timeout_s + 300)
                wrong = candidate.check_answer(doc, sent)
                if wrong:
                    raise EvaluatorError(f"the Ray task's result was refused: {wrong}")
                doc.pop("candidate", None)
                return redact_result(doc)
            except self.ray.exceptions.GetTimeoutError:
                self.ray.cancel(ref, force=True)
                doc = result_mod.new("timeout", error="the Ray task returned nothing in time and was cancelled.")
            except self.ray.exceptions.RayError as e:
                raise EvaluatorError(f"the Ray task failed outside the harness ({type(e).__name__}: "
                                     f"{str(e)[:1500]}). Check `ray status` and the worker logs.") from None
            doc["worker"] = {"backend": "ray"}
            return doc


def evaluate_packed(files: dict) -> dict:
    """Runs inside a Ray worker: unpack the candidate, evaluate it, say where it ran."""
    folder = Path(tempfile.mkdtemp(prefix="kgit-ray-"))
    # On AMD nodes Ray pins the task with HIP_VISIBLE_DEVICES; a CUDA_VISIBLE_DEVICES left
    # in the node's environment would be read as a second, conflicting alias.
    hip = os.environ.get("HIP_VISIBLE_DEVICES")
    try:
        doc = candidate.evaluate_folder(candidate.unpack(files, folder / "candidate"),
                                        {"CUDA_VISIBLE_DEVICES": hip} if hip else None)
    finally:
        remove_tree(folder)
    pins = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES") if k in os.environ}
    doc["worker"] = {"backend": "ray", "host": socket.gethostname(), "env": pins}
    return doc


def import_ray():
    """Ray, imported only for the ray backend, after making AMD visibility variables acceptable to it."""
    os.environ.update(gpus.ray_safe_env(os.environ))
    if "ROCR_VISIBLE_DEVICES" in os.environ:
        del os.environ["ROCR_VISIBLE_DEVICES"]
    try:
        import ray
    except ImportError:
        raise KgitError("evaluator.backend is \"ray\" but Ray is not installed: `pip install 'kgit[ray]'` "
                        "(on the driver and on every node of the cluster).") from None
    return ray
