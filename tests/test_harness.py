"""Unit tests of the harness parts: policy, checking, guards, timing statistics, devices."""

from __future__ import annotations

import random
import time
import types

import pytest
import torch

from kgit_harness import checking, peaks as devices, policy, problem, timing
from kgit_harness.guards import Guards, Tripped
from kgit_harness.result import SCHEMA, new, validate

VECTOR_ADD_FORBIDDEN = ["torch.add", "torch.Tensor.add", "torch.Tensor.add_", "torch.sum"]


# ---- static policy ----

@pytest.mark.parametrize("code, rule", [
    ("import subprocess", "forbidden import: subprocess (process spawning)"),
    ("from reference import ref_kernel", "forbidden import: reference (the reference)"),
    ("from . import helper", "forbidden import: . (relative import)"),
    ("import torch\ntorch.add(a, b)", "forbidden by the problem: torch.add"),
    ("from torch import add\nadd(a, b)", "forbidden by the problem: torch.add"),
    ("import torch as t\nt.Tensor.add_(a, b)", "forbidden by the problem: torch.Tensor.add_"),
    ("import torch\ns = torch.cuda.Stream()", "forbidden call: torch.cuda.Stream (side streams)"),
    ("import torch\nf = torch.jit.fork(g)", "forbidden call: torch.jit.fork (deferred work)"),
    ("import torch\ntorch.sys.modules", "forbidden import: sys (interpreter access, reached through torch)"),
    ("import torch\ntorch.cuda.graphs.gc.get_objects()", "forbidden import: gc (object hunting through gc, reached through torch)"),
    ("import torch\nsync = torch.cuda.synchronize", "forbidden attribute: synchronize (patching synchronize)"),
    ("import torch\ntorch.mm = None", "monkey-patching torch or triton"),
    ("open('/etc/passwd')", "forbidden call: open (file access)"),
    ("x = torch.__dict__", "forbidden attribute: __dict__ (monkey-patching)"),
    ("with torch._C.DisableTorchFunction(): pass", "forbidden attribute: DisableTorchFunction (disabling the op guard)"),
])
def test_policy_rejects(code, rule):
    found = policy.check({"kernel.py": code}, VECTOR_ADD_FORBIDDEN)
    assert found is not None and found[0] == rule
    assert found[1].startswith("kernel.py:")


def test_policy_allows_the_baselines_and_ordinary_code():
    for name in ("vector_add", "softmax"):
        folder = problem.shipped()[name]
        task = problem.load_task(folder)
        assert policy.check({"kernel.py": (folder / "kernel.py").read_text()}, task.forbidden) is None
    ordinary = "import torch\nimport math\ndef custom_kernel(d):\n    x = d.max(dim=-1).values\n    return x.exp()\n"
    assert policy.check({"kernel.py": ordinary}, ["torch.softmax"]) is None


# ---- checking ----

def test_inputs_unchanged_spots_a_single_changed_element_but_ignores_the_output():
    data = (torch.ones(8), torch.ones(8), torch.full((8,), float("nan")))
    pristine = checking.clone(data)
    data[2].fill_(3.0)  # the output may change
    assert checking.inputs_unchanged(pristine, data, 2) == (True, "")
    data[1][5] = 1.0000001
    ok, message = checking.inputs_unchanged(pristine, data, 2)
    assert not ok and "input 1" in message


def test_inputs_unchanged_treats_nan_inputs_as_equal_to_themselves():
    x = torch.tensor([1.0, float("nan")])
    assert checking.inputs_unchanged(x.clone(), x, None)[0]


def test_allclose_rejects_nan_inf_subclasses_and_wrong_dtypes():
    expected = torch.zeros(4)
    assert checking.allclose(torch.zeros(4), expected, 1e-5, 1e-6) == (True, "")
    assert "NaN or Inf" in checking.allclose(torch.tensor([0, 0, float("inf"), 0.0]), expected, 1e-5, 1e-6)[1]
    assert "NaN or Inf" in checking.allclose(torch.tensor([0, float("nan"), 0, 0.0]), expected, 1e9, 1e9)[1]

    class Sneaky(torch.Tensor):
        pass

    assert "subclass" in checking.allclose(torch.zeros(4).as_subclass(Sneaky), expected, 1e-5, 1e-6)[1]
    assert "dtype" in checking.allclose(torch.zeros(4, dtype=torch.float64), expected, 1e-5, 1e-6)[1]
    assert "differ beyond" in checking.allclose(torch.tensor([0, 0, 1e-3, 0]), expected, 1e-5, 1e-6)[1]


def test_mixed_seeds_differ_from_the_published_one_and_depend_on_the_secret():
    assert checking.mix_seed(101, 0) != 101
    assert checking.mix_seed(101, 1) != checking.mix_seed(101, 2)
    assert checking.mix_seed(101, 1, salt=3) != checking.mix_seed(101, 1, salt=4)


# ---- runtime guards ----

def _reference_module():
    module = types.ModuleType("_kgit_ref_test")
    exec("def helper(x):\n    return x * 2\n\ndef ref_kernel(x):\n    return helper(x) + 1\n", vars(module))
    return module


def test_op_guard_trips_on_forbidden_ops_however_reached():
    guards = Guards(torch, VECTOR_ADD_FORBIDDEN, None)
    a = torch.ones(3)
    for call in (lambda: torch.add(a, a), lambda: a.add(a), lambda: a + a, lambda: getattr(torch, "su" + "m")(a)):
        guards.violation = None
        with pytest.raises(Tripped):
            with guards.armed():
                call()
        assert guards.violation[0].startswith("forbidden by the problem: torch.")
    guards.violation = None
    with guards.armed():
        (a * a).exp()  # allowed ops pass through and compute
    assert guards.violation is None


def test_a_swallowed_trip_is_still_recorded():
    guards = Guards(torch, ["torch.softmax"], None)
    with guards.armed():
        try:
            torch.softmax(torch.ones(3), 0)
        except BaseException:  # noqa: BLE001 - what a cheat would write
            pass
    assert guards.violation[0] == "forbidden by the problem: torch.softmax"


def test_op_guard_is_off_outside_candidate_calls():
    guards = Guards(torch, ["torch.add"], None)
    with guards.armed():
        pass
    assert torch.add(torch.ones(1), 1).item() == 2.0  # the harness's own ops are not guarded


def test_reference_functions_are_tripwires_except_through_the_harness():
    module = _reference_module()
    guards = Guards(torch, [], module)
    reference = guards.reference_proxy(module)
    guards.arm_reference()
    assert reference.ref_kernel(torch.tensor(1.0)).item() == 3.0  # helper ran with its real code too
    found = module.ref_kernel  # what gc hunting would find
    with pytest.raises(Tripped):
        with guards.armed():
            found(torch.tensor(1.0))
    assert guards.violation[0] == "calling the reference"
    assert reference.ref_kernel(torch.tensor(2.0)).item() == 5.0  # still usable afterwards


def test_starting_a_thread_trips_and_a_thread_left_running_is_a_violation():
    import threading

    guards = Guards(torch, [], None)
    guards.snapshot_threads()
    with pytest.raises(Tripped):
        with guards.armed():
            threading.Thread(target=lambda: None).start()
    assert guards.violation[0] == "threads started by the kernel"

    # A thread that appeared some other way (native code) is caught after the call.
    guards = Guards(torch, [], None)
    guards.snapshot_threads()
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    guards.after_call()
    stop.set()
    worker.join()
    assert guards.violation[0] == "threads started by the kernel"


def test_gc_hunting_trips_the_audit_hook():
    import gc

    guards = Guards(torch, [], None)
    with pytest.raises(Tripped):
        with guards.armed():
            gc.get_objects()
    assert guards.violation[0] == "object hunting through gc"
    gc.get_objects()  # outside candidate calls nothing is watched


def test_a_removed_op_guard_is_a_violation():
    guards = Guards(torch, ["torch.add"], None)
    with guards.armed():
        torch._C._pop_torch_function_stack()  # what a cheat reaching torch._C could do
    assert guards.violation[0] == "op guard removed"


def test_the_harness_handle_on_the_reference_is_refused_inside_a_call():
    module = _reference_module()
    guards = Guards(torch, [], module)
    reference = guards.reference_proxy(module)
    guards.arm_reference()
    with pytest.raises(Tripped):
        with guards.armed():
            reference.ref_kernel(torch.tensor(1.0))
    assert guards.violation[0] == "calling the reference"


def test_no_expected_output_exists_while_the_candidate_runs():
    # A kernel that looks through every live object for a finished a + b during its
    # call finds none: the harness computes expected outputs only after the call.
    import gc

    from kgit_harness import runner

    task = problem.load_task(problem.shipped()["vector_add"])
    found = []

    def hunting(data):
        a, b, out = data
        want = a + b
        found.extend(o for o in gc.get_objects() if type(o) is torch.Tensor and o is not want
                     and o.shape == want.shape and torch.equal(o, want))
        return out.copy_(want)

    result = runner._check_shape(task, _load_reference("vector_add"), _plain_candidate(hunting),
                                 {"size": 4097, "seed": 103}, 103, torch)
    assert result["ok"] and found == []


# ---- timing ----

def test_reservoir_checks_every_repetition_equally_often():
    counts = [0] * 20
    rng = random.Random(1)
    for _ in range(3000):
        sample = timing.Reservoir(3, rng)
        for i in range(20):
            sample.offer(lambda i=i: i)
        assert len(sample.items) == 3 and len(set(sample.items)) == 3
        for i in sample.items:
            counts[i] += 1
    # Each index is kept with probability 3/20: 450 of 3000, binomial sd ~20.
    assert all(350 < c < 550 for c in counts), counts


def test_reservoir_builds_only_what_it_keeps():
    built = []
    sample = timing.Reservoir(2, random.Random(0))
    for i in range(50):
        sample.offer(lambda i=i: built.append(i) or i)
    assert len(built) < 50 and set(sample.items) <= set(built)


def test_stats_and_rse():
    stats = timing._stats([1.0, 2.0, 3.0, 10.0])
    assert stats == {"mean_us": 4.0, "median_us": 2.5, "min_us": 1.0, "std_us": pytest.approx(4.0825, rel=1e-4), "n": 4}
    assert timing._rse([5.0]) == float("inf")
    assert timing._rse([5.0, 5.0]) == 0.0


@pytest.mark.parametrize("batch, mean, call, escapes", [
    (None, 10.0, 5.0, False),      # CPU: no cross-check
    (12.0, 10.0, 5.0, False),      # honest, GPU-bound
    (25.0, 3.0, 15.0, False),      # honest, host-bound: the host's own launch time explains it
    (150.0, 2.0, 5.0, True),       # side stream: events saw 2 us, the GPU was busy 150 us a call
])
def test_escape_rule(batch, mean, call, escapes):
    stats = {"mean_us": mean, "host_call_us": call, "host_batch_us": batch}
    assert (timing.escaped(stats) is not None) == escapes


def test_clock_reports_a_patched_timer(monkeypatch):
    clock = timing.Clock(torch, on_gpu=False)
    assert clock.tampered() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert clock.tampered() == ["time.perf_counter"]


def _plain_candidate(fn):
    import contextlib

    class Plain:
        kernel = staticmethod(fn)

        def call(self, data):
            return fn(data)

        def guarded(self):
            return contextlib.nullcontext()

        def verify(self):
            pass

    return Plain()


def test_measure_catches_a_kernel_that_decays_after_the_checks():
    reference = _load_reference("vector_add")
    task = problem.load_task(problem.shipped()["vector_add"])
    calls = [0]

    def decaying(data):
        calls[0] += 1
        a, b, out = data
        if calls[0] <= 6:
            out.copy_(a + b)
        return out

    settings = {"warmup": 0, "min_reps": 8, "target_rse": 1e-9, "max_time_s": 0.0}
    clock = timing.Clock(torch, on_gpu=False)
    stats = timing.measure(task, reference, _plain_candidate(decaying), {"size": 64, "seed": 1}, 5, clock, settings, torch)
    assert stats["n"] == 8 and "timed repetition 7" in stats["error"]  # the last call is always re-checked

    honest = timing.measure(task, reference, _plain_candidate(lambda d: d[2].copy_(d[0] + d[1])),
                            {"size": 64, "seed": 1}, 5, clock, settings, torch)
    assert "error" not in honest and 3 <= honest["rechecked"] <= 4 and honest["min_us"] > 0


def _load_reference(name):
    module = types.ModuleType(f"_ref_{name}")
    path = problem.shipped()[name] / "reference.py"
    exec(compile(path.read_text(), str(path), "exec"), vars(module))
    return module


# ---- speed of light ----

def test_device_table_lookup():
    assert devices.lookup("NVIDIA H200").bytes_per_s == 4.8e12
    assert devices.lookup("NVIDIA H100 PCIe").bytes_per_s == 2.0e12
    assert devices.lookup("NVIDIA H100 80GB HBM3").name.startswith("NVIDIA H100")
    assert devices.lookup("NVIDIA A100-SXM4-40GB").bytes_per_s == 1.555e12
    assert devices.lookup("AMD Instinct MI300X").bytes_per_s == 5.3e12
    assert devices.lookup("AMD Instinct MI325X").bytes_per_s == 6.0e12
    assert devices.lookup("cpu") is None
    with pytest.raises(ValueError):
        devices.from_override({"bandwidth": 1})


def test_speed_of_light_takes_the_slower_of_compute_and_memory():
    peak = devices.Peak("test", bytes_per_s=1e12, flops_per_s=1e15, source="override")
    assert devices.speed_of_light_us(1e12, 1e6, peak) == pytest.approx(1000.0)  # compute-bound: 1 ms
    assert devices.speed_of_light_us(1e3, 1e9, peak) == pytest.approx(1000.0)  # memory-bound: 1 ms
    assert devices.speed_of_light_us(None, None, peak) is None


def test_speed_of_light_guard_with_an_injected_device():
    task = problem.load_task(problem.shipped()["vector_add"])
    peak = devices.from_override({"name": "injected", "bytes_per_s": 1e12})
    # 2^20 floats: 12 MiB at 1 TB/s is 12.58 us; rejected below half of that.
    honest = [{"key": "size=1048576", "shape": {"size": 1 << 20}, "min_us": 7.0}]
    assert devices.judge(task, honest, peak) is None
    assert honest[0]["sol_us"] == pytest.approx(12.582912)
    cheat = [{"key": "size=1048576", "shape": {"size": 1 << 20}, "min_us": 6.0}]
    why = devices.judge(task, cheat, peak)
    assert why and why.startswith("size=1048576: 6.00 us") and "injected" in why


# ---- result ----

def test_result_documents_validate_and_carry_the_speed_of_light_field():
    doc = new("rejected", reason="faster than physically possible")
    assert validate(doc)["schema"] == SCHEMA and "speed_of_light" in doc
    with pytest.raises(ValueError):
        validate({**doc, "status": "fast"})
