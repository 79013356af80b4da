"""Warm evaluators: judge/runner pairs started ahead of their candidate (docs/evaluators.md).

A spare pair per slot, used once, confined as a cold one, and dead with kgit however
kgit dies.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import fast_config_text, git

from kgit import config as config_mod
from kgit.archive.repo import BASELINE_TAG, Repo
from kgit.evaluation import backends, child, gpus

CPU_HOST = gpus.Host(None, ())


def _config(**evaluator) -> config_mod.Config:
    return config_mod.parse(fast_config_text(evaluator=evaluator))


def _spare(pool: backends.WarmPairs, slot, index: int = 0):
    """The slot's spare `index` (0: the oldest, the one the next evaluation takes)."""
    return pool._spares[slot][index].result(timeout=60)


@pytest.mark.slow
def test_a_warm_evaluator_uses_each_spare_once_and_starts_the_next(kernel_repo):
    repo = Repo(kernel_repo)
    evaluator = backends.LocalEvaluator(repo, _config(), host=CPU_HOST, warm=True)
    sha = repo.rev(BASELINE_TAG)
    try:
        first = evaluator(sha)  # no spare yet: a pair started for it, and the next one started
        assert first["status"] == "ok", first.get("error")
        slot = next(iter(evaluator.warm._spares))
        spare = _spare(evaluator.warm, slot)
        assert spare.alive() and not spare.used
        second = evaluator(sha)
        assert second["status"] == "ok", second.get("error")
        # The spare was the pair that evaluated: used, ended, its scratch gone; a fresh one waits.
        assert spare.used and spare.proc.poll() is not None and not spare.scratch.exists()
        following = _spare(evaluator.warm, slot)
        assert following is not spare and following.alive()
        # The candidate arrived after the pair's own start: its marks come before the arrival.
        judge = second["phases"]["judge"]
        assert judge["judge up"] < judge["candidate arrived"]
    finally:
        evaluator.close()
    assert not following.alive() and not following.scratch.exists()


def _notices_until(pair: child.Pair, wanted: str, timeout: float = 120.0) -> list[str]:
    """The judge's stage marks read from the pair's notice pipe until `wanted` (kgit reads the
    rest of them when the pair is taken)."""
    seen: list[str] = []
    buffered = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {wanted!r} from the spare's judge; it said {seen}"
        ready, _, _ = select.select([pair.notice_r], [], [], left)
        if ready:
            chunk = os.read(pair.notice_r, 4096)
            assert chunk, f"the spare's judge ended before {wanted!r}; it said {seen}"
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            seen += [line.decode() for line in lines]
    return seen


@pytest.mark.parametrize("loop_begins", ["before the spare starts", "while it imports"])
@pytest.mark.slow
def test_a_spare_imports_beside_a_timed_loop_and_makes_its_device_context_only_after_it(kernel_repo, loop_begins):
    """A spare does its imports at once and waits at its gate before the device context while
    its device times; the loop's end opens the gate, and the spare then evaluates the next
    candidate as usual (its runner's device context after the judge's gate, too). "while it
    imports" is `kgit evolve`'s case: the next spare starts as an evaluation takes its pair,
    and that evaluation's loop begins before the spare's imports end."""
    repo = Repo(kernel_repo)
    config = _config()
    pool = backends.WarmPairs()
    loop = pool.quiet(gpus.CPU)
    try:
        if loop_begins == "before the spare starts":
            loop.begin()  # an evaluation on the same device is in its timed loop
        pool.refill(0, config, repo.state / "scratch", {}, device=gpus.CPU)
        spare = _spare(pool, 0)
        if loop_begins == "while it imports":
            loop.begin()
        deadline = time.monotonic() + 120
        while spare not in pool._waiting:  # its judge said `at gate`: imports done, the gate shut
            assert time.monotonic() < deadline and spare.proc.poll() is None, "the spare never reached its gate"
            time.sleep(0.05)
        time.sleep(1.0)  # shut while the loop runs, however long that is
        ended = time.monotonic()
        loop.end()
        taken = pool.take(0, config, repo.state / "scratch", {})
        assert taken is spare
        with repo.checkout_copy(repo.rev(BASELINE_TAG)) as path:
            doc = child.evaluate_tree(path, config, state_dir=repo.state / "scratch", pair=taken)
        assert doc["status"] == "ok", doc.get("error")
        judge, runner = doc["phases"]["judge"], doc["phases"]["runner"]
        opened = ended - spare.spawned_at
        assert judge["imports done"] <= judge["at gate"] < opened <= judge["gate opened"] <= judge["device ready"]
        assert runner["runner torch imported"] < opened <= runner["runner gate opened"] <= runner["runner device ready"]
    finally:
        loop.end()
        pool.close()


def test_a_spare_started_under_other_settings_is_not_used(kernel_repo):
    repo = Repo(kernel_repo)
    pool = backends.WarmPairs()
    state = repo.state / "scratch"
    try:
        pool.refill("slot", _config(timeout_s=100), state, {})
        spare = _spare(pool, "slot")
        assert pool.take("slot", _config(timeout_s=200), state, {}) is None
        assert not spare.alive()  # discarded, not kept for later
        pool.refill("slot", _config(), state, {})
        assert pool.take("slot", _config(), state, {"CUDA_VISIBLE_DEVICES": "1"}) is None
    finally:
        pool.close()


def test_a_gpu_slot_keeps_two_spares_and_its_next_evaluation_takes_the_older(kernel_repo):
    """A spare needs longer to be ready than a stopped attempt takes; the second spare has
    had two evaluations' time when its turn comes. The CPU slot keeps one."""
    repo = Repo(kernel_repo)
    pool = backends.WarmPairs()
    state, config = repo.state / "scratch", _config()
    older = newer = None
    try:
        pool.refill("gpu", config, state, {}, device="0")
        older, newer = _spare(pool, "gpu", 0), _spare(pool, "gpu", 1)
        assert older is not newer and older.spawned_at <= newer.spawned_at
        assert pool.take("gpu", config, state, {}) is older
        pool.refill("gpu", config, state, {}, device="0")  # as the evaluation that took it does
        assert len(pool._spares["gpu"]) == backends.SPARES["gpu"] == 2
        assert _spare(pool, "gpu", 0) is newer and _spare(pool, "gpu", 1) not in (older, newer)
        pool.refill("cpu", config, state, {}, device=gpus.CPU)
        pool.refill("cpu", config, state, {}, device=gpus.CPU)  # already full: starts nothing
        assert len(pool._spares["cpu"]) == backends.SPARES["cpu"] == 1
        # Settings changed (a new .kgit.yaml): every spare of the old ones is discarded, none used.
        stale = [_spare(pool, "gpu", 0), _spare(pool, "gpu", 1)]
        assert pool.take("gpu", _config(timeout_s=123), state, {}) is None
        assert not any(pair.alive() for pair in stale) and not pool._spares["gpu"]
    finally:
        pool.close()
        if older is not None:
            older.discard()
    assert newer is not None and not newer.alive()


@pytest.mark.slow
def test_prestart_readies_the_first_evaluations_spare_before_it_is_asked_for(kernel_repo):
    repo = Repo(kernel_repo)
    evaluator = backends.LocalEvaluator(repo, _config(), host=CPU_HOST, warm=True)
    cold = backends.LocalEvaluator(repo, _config(), host=CPU_HOST, warm=False)
    sha = repo.rev(BASELINE_TAG)
    try:
        cold.prestart(4)  # no warm pairs: nothing to start
        evaluator.prestart(4)  # one CPU slot: one spare, however many jobs
        assert list(evaluator.warm._spares) == [("local", gpus.CPU, 0)]
        spare = _spare(evaluator.warm, ("local", gpus.CPU, 0))
        first = evaluator(sha)
        assert first["status"] == "ok", first.get("error")
        assert spare.used  # the first evaluation took it rather than starting a pair of its own
        judge = first["phases"]["judge"]
        assert judge["judge up"] < judge["candidate arrived"]
        # kgit's sending on the judge's clock: the judge reads the candidate no earlier than that.
        assert 0 < first["phases"]["kgit"]["candidate sent"] <= judge["candidate arrived"]
    finally:
        evaluator.close()
    assert not spare.alive()


@pytest.mark.slow
def test_a_runner_started_before_its_candidate_is_confined_as_a_cold_one(kernel_repo):
    """The candidate's folder was bound into the runner's view while still empty: the files
    kgit copied in later are seen, read-only, and the problem folder copied beside them
    after the runner confined itself is not seen at all."""
    from kgit.evaluation import sandbox

    if not sandbox.probe()[0]:
        pytest.skip("no user namespaces on this host: the runner's private view is not built")
    kernel = kernel_repo / "kernel.py"
    probe = textwrap.dedent("""
        import pathlib as _p
        _here = _p.Path(__file__).resolve().parent
        _seen = (_here.parent / "problem" / "reference.py").exists()
        try:
            (_here / "planted.py").write_text("x = 1")
            _wrote = True
        except OSError:
            _wrote = False
        if _seen or _wrote:
            raise RuntimeError(f"problem seen: {_seen}, candidate folder written: {_wrote}")
    """)
    kernel.write_text(probe + kernel.read_text(encoding="utf-8"), encoding="utf-8")
    git(kernel_repo, "commit", "-q", "-am", "kernel probes its view")
    repo = Repo(kernel_repo)
    config = _config()
    state = repo.state / "scratch"
    pair = child.Pair.ahead(config, state)
    time.sleep(1.0)  # the runner confines itself before the files exist
    doc = child.evaluate_tree(kernel_repo, config, state_dir=state, pair=pair)
    assert doc["status"] == "ok", doc.get("error")
    assert any("hidden" in a or "tmpfs" in a for a in doc["sandbox"]["applied"])


DRIVER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from kgit import config as config_mod
    from kgit.evaluation import backends
    root, sandbox, slots, hold = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "hold"
    config = config_mod.load(root)
    config.evaluator.sandbox = sandbox
    pool = backends.WarmPairs()
    if hold:  # as if an evaluation on the same device were in its timed loop: the spares wait at their gates
        pool.quiet("cpu").begin()
    for slot in range(slots):
        pool.refill(slot, config, root / ".git" / "kgit" / "scratch", {}, device="cpu")
    for slot in range(slots):
        print(pool._spares[slot][0].result().proc.pid, flush=True)
    if hold:
        for slot in range(slots):  # each judge and runner at its gate (`at gate`), the gate still shut
            while pool._spares[slot][0].result() not in pool._waiting:
                time.sleep(0.05)
        print("gated", flush=True)
    time.sleep(600)
""")


def _state(pid: int) -> str:
    """The process state letter of /proc/PID/stat ("T": stopped), or "" when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2:].split()[0]


def _process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, start time, command line) of every live process visible here."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z":
            continue  # exited, only not yet reaped: nothing of it runs
        table[int(entry.name)] = (int(fields[1]), fields[19], cmdline)
    return table


def _descendants(root: int, table: dict) -> dict[int, tuple[str, str]]:
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, started, cmdline) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = (started, cmdline)
                frontier.append(pid)
    return found


@pytest.mark.parametrize("sandbox,hold", [("auto", "run"), ("off", "run"), ("auto", "hold"), ("off", "hold")])
@pytest.mark.slow
def test_warm_pairs_die_with_kgit_killed_by_sigkill(kernel_repo, sandbox, hold):
    """kill -9 of a kgit holding spare pairs: no process of theirs is left, also when they wait
    at their gates (another evaluation on their device in its timed loop)."""
    if sys.platform != "linux":
        pytest.skip("process tables are read from /proc")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(kernel_repo), sandbox, "2", hold],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        judges = [int(driver.stdout.readline()) for _ in range(2)]
        # Until each judge has its runner: the whole tree of both pairs is then there to be seen.
        deadline = time.monotonic() + 240
        while True:
            family = _descendants(driver.pid, _process_table())
            runners = [pid for pid, (_, cmd) in family.items() if "kgit_harness runner" in cmd
                       and "pidone" not in cmd and "unshare" not in cmd]
            if len(runners) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert set(judges) <= set(family) and len(runners) >= 2, family
        if hold == "hold":
            assert driver.stdout.readline().strip() == "gated"
            assert all(_state(pid) not in ("T", "") for pid in judges + runners)
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    deadline = time.monotonic() + 60
    while True:
        table = _process_table()
        left = {pid: cmd for pid, (started, cmd) in family.items() if pid in table and table[pid][1] == started}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, f"processes of the warm pairs outlived kgit: {json.dumps(left, indent=1)}"


# -- slots stay busy ----------------------------------------------------------------------
class TwoSlots:
    """Stands in for a two-GPU pool: two evaluations at once; the first candidate is slow.

    The slow one returns only once the other slot has evaluated three more candidates
    (or after a minute, so a scheduler that idles the free slot fails instead of hanging).
    """

    def __init__(self, baseline):
        import threading

        self.baseline, self.slots = baseline, threading.BoundedSemaphore(2)
        self.lock, self.others_done, self.calls = threading.Lock(), threading.Event(), 0
        self.finished_while_slow = 0
        self.released_by_others = None

    def __call__(self, sha):
        with self.slots:
            with self.lock:
                self.calls += 1
                slow = self.calls == 1
            if slow:
                self.released_by_others = self.others_done.wait(60)
            else:
                with self.lock:
                    self.finished_while_slow += 1
                    if self.finished_while_slow >= 3:
                        self.others_done.set()
            b = self.baseline
            return {"schema": "kgit.result/1", "status": "ok", "device": b.device, "timing": b.timing,
                    "harness": b.harness, "ranking": "mean",
                    "eval_s": 0.1, "geomean_us": b.geomean_us, "shapes": [{"key": k, "mean_us": v} for k, v in b.times.items()]}


def test_one_slow_candidate_does_not_idle_the_other_slot(kernel_repo):
    """evolve.jobs = 2 on two slots: while the first iteration's slow candidate holds one slot,
    the next iterations are designed and evaluated on the other."""
    from kgit import evolve, workflow

    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"knowledge": [], "pick": 2, "attempts": 1,
                                                                      "jobs": 2, "race": False}))
    repo, config = workflow.load(kernel_repo)
    config = evolve.with_overrides(config, iterations=3)
    slots = TwoSlots(repo.read()[0])
    summary = evolve.evolve(repo, config, evaluate=slots)
    assert slots.released_by_others is True, "the free slot sat idle while the slow candidate ran"
    assert len(summary.rows) == 6 and summary.iterations == 3
