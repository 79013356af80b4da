"""Timing protocols (harness/protocols.py, harness/upstream_timing.py): each times a shape the
way its evaluator does; under the fresh ones no call is handed an object or address twice."""

from __future__ import annotations

import json

import pytest
import yaml
from cheats import baseline, run_harness

from kgit_harness import problem, protocols, upstream_timing

# Every call's input tuple as the kernel sees it: the tuple's id(), its tensors' id()s and
# their storage addresses, printed for the test to read.
_PROBE = '''

_honest = custom_kernel


def custom_kernel(data):
    print("KGIT-SEEN", data[0].numel(), json.dumps([id(data)] + [id(t) for t in data] + [t.data_ptr() for t in data]),
          flush=True)
    return _honest(data)
'''


# Also, on a GPU: the bytes the runner's caching allocator holds free when the call starts.
_FREE = '''

_seen_call = custom_kernel


def custom_kernel(data):
    print("KGIT-FREE", data[0].numel(), torch.cuda.memory_reserved() - torch.cuda.memory_allocated(), flush=True)
    return _seen_call(data)
'''


def _probe_code(free: bool = False) -> str:
    return "import json\nimport torch\n" + baseline("vector_add") + _PROBE + (_FREE if free else "")


def _seen(out: str, sizes: bool = False) -> list[tuple]:
    """Each call's (tuple id, tensor ids, addresses) in the probe's output `out`; with `sizes`,
    (its size, that)."""
    calls = []
    for line in out.splitlines():
        if line.startswith("KGIT-SEEN "):
            _, size, values = line.split(" ", 2)
            calls.append((int(size), tuple(json.loads(values))) if sizes else tuple(json.loads(values)))
    return calls


@pytest.mark.parametrize("name", ["gpumode-leaderboard-wall", "gpumode-leaderboard-events"])
@pytest.mark.slow
def test_under_a_fresh_protocol_no_call_is_handed_an_object_or_address_twice(tmp_path, capfd, name):
    doc = run_harness(tmp_path, problem="vector_add", code=_probe_code(), protocol=name, computed_names=False)
    assert doc["status"] == "ok" and doc["protocol"] == name, doc.get("error")
    assert doc["harness"].endswith(f"protocol {name}")
    calls = _seen(capfd.readouterr().out)
    checks = 2 * len(problem.load_task(problem.shipped()["vector_add"]).shapes("tests", False))
    timed = sum(s["n"] for s in doc["shapes"])
    assert len(calls) == checks + len(doc["shapes"]) + timed  # the checks, each shape's first check, the timed calls
    # The checks call a test shape's slot twice (published and secret seed); after them every
    # call, timed or not, gets an object and an address no earlier call was handed.
    for i in range(checks, len(calls)):
        earlier = {value for call in calls[:i] for value in call}
        assert not earlier & set(calls[i]), (i, calls[i])
    assert all(s["rechecked"] == s["n"] for s in doc["shapes"])  # every timed output checked


@pytest.mark.slow
def test_a_shape_whose_calls_outrun_one_arena_gets_another_at_new_addresses(tmp_path, capfd, monkeypatch):
    # Arenas are made as the calls need them (upstream_timing._FreshArenas): two timed slots
    # each here, so every shape's ten calls span five arenas, all alive until the shape ends.
    monkeypatch.setattr(upstream_timing, "FRESH_CHUNK", 2)
    grow = upstream_timing._FreshArenas.grow

    def counted(self, calls, least):  # in the judge, a fork of this process: said on its stdout
        print("KGIT-ARENA", calls, flush=True)
        return grow(self, calls, least)

    monkeypatch.setattr(upstream_timing._FreshArenas, "grow", counted)
    doc = run_harness(tmp_path, problem="vector_add", code=_probe_code(), protocol="gpumode-leaderboard-wall",
                      computed_names=False, timing={"target_rse": 0.5, "max_time_s": 0.0, "min_reps": 10, "warmup": 0})
    assert doc["status"] == "ok", doc.get("error")
    assert all(s["n"] == 10 and s["rechecked"] == 10 and "note" not in s for s in doc["shapes"])
    out = capfd.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("KGIT-ARENA")] == ["KGIT-ARENA 2"] * 5 * len(
        doc["shapes"])
    calls = _seen(out, sizes=True)
    for shape in doc["shapes"]:
        # The shape's first check and its ten timed calls: eleven addresses, none handed out twice.
        mine = [call for size, call in calls if size == shape["shape"]["size"]]
        addresses = [call[-2:] for call in mine[-11:]]
        assert len(set(addresses)) == 11, (shape["key"], addresses)


def test_a_shapes_arenas_all_stay_alive_until_the_shape_ends():
    # A GPU allocator hands a freed arena's addresses to the next one: were the first arena let
    # go when the second is made, the third could lie where it did, and a kernel keeping a graph
    # per input address would replay it there.
    from types import SimpleNamespace

    events, sized = [], []
    ctx = SimpleNamespace(on_gpu=True, free_bytes=lambda: 1 << 40, slot_bytes=lambda first: sized.append(first) or 1 << 20,
                          new_slots=lambda first, count: events.append(("made", count)) or f"arena {len(events)}",
                          retire=lambda slots: events.append(("retired", slots)))
    arenas = upstream_timing._FreshArenas(ctx, object(), device=5)
    arenas.grow(32, 3)
    assert arenas.timed == list(range(1, 33)) and arenas.device == list(range(33, 38))
    arenas.grow(7, 1)
    assert arenas.timed == list(range(1, 8)) and arenas.device == list(range(8, 13))
    assert events == [("made", 38), ("made", 13)]
    assert len(sized) == 1  # a slot's size is the shape's: asked once, not again for each arena
    arenas.retire()
    assert events[2:] == [("retired", "arena 1"), ("retired", "arena 2")]
    # Short of memory even for one more call: NoRoom, which the loop turns into the shape's note.
    ctx.free_bytes = lambda: 4 << 20
    with pytest.raises(upstream_timing.NoRoom):
        arenas.grow(32, 1)


def test_the_judge_runs_the_reference_for_a_shapes_output_layout_once():
    """A problem without `output:` sizes its output buffer by the reference's output on the shape's
    first input (judge.output_like); asking the slot's size again reads what was computed."""
    from types import SimpleNamespace

    import torch

    from kgit_harness import judge

    runs = []
    ctx = judge.TimingContext.__new__(judge.TimingContext)
    ctx.torch, ctx.task, ctx._likes = torch, SimpleNamespace(output=None), {}
    ctx.reference = SimpleNamespace(ref_kernel=lambda data: runs.append(1) or torch.cat([data[0], data[0]]))
    sample = (torch.ones(4),)
    assert ctx.slot_bytes(sample) == ctx.slot_bytes(sample) >= 3 * 4 * 4 and len(runs) == 1


def test_a_shapes_arenas_together_stay_within_the_memory_one_shape_may_take():
    from types import SimpleNamespace

    ctx = SimpleNamespace(on_gpu=True, free_bytes=lambda: 1 << 40, slot_bytes=lambda first: 1 << 30,
                          new_slots=lambda first, count: count, retire=lambda slots: None)
    arenas = upstream_timing._FreshArenas(ctx, object(), device=5)
    arenas.grow(8, 3)  # 14 of the 16 GiB a GPU shape may take
    assert arenas.slots == 14 and len(arenas.timed) == 8
    arenas.grow(8, 1)  # the 2 GiB left: one timed call and no device figure
    assert arenas.slots == 2 and arenas.timed == [1] and arenas.device == []
    with pytest.raises(upstream_timing.NoRoom):
        arenas.grow(8, 1)


@pytest.mark.slow
def test_under_kgits_own_protocol_the_timed_calls_reuse_their_buffers(tmp_path, capfd):
    # The control: kgit-adaptive refills the same slot with new values, as documented.
    doc = run_harness(tmp_path, problem="vector_add", code=_probe_code(), protocol="kgit-adaptive")
    assert doc["status"] == "ok" and doc["protocol"] == "kgit-adaptive"
    calls = _seen(capfd.readouterr().out)
    assert len(set(calls)) < len(calls)


@pytest.mark.parametrize("name", ["gpumode-batch", "kernelbench-events"])
@pytest.mark.slow
def test_the_batch_and_fixed_protocols_time_and_check_on_the_cpu(tmp_path, name):
    doc = run_harness(tmp_path, problem="vector_add", code=baseline("vector_add"), protocol=name)
    assert doc["status"] == "ok" and doc["protocol"] == name, doc.get("error")
    assert all(s["n"] >= 1 and s["mean_us"] > 0 and s["rechecked"] >= 1 for s in doc["shapes"])


@pytest.mark.slow
def test_a_kernel_wrong_on_one_fresh_call_is_caught(tmp_path):
    # Right on every check and on the first timed calls, wrong on the third timed call of a shape.
    code = baseline("vector_add") + '''

_honest = custom_kernel
_calls = [0]


def custom_kernel(data):
    _calls[0] += 1
    out = _honest(data)
    if _calls[0] == 10:
        out.zero_()
    return out
'''
    doc = run_harness(tmp_path, problem="vector_add", code=code, protocol="gpumode-leaderboard-wall",
                      timing={"target_rse": 0.5, "max_time_s": 1.0, "min_reps": 6, "warmup": 0})
    assert doc["status"] == "incorrect" and "gave a wrong result" in doc["error"], doc.get("error")


@pytest.mark.slow
def test_a_shape_whose_fresh_inputs_do_not_fit_is_unsupported_here(tmp_path, monkeypatch):
    monkeypatch.setattr(upstream_timing, "FRESH_BYTES", {True: 1 << 10, False: 1 << 10})
    doc = run_harness(tmp_path, problem="vector_add", code=baseline("vector_add"), protocol="gpumode-leaderboard-wall")
    assert doc["status"] == "unsupported" and "fresh inputs" in doc["reason"], doc.get("error")


@pytest.mark.parametrize("capacity, calls, device", [
    (1 + 100 + 5, 100, [101, 102, 103, 104, 105]),  # all fit
    (85, 79, [80, 81, 82, 83, 84]),  # the H200's 16M vector_add: 84 fresh calls fit, not 105
    (1 + 3 + 2, 5, []),  # too short for both: the timed calls come first
    (1 + 3 + 5, 3, [4, 5, 6, 7, 8]),  # exactly the least calls and the device figure
])
def test_a_short_arena_keeps_the_device_figures_slots_while_the_least_calls_fit(capacity, calls, device):
    # On the H200 a shape cut short by memory lost its device time (device_us None) before.
    got_calls, got_device = upstream_timing.fresh_slots(capacity, wanted=100, device=5, least=3)
    assert (got_calls, got_device) == (calls, device)
    used = [0, *range(1, 1 + got_calls), *got_device]
    assert len(used) == len(set(used)) and max(used) < capacity


def test_the_runner_is_given_the_judges_free_segments_largest_first_within_the_budget():
    from types import SimpleNamespace

    from kgit_harness import timing

    segments = [{"total_size": 2 << 20, "allocated_size": 0}, {"total_size": 20 << 20, "allocated_size": 4096},
                {"total_size": 64 << 20, "allocated_size": 0}, {"total_size": 8 << 20, "allocated_size": 0}]
    fake = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True, memory_snapshot=lambda: segments))
    # Only wholly free segments (what empty_cache gives back); the largest that fit the budget.
    assert timing.free_segments(fake, 1 << 30) == [64 << 20, 8 << 20, 2 << 20]
    assert timing.free_segments(fake, 70 << 20) == [64 << 20, 2 << 20]
    assert timing.free_segments(fake, 1 << 20) == []
    fake.cuda.is_available = lambda: False
    assert timing.free_segments(fake, 1 << 30) == []


def test_task_yml_names_a_known_protocol_and_its_statistic(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    task = {"name": "x", "tests": [{"n": 1}], "benchmarks": [{"n": 1}]}
    (folder / "task.yml").write_text(yaml.safe_dump({**task, "protocol": "gpumode-leaderbord"}))
    with pytest.raises(problem.TaskError, match="unknown timing protocol 'gpumode-leaderbord'"):
        problem.load_task(folder)
    (folder / "task.yml").write_text(yaml.safe_dump({**task, "protocol": "gpumode-leaderboard-wall",
                                                     "ranking": "min"}))
    with pytest.raises(problem.TaskError, match="ranks by its mean"):
        problem.load_task(folder)
    (folder / "task.yml").write_text(yaml.safe_dump(task))
    assert problem.load_task(folder).protocol == protocols.DEFAULT
    assert problem.load_task(problem.shipped()["fp8_blockscale_gemm"]).protocol == "gpumode-leaderboard-wall"


@pytest.mark.gpu
def test_gpu_fresh_wall_protocol_times_every_call_on_new_inputs(tmp_path, capfd):
    import torch

    if not torch.cuda.is_available():
        pytest.fail("gpu tests need a CUDA or ROCm device (deselect them with -m 'not gpu')")
    doc = run_harness(tmp_path, problem="vector_add", code=_probe_code(free=True), protocol="gpumode-leaderboard-wall",
                      computed_names=False)
    assert doc["status"] == "ok", doc.get("error")
    out = capfd.readouterr().out
    calls = _seen(out, sizes=True)
    free: dict[int, list[int]] = {}
    for line in out.splitlines():
        if line.startswith("KGIT-FREE "):
            _, size, held = line.split()
            free.setdefault(int(size), []).append(int(held))
    for shape in doc["shapes"]:
        assert shape["clock"] in ("wall", "judge") and shape["device_us"] > 0 and shape["host_us"] > 0, shape
        assert 3 <= shape["n"] <= 100 and shape["rechecked"] == shape["n"]
        # Slot 0 serves the shape's first check and the warm-up; every timed call and device
        # figure's call has an address of its own in the shape's arena.
        addresses = {call[-3:] for size, call in calls if size == shape["shape"]["size"]}
        assert len(addresses) >= 1 + shape["n"] + upstream_timing.DEVICE_CALLS, shape["key"]
    # The runner's allocator holds free, as the timed calls start, at least the inputs the judge
    # made for the call before and let go (timing.free_segments): two float32 vectors. Asked of
    # the largest shape, whose vectors have segments of their own in the judge's allocator.
    largest = max(doc["shapes"], key=lambda shape: shape["shape"]["size"])
    size = largest["shape"]["size"]
    late = free[size][-largest["n"] // 2:]
    assert min(late) >= 2 * 4 * size, (largest["key"], late[:10])


def test_an_arena_is_closed_only_once_the_next_one_exists(monkeypatch):
    # A shape's timed arena and the judge's batch arena beside it are both kept until the next
    # arena is made, so that no arena of an evaluation lies at the addresses of one before it.
    from types import SimpleNamespace

    from kgit_harness import judge

    events = []

    class Arena:
        def __init__(self, *args, **kwargs):
            self.n = sum(1 for e in events if e[0] == "new")
            events.append(("new", self.n))

        def close(self):
            events.append(("close", self.n))

    monkeypatch.setattr(judge, "Slots", Arena)
    spec = SimpleNamespace(secret_seed=1, timing=None)
    # The closed arenas' memory goes back to the device (empty_cache), so that the judge's free
    # segments, which the runner's allocator is given to hold, are its per-call work's alone.
    torch = SimpleNamespace(cuda=SimpleNamespace(empty_cache=lambda: events.append(("empty_cache",))))
    ctx = judge.TimingContext(spec, None, None, None, True, torch, None, 1)
    shape_a = ctx.new_slots(object(), 4)
    batch_a = ctx.new_slots(object(), 8)
    ctx.retire(batch_a)
    ctx.retire(shape_a)
    shape_b = ctx.new_slots(object(), 4)
    ctx.retire(shape_b)
    ctx.close()
    assert events == [("new", 0), ("new", 1), ("new", 2), ("close", 1), ("close", 0), ("empty_cache",),
                      ("close", 2), ("empty_cache",)]


def _stops_after(protocol_name: str, target_rse: float, min_reps: int, spread: float, shapes: int = 1) -> int:
    """Calls the judge's stopping rule takes, on a GPU, for calls alternating 100 +- spread us, in a
    problem of `shapes` benchmark shapes."""
    from types import SimpleNamespace

    from kgit_harness.spec import TimingSettings

    ctx = SimpleNamespace(on_gpu=True, settings=TimingSettings(warmup=0, min_reps=min_reps, target_rse=target_rse,
                                                               max_time_s=1.0), shapes=shapes)
    protocol = protocols.get(protocol_name)
    times: list[float] = []
    while True:
        times.append(100 + spread * (-1) ** len(times))
        if upstream_timing._stop(protocol, ctx, times, spent=0.2):
            return len(times)


@pytest.mark.parametrize("name", ["gpumode-leaderboard-wall", "gpumode-leaderboard-events", "gpumode-batch"])
def test_a_protocol_that_asks_more_precision_than_kgits_stops_at_kgits_after_min_reps(name):
    # Calls 1% from their mean: its relative standard error is 0.32% after 10 calls, so kgit's
    # 0.5% stops it at min_reps; at 5%, the protocol's own 0.1% (asked for) needs 2,500: its cap.
    assert _stops_after(name, 0.005, 10, 1.0) == 10
    assert _stops_after(name, 0.005, 25, 1.0) == 25
    assert _stops_after(name, 0.001, 10, 5.0) == protocols.get(name).max_calls
    # Quiet calls: kgit's target with fewer min_reps than the protocol's min_calls keeps the latter.
    assert _stops_after(name, 0.005, 1, 0.01) == protocols.get(name).min_calls
    # Noisy calls run to the protocol's cap whatever kgit's target.
    assert _stops_after(name, 0.005, 10, 40.0) == protocols.get(name).max_calls


def test_protocol_precision_is_the_looser_target_and_a_fixed_count_is_kept():
    wall = protocols.get("gpumode-leaderboard-wall")
    assert wall.precision(0.005, 10) == (0.005, 10)
    assert wall.precision(0.001, 10) == (0.001, wall.min_calls)
    assert wall.precision(0.0005, 10) == (0.001, wall.min_calls)
    kernelbench = protocols.get("kernelbench-events")
    assert kernelbench.precision(0.005, 10) == (None, 100)
    assert kernelbench.precision(0.005, 10, 18) == (None, 100)


def test_a_many_shaped_problem_takes_each_shape_to_the_precision_its_geomean_needs():
    wall = protocols.get("gpumode-leaderboard-wall")
    # The geomean over 18 shapes at 1.5% each has a standard error of 0.35%, so the difference of
    # two evaluations' geomeans one of 0.5%: kgit's target_rse.
    target, least = wall.precision(0.005, 10, 18)
    assert target == pytest.approx(0.015) and least == 10
    assert (2 * target ** 2 / 18) ** 0.5 == pytest.approx(0.005)
    assert wall.precision(0.005, 10, 2) == (0.005, 10)  # up to 2 shapes: a shape's own target
    assert wall.precision(0.005, 10, 4)[0] == pytest.approx(0.005 * 2 ** 0.5)
    assert wall.precision(0.005, 10, 1000) == (protocols.SHAPE_RSE_MAX, 10)
    assert wall.precision(0.001, 10, 18) == (0.001, wall.min_calls)  # GPU MODE's own rule, asked for
    # Calls 5% from their mean: 100 calls (the cap) for 0.5% on one shape, 13 for 1.5% on 18.
    assert _stops_after("gpumode-leaderboard-wall", 0.005, 10, 5.0) == 100
    assert _stops_after("gpumode-leaderboard-wall", 0.005, 10, 5.0, shapes=18) == 13
