"""Unit tests of the harness parts: policy, checking, guards, timing, channel, shared memory, devices."""

from __future__ import annotations

import itertools
import json
import random
import signal
import sys
import time
import types

import pytest
import torch

from kgit_harness import channel, checking, policy, problem, shared, timing
from kgit_harness import peaks as devices
from kgit_harness.guards import Guards, Tripped
from kgit_harness.result import SCHEMA, Result, new, validate
from kgit_harness.spec import TimingSettings

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


def test_every_call_has_the_same_op_guard_and_it_catches_what_skips_autograd():
    # One policy for every call, with nothing on the dispatch stack a kernel could read to tell
    # a timed call from a checked one; the trap sits at a key every dispatch of the thread
    # passes, so inference mode, a dispatch below autograd and a custom op's body meet it.
    guards = Guards(torch, ["torch.matmul", "torch.softmax"], None)
    guards.snapshot_threads()
    a = torch.ones(4, 4)
    torch.library.define("kgit_test::smx", "(Tensor x) -> Tensor")
    torch.library.impl("kgit_test::smx", "CPU")(lambda x: torch.softmax(x, -1))

    def inference():
        with torch.inference_mode():
            torch.ones(4, 4) @ torch.ones(4, 4)

    def below_autograd():
        with torch._C._AutoDispatchBelowAutograd():
            torch.softmax(a, -1)

    for call in (lambda: a @ a, lambda: torch.ops.aten.mm.default(a, a), lambda: torch.linalg.matmul(a, a),
                 lambda: torch.mm(a, a, out=torch.empty(4, 4)), lambda: torch._softmax(a, -1, False),
                 inference, below_autograd, lambda: torch.ops.kgit_test.smx(a)):
        guards.violation = None
        with pytest.raises(Tripped):
            with guards.armed():
                assert torch._C._len_torch_dispatch_stack() == 0
                call()
        assert guards.violation[0].startswith("forbidden by the problem: torch."), call
    guards.violation = None
    with guards.armed():
        b = (a * 2).exp()
    assert guards.violation is None and torch.equal(a @ a, torch.full((4, 4), 4.0)) and b[0, 0] > 7


def test_a_trip_is_reported_at_once_and_taking_the_key_off_is_a_violation():
    told = []
    guards = Guards(torch, ["torch.softmax"], None, report=lambda rule, detail: told.append(rule))
    with guards.armed():
        try:
            torch.softmax(torch.ones(3), 0)
        except BaseException:  # noqa: BLE001 - what a cheat would write
            pass
        guards.violation = None  # a cheat that could reach the record: the judge heard already
    assert told == ["forbidden by the problem: torch.softmax"]
    guards = Guards(torch, ["torch.softmax"], None)
    with guards.armed():
        torch._C._dispatch_tls_set_dispatch_key_included(guards._key, False)
    assert guards.violation == ("op guard removed", "the kernel took the harness's dispatch key off its thread")


_REGISTER_OVER_THE_TRAP = """
import warnings, torch
from kgit_harness.guards import Guards
guards = Guards(torch, ["torch.bmm"], None)
guards.snapshot_threads()
guards.after_call()
assert guards.violation is None, guards.violation
lib = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    lib.impl("bmm", lambda *args: torch.zeros(1), torch._C._dispatch_key_name(guards._key))  # what a cheat could register
guards.after_call(trap=False)
print("after a batch:", guards.violation)
guards.after_call()
print("after a call:", guards.violation)
"""


@pytest.mark.slow
def test_a_kernel_registered_over_the_trap_is_a_violation():
    # In a process of its own: torch caches dispatch per op, so a kernel registered over
    # the trap would outlive its library in this one and break later tests' matmuls.
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-c", _REGISTER_OVER_THE_TRAP], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert shown == ["after a batch: None",  # not looked at after a back-to-back batch
                     "after a call: ('op guard removed', \"the kernel replaced the harness's kernels of the forbidden "
                     "ATen ops\")"], shown


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
        # What a cheat reaching torch's dispatch-key state could do (the static policy forbids the name).
        torch._C._dispatch_tls_set_dispatch_key_excluded(guards._key, True)
    torch._C._dispatch_tls_set_dispatch_key_excluded(guards._key, False)
    assert guards.violation == ("op guard removed", "the kernel took the harness's dispatch key off its thread")

    # A name with no ATen op found for it keeps the Python-name guard, checked the same way.
    guards = Guards(torch, ["torch.cuda.set_sync_debug_mode"], None)
    assert guards._mode is not None and guards._key is None
    with guards.armed():
        torch._C._pop_torch_function_stack()
    assert guards.violation == ("op guard removed", "the kernel removed the harness's TorchFunctionMode")


def test_names_the_aten_guard_covers_get_no_python_name_guard():
    # Every tensor method a Triton launcher reads passes through a TorchFunctionMode; the
    # ATen guard already sees the shipped problems' forbidden names, aliases included.
    for name in ("vector_add", "softmax", "fp8_blockscale_gemm"):
        forbidden = problem.load_task(problem.shipped()[name]).forbidden
        guards = Guards(torch, list(forbidden), None)
        assert guards._mode is None and guards._key is not None, name
        assert set(guards._aten.values()) <= set(forbidden)
    guards = Guards(torch, ["torch.softmax", "torch.nn.functional.softmax"], None)
    for call in (lambda x: torch.softmax(x, -1), lambda x: torch.nn.functional.softmax(x, -1),
                 lambda x: torch._softmax(x, -1, False), lambda x: torch.ops.aten._softmax(x, -1, False)):
        guards.violation = None
        with pytest.raises(Tripped):
            with guards.armed():
                call(torch.ones(2, 3))
        assert guards.violation[0] == "forbidden by the problem: torch.softmax"


def test_the_harness_handle_on_the_reference_is_refused_inside_a_call():
    module = _reference_module()
    guards = Guards(torch, [], module)
    reference = guards.reference_proxy(module)
    guards.arm_reference()
    with pytest.raises(Tripped):
        with guards.armed():
            reference.ref_kernel(torch.tensor(1.0))
    assert guards.violation[0] == "calling the reference"


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


def _settled(batch, events, copy=0.0, call=0.0, runner_batch=0.0, samples=None):
    stats = {"mean_us": events, "median_us": events, "min_us": events, "std_us": 0.0, "n": 10,
             "clock": "events", "host_batch_us": batch, "copy_us": copy, "copy_out_us": copy, "host_call_us": call,
             "runner_batch_host_us": runner_batch,
             "judge_batch": timing._stats(samples or [batch])}
    return timing.settle(stats), stats


# Figures recorded on an H200 (judge batch us a call, event mean, judge's copy,
# runner host us in a timed call, runner host us a call in the batch).
@pytest.mark.parametrize("batch, events, copy, call, runner_batch, clock", [
    (12.0, 10.0, 0.0, 5.0, 5.0, "events"),          # honest, GPU-bound
    (322.7, 188.6, 120.0, 127.8, 140.0, "events"),   # vector_add 64M: copy-bound, the judge's copy explains it
    (1450.0, 1400.0, 3.0, 90.0, 80.0, "events"),     # fp8_blockscale_gemm: compute-bound, back-to-back ~ events
    (73.4, 7.8, 0.0, 65.0, 60.0, "judge"),           # vector_add 1M: the guarded launch, not the GPU
    (422.3, 12.8, 22.2, 222.1, 300.0, "judge"),      # softmax 4096x1000: launch-bound
])
def test_the_judges_clock_ranks_what_the_events_cannot_account_for(batch, events, copy, call, runner_batch, clock):
    why, stats = _settled(batch, events, copy, call, runner_batch, samples=[batch * 0.99, batch, batch * 1.01])
    assert why is None and stats["clock"] == clock
    if clock == "judge":
        assert stats["mean_us"] == pytest.approx(batch) and stats["n"] == 3 and "launch" in stats["note"]
    else:
        assert stats["mean_us"] == events and "note" not in stats


def test_the_events_bound_is_the_judges_figures_alone():
    # 1.5 x events + the judge's copy + 20 us; the runner's host figures do not move it.
    for host in (0.0, 1e6):
        why, within = _settled(34.99, 10.0, 0.0, host, host)
        assert why is None and within["clock"] == "events" and within["mean_us"] == 10.0
        why, beyond = _settled(35.01, 10.0, 0.0, host, host)
        # Past it the events never rank; the host figures only choose the judge's clock or a rejection.
        if host:
            assert why is None and beyond["clock"] == "judge" and beyond["mean_us"] == 35.01
        else:
            assert why and "judge's clock" in why


@pytest.mark.parametrize("events, call, runner_batch", [
    (2.0, 5.0, 5.0),        # a side stream: events saw 2 us, the GPU was busy 150 us a call
    (0.5, 0.5, 0.5),        # forged events and forged small host figures
    (12.8, 5.0, 15.0),      # the softmax batch with a runner loop that was quick: the GPU kept working after it
])
def test_figures_the_judges_clock_contradicts_are_rejected(events, call, runner_batch):
    why, _ = _settled(150.0 if events == 2.0 else 422.3, events, 0.0 if events != 12.8 else 22.2, call, runner_batch)
    assert why and "judge's clock" in why


def test_a_forger_gains_nothing_from_huge_host_figures_and_tiny_events():
    # The honest softmax shape: events 12.8 us, judge 422.3 us a call, ranked by the judge.
    _, honest = _settled(422.3, 12.8, 22.2, 222.1, 300.0, samples=[420.0, 422.3, 424.0])
    # The same work, reporting 0.5 us events and 1e6 us of host time: not rejected (the host
    # figure explains the judge's clock), but ranked by the judge's clock, exactly as honest.
    why, forged = _settled(422.3, 0.5, 22.2, 1e6, 1e6, samples=[420.0, 422.3, 424.0])
    assert why is None and forged["clock"] == "judge"
    for key in ("mean_us", "median_us", "min_us"):
        assert forged[key] == honest[key]
    # Within the bound a forged event figure can go down to (judge - copy - 20 us) / 1.5 and no lower.
    floor = (422.3 - 22.2 - timing.ESCAPE_SLACK_US) / timing.ESCAPE_RATIO
    assert _settled(422.3, floor + 0.01, 22.2)[1]["clock"] == "events"
    assert _settled(422.3, floor - 0.01, 22.2, 1e6, 1e6)[1]["clock"] == "judge"


def test_the_cpu_interpreter_has_nothing_to_settle():
    stats = {"mean_us": 10.0, "clock": "judge"}
    assert timing.settle(stats) is None and stats == {"mean_us": 10.0, "clock": "judge"}


def test_calibration_caps_the_copy_by_bytes():
    cal = timing.Calibration(ping_us=50.0, copy_fixed_us=10.0, copy_us_per_byte=0.001)
    assert cal.copy_us(torch.zeros(1000)) == pytest.approx(10.0 + 4.0)
    assert cal.copy_us((torch.zeros(10), torch.zeros(10, dtype=torch.float64))) == pytest.approx(20.0 + 0.12)
    real = timing.calibrate(lambda: None, torch, on_gpu=False, repeats=2)
    # Measured: a positive fixed cost, a per-byte cost never negative (a 64 KB CPU copy may
    # not rise above the noise of the tiny one).
    assert real.ping_us >= 0 and real.copy_fixed_us > 0 and real.copy_us_per_byte >= 0
    assert real.copy_us(torch.zeros(16384)) >= real.copy_fixed_us


def test_clock_reports_a_patched_timer(monkeypatch):
    clock = timing.Clock(torch, on_gpu=False)
    assert clock.tampered() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert clock.tampered() == ["time.perf_counter"]


class _InProcessSlots:
    """judge.Slots' interface with the kernel called in this process: measure's logic alone."""

    def __init__(self, fn, sample, count, output):
        self.fn, self.output, self.torch = fn, output, torch
        self.slots = [checking.clone(sample) for _ in range(count)]

    def fill(self, slot, private):
        for dst, src in zip(self._tensors(self.slots[slot]), self._tensors(private)):
            dst.copy_(src)
        checking.poison(self.slots[slot], self.output)

    @staticmethod
    def _tensors(data):
        return [t for t in data if isinstance(t, torch.Tensor)]

    def call(self, slot, *, clock=None, flush=True, empty=False, hold=None):
        if not empty:
            self.fn(self.slots[slot])
        return {"us": 1.0, "host_us": 1.0, "output": None}

    def drain(self):
        pass

    def batch(self, slots, *, empty=False, timed=False):
        if not empty:
            for s in slots:
                self.fn(self.slots[s])
        return {"output": None}

    def take(self, slot):
        return self.slots[slot][self.output].clone()

    def data(self, slot):
        return self.slots[slot]

    def close(self):
        pass


def _measure_in_process(fn, settings, shape=None):
    reference = _load_reference("vector_add")
    task = problem.load_task(problem.shipped()["vector_add"])
    return timing.measure(task, reference, shape or {"size": 64, "seed": 1}, 5, settings, False, torch,
                          lambda sample, count: _InProcessSlots(fn, sample, count, task.output), timing.UNCAPPED)


def test_measure_catches_a_kernel_that_decays_after_the_checks():
    calls = [0]

    def decaying(data):
        calls[0] += 1
        a, b, out = data
        if calls[0] <= 6:
            out.copy_(a + b)
        return out

    settings = TimingSettings(warmup=0, min_reps=8, target_rse=1e-9, max_time_s=0.0)
    stats = _measure_in_process(decaying, settings)
    assert stats["n"] == 8 and "timed repetition 7" in stats["error"]  # the last call is always re-checked

    honest = _measure_in_process(lambda d: d[2].copy_(d[0] + d[1]), settings)
    assert "error" not in honest and 3 <= honest["rechecked"] <= 4 and honest["min_us"] > -1
    assert honest["clock"] == "judge"


def test_measure_fails_a_kernel_that_writes_its_input():
    def scribbling(data):
        a, b, out = data
        out.copy_(a + b)
        a[0] = 7.0

    stats = _measure_in_process(scribbling, TimingSettings(warmup=0, min_reps=2, target_rse=1.0, max_time_s=0.0))
    assert "modified input 0" in stats["error"]


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


def test_result_round_trips_keeps_extra_keys_and_refuses_malformed_documents():
    doc = new("ok", geomean_us=3.5, shapes=[{"key": "size=1", "mean_us": 3.5}])
    doc["stdout"] = "hello"  # kgit adds keys of its own
    again = Result.from_dict(json.loads(json.dumps(doc))).to_dict()
    assert again == doc
    old_reader_keys = {"status", "error", "reason", "device", "timing", "tests", "shapes", "geomean_us",
                       "versions", "harness", "eval_s", "speed_of_light", "schema", "ranking"}
    assert old_reader_keys <= set(again)
    for bad in ({**doc, "geomean_us": None}, {**doc, "geomean_us": float("nan")}, {**doc, "schema": "kgit.result/0"},
                {**doc, "shapes": [{"key": "x", "mean_us": "fast"}]}, {**doc, "error": 3}, [doc]):
        with pytest.raises(ValueError):
            Result.from_dict(bad)


# ---- channel and shared memory ----

def test_channel_carries_json_messages_and_refuses_anything_else():
    import socket

    a, b = socket.socketpair()
    channel.send(a, {"op": "done", "us": 1.5})
    assert channel.recv(b, time.monotonic() + 5)[0] == {"op": "done", "us": 1.5}
    for raw, why in [(b"not json", "not JSON"), (b"[1, 2]", "'op' string"), (b'{"op": "done", "us": NaN}', "not JSON"),
                     (b'{"us": 1}', "'op' string")]:
        a.sendall(channel.HEADER.pack(len(raw)) + raw)
        with pytest.raises(channel.ChannelError, match=why):
            channel.recv(b, time.monotonic() + 5)
    a.sendall(channel.HEADER.pack(channel.MAX_BYTES + 1))
    with pytest.raises(channel.ChannelError, match="limit"):
        channel.recv(b, time.monotonic() + 5)
    with pytest.raises(channel.Timeout):
        channel.recv(b, time.monotonic() + 0.05)
    a.close()
    with pytest.raises(channel.Closed):
        channel.recv(b, time.monotonic() + 5)
    b.close()


def test_channel_checks_the_numbers_a_runner_reports():
    assert channel.number({"op": "done", "us": 2}, "us") == 2.0
    for value in (-1.0, True, "3", None, float("inf")):
        with pytest.raises(channel.ChannelError):
            channel.number({"op": "done", "us": value}, "us")


def test_shared_arena_reproduces_strided_layouts_in_another_mapping():
    import os
    import socket

    a = torch.randn(128, 64).T  # column-major, as the fp8 problem's inputs are
    data = (a, torch.arange(5, dtype=torch.int64), 3, {"scale": torch.ones(2, 3, dtype=torch.bfloat16)})
    planner = shared.Planner()
    layout = planner.tree(data)
    arena = shared.HostArena(torch, planner.size)
    mine = shared.view(torch, arena.tensor, layout)
    for dst, src in zip(shared.tensors(mine), shared.tensors(data)):
        dst.copy_(src)
    desc, fds = arena.describe()
    # What the runner does with the descriptor that SCM_RIGHTS gave it.
    left, right = socket.socketpair()
    channel.send(left, {"op": "shape", "arena": desc, "layout": layout}, fds)
    message, got = channel.recv(right, time.monotonic() + 5, accept_fds=True)
    theirs_arena, keep = shared.attach(torch, message["arena"], got)
    theirs = shared.view(torch, theirs_arena, message["layout"])
    assert shared.same_layout(theirs, data) and theirs[2] == 3
    assert all(torch.equal(x, y) for x, y in zip(shared.tensors(theirs), shared.tensors(data)))
    theirs[0].fill_(2.0)  # a write on one side is seen on the other
    assert bool((mine[0] == 2.0).all())
    left.close()
    right.close()
    del theirs, theirs_arena, mine
    arena.close()
    assert not os.path.exists(f"/proc/self/fd/{fds[0]}")


@pytest.mark.gpu
def test_gpu_arena_crosses_processes_through_cuda_ipc(tmp_path):
    import socket
    import subprocess
    import sys

    if not torch.cuda.is_available():
        pytest.fail("gpu tests need a CUDA or ROCm device (deselect them with -m 'not gpu')")
    n = 1 << 20
    arena = shared.DeviceArena(torch, 3 * n * 4)
    planner = shared.Planner()
    layout = planner.tree(tuple(torch.empty(n, device="cuda") for _ in range(3)))
    a, b, out = shared.view(torch, arena.tensor, layout)
    a.copy_(torch.randn(n, device="cuda"))
    b.copy_(torch.randn(n, device="cuda"))
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    code = ("import socket, sys, time, torch\n"
            "from kgit_harness import channel, shared\n"
            "s = socket.socket(fileno=int(sys.argv[1]))\n"
            "m, fds = channel.recv(s, time.monotonic() + 60, accept_fds=True)\n"
            "arena, keep = shared.attach(torch, m['arena'], fds)\n"
            "a, b, out = shared.view(torch, arena, m['layout'])\n"
            "torch.add(a, b, out=out); torch.cuda.synchronize()\n"
            "channel.send(s, {'op': 'done'})\n")
    mine, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-I", "-c", code, str(theirs.fileno())], pass_fds=(theirs.fileno(),))
    theirs.close()
    desc, fds = arena.describe()
    channel.send(mine, {"op": "shape", "arena": desc, "layout": layout}, fds)
    assert channel.recv(mine, time.monotonic() + 120)[0]["op"] == "done"
    assert proc.wait(timeout=60) == 0
    assert torch.equal(out, a + b)


class _ReportingSlots(_InProcessSlots):
    """A runner on a simulated GPU that reports `us` (a number, or a function giving one a call)
    and `host_us` of its choice; `empty_s` delays empty requests.

    Each call queues `gpu_s` of device work behind what is queued already, as a launch does,
    and a request returns once the queue is done, as a synchronize does: the device keeps
    working while the runner's thread waits for a core, so back-to-back calls cost the device's
    time and one wait, not one a call. Every request, empty or not, first gives up the CPU once,
    as a real one does while it waits on the socket."""

    def __init__(self, fn, sample, count, output, us, host_us, empty_s=0.0, gpu_s=0.003):
        super().__init__(fn, sample, count, output)
        self.us, self.host_us, self.empty_s, self.gpu_s = us, host_us, empty_s, gpu_s
        self.free_at = 0.0

    def _launch(self, slot):
        self.free_at = max(time.perf_counter(), self.free_at) + self.gpu_s
        self.fn(self.slots[slot])

    def _synchronize(self):
        while time.perf_counter() < self.free_at:
            pass

    def call(self, slot, *, clock=None, flush=True, empty=False, hold=None):
        t0 = time.perf_counter()
        time.sleep(0)
        if empty:
            if self.empty_s:
                time.sleep(self.empty_s)
        else:
            self._launch(slot)
            self._synchronize()
        honest = (time.perf_counter() - t0) * 1e6  # None below: report what the call took
        return {"us": honest if self.us is None else self._us(),
                "host_us": honest if self.host_us is None else self.host_us, "output": None}

    def _us(self):
        return self.us() if callable(self.us) else self.us

    def batch(self, slots, *, empty=False, timed=False):
        t0 = time.perf_counter()
        time.sleep(0)
        if empty:
            if self.empty_s:
                time.sleep(self.empty_s)
        else:
            for s in slots:
                self._launch(s)
            self._synchronize()
        honest = (time.perf_counter() - t0) * 1e6
        reply = {"output": None, "host_us": honest if self.host_us is None else self.host_us * len(slots)}
        if timed:  # the runner's events over the batch
            reply["span_us"] = honest if self.us is None else self._us() * len(slots)
        return reply


def _measure_as_gpu(us, host_us, empty_s=0.0, calibration=None):
    """measure's GPU path (events reported, the judge's batch) with 3 ms of simulated device work a call."""
    reference = _load_reference("vector_add")
    task = problem.load_task(problem.shipped()["vector_add"])

    def add(data):
        a, b, out = data
        out.copy_(a + b)

    settings = TimingSettings(warmup=0, min_reps=3, target_rse=0.05, max_time_s=0.0)
    cal = calibration or timing.Calibration(ping_us=100.0, copy_fixed_us=50.0, copy_us_per_byte=0.0)
    stats = timing.measure(task, reference, {"size": 64, "seed": 1}, 5, settings, True, torch,
                           lambda sample, count: _ReportingSlots(add, sample, count, task.output, us, host_us,
                                                                 empty_s), cal)
    return timing.settle(stats), stats


def test_the_judges_batch_ranks_a_runner_whose_host_figures_explain_it():
    why, stats = _measure_as_gpu(us=1.0, host_us=1e6)  # 1 us of events, a huge host time
    assert why is None and stats["clock"] == "judge", stats
    assert stats["min_us"] >= 2500.0 and stats["events_min_us"] == 1.0  # the work, not the claim
    assert 3 <= stats["judge_batch"]["n"] <= timing.BATCH_SAMPLES_MAX


def test_the_judges_batch_rejects_figures_nothing_accounts_for_and_accepts_honest_ones():
    why, _ = _measure_as_gpu(us=1.0, host_us=1.0)
    assert why and "judge's clock" in why
    why, stats = _measure_as_gpu(us=None, host_us=None)  # figures of what the work really took
    assert why is None and stats["clock"] == "events" and stats["mean_us"] >= 3000.0, stats
    assert stats["judge_batch"]["n"] == timing.BATCH_SAMPLES_MIN  # a bound check needs no more


def test_a_host_busy_with_other_work_rejects_no_honest_kernel_and_every_forged_one():
    # Other evaluations on the host: a busy loop per core beside the judge. The GPU's events do
    # not slow down with the host (3000 us, what the kernel's 3 ms takes), the judge's clock
    # does, by the waits for a core; its fastest sample is what the bound holds, so the honest
    # figure stands and a forged one (1 us, every sample far past the bound) is still refused.
    import os
    import subprocess
    import sys

    # The judge's calibration is taken on the quiet host, before the candidate, as in a real
    # evaluation: the host's load later is measured against it (timing.load_factor).
    calibration = timing.Calibration(ping_us=100.0, copy_fixed_us=50.0, copy_us_per_byte=0.0,
                                     host_us=timing.host_latency_us())
    hogs = [subprocess.Popen([sys.executable, "-c", "print(flush=True)\nwhile True: pass"],
                             stdout=subprocess.PIPE) for _ in range(os.cpu_count() or 2)]
    try:
        for hog in hogs:  # each busy before the first figure is taken
            hog.stdout.readline()
        honest_why, honest = _measure_as_gpu(us=3000.0, host_us=3000.0, calibration=calibration)
        forged_why, forged = _measure_as_gpu(us=1.0, host_us=1.0, calibration=calibration)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert honest_why is None and "error" not in honest and honest["mean_us"] == 3000.0, (honest_why, honest)
    assert forged_why and "judge's clock" in forged_why, (forged_why, forged)


def test_a_runner_that_answers_empty_requests_slowly_does_not_shrink_the_judges_clock():
    # Empty requests take 50 ms: subtracted as measured, they would cancel the 3 ms calls. The
    # subtraction is capped at 1.5 x the 100 us ping, so the judge's clock keeps the calls' 3 ms
    # and ranks them by it (the forged 1 us of events is explained by nothing else).
    why, stats = _measure_as_gpu(us=1.0, host_us=1e6, empty_s=0.05)
    assert why is None and "refused" not in stats and stats["clock"] == "judge", stats
    assert stats["mean_us"] >= 2500.0 and stats["events_mean_us"] == 1.0, stats


def test_a_call_is_refused_only_when_cheaper_than_half_of_both_empty_round_trips():
    # Calls answered before they were asked for: cheaper than any request with no call in it.
    refused = timing.floor_verdict([10.0, 12.0, 11.0], [150.0, 160.0, 170.0], ping_us=120.0)
    assert refused and "before the judge asked" in refused
    assert "120.0 us" in refused  # the smaller of the calibrated 120 us and the fastest empty, 150 us
    # Every core busy: the empty requests after each 3 ms call waited 7-9 ms for a core; the
    # round trip calibrated on the quiet host says the calls were real.
    assert timing.floor_verdict([3000.0, 3100.0, 3050.0], [8000.0, 9000.0, 7000.0], ping_us=100.0) is None
    # Calibrated while the host was busy, timed once it was quiet.
    assert timing.floor_verdict([100.0, 110.0, 105.0], [150.0, 160.0, 170.0], ping_us=5000.0) is None
    assert timing.floor_verdict([1.0, 1.0], [150.0], ping_us=100.0) is None  # too few calls to judge


def test_a_back_to_back_sample_holds_enough_kernel_time_within_memory():
    gib = 1 << 30
    # The H200's softmax 4096x4096 (37 us a call, 192 MB a slot): 10 calls left 30-90 us of
    # fixed batch cost on each; now at least BATCH_TARGET_US of kernel time, within memory.
    short = timing.batch_count(37.0, 192 << 20, 140 * gib)
    assert short > 10 and short * 37.0 >= min(timing.BATCH_TARGET_US, timing.BATCH_BYTES // (192 << 20) * 37.0)
    assert short * (192 << 20) <= timing.BATCH_BYTES
    assert timing.batch_count(5000.0, 200 << 20, 140 * gib) == timing.BATCH_MIN  # a 5 ms GEMM: a few calls do
    assert timing.batch_count(0.5, 1 << 20, 140 * gib) == timing.BATCH_MAX  # a forged 0.5 us buys a long batch
    # A small GPU: a quarter of its free memory; a slot bigger than that gets one call, not two.
    assert timing.batch_count(37.0, 192 << 20, 4 * gib) == gib // (192 << 20)
    assert timing.batch_count(37.0, 600 << 20, 4 * gib) == 1
    assert timing.batch_count(2700.0, 19 * gib, 140 * gib) == 1  # KernelBench's ReLU, 6.4 GB in and out


def test_the_output_copy_is_allowed_for_only_where_the_runner_makes_one():
    # A side-stream vector_add at 64M elements on the H200: the judge's clock says 188 us a
    # call, the events 3 us, the runner's host 40 us; the judge copies 256 MB (146 us).
    def settled(copy_out):
        stats = {"mean_us": 3.0, "median_us": 3.0, "min_us": 3.0, "std_us": 0.0, "n": 10, "clock": "events",
                 "host_batch_us": 188.0, "copy_us": 146.0, "copy_out_us": copy_out, "host_call_us": 40.0,
                 "runner_batch_host_us": 40.0, "judge_batch": timing._stats([187.0, 188.0, 189.0])}
        return timing.settle(stats), stats

    why, _ = settled(0.0)  # output: 2, written in place: no copy-out to allow for
    assert why and "judge's clock" in why
    why, stats = settled(146.0)  # a fresh output the runner copies into the judge's buffer
    assert why is None and stats["clock"] == "judge" and stats["mean_us"] == pytest.approx(188.0)


def test_a_call_cheaper_than_the_round_trips_noise_still_gets_a_positive_figure(monkeypatch):
    # A loaded CPU: the empty request took longer than a timed request with its call.
    slow_empty = {"n": 0}
    real = timing.round_trips

    def inflated(slots, calibration, repeats=5):
        slow_empty["n"] += 1
        return real(slots, calibration, repeats) + 1e6  # a second, more than any call here

    monkeypatch.setattr(timing, "round_trips", inflated)
    stats = _measure_in_process(lambda data: data[2].copy_(data[0] + data[1]),
                                TimingSettings(warmup=0, min_reps=3, target_rse=0.5, max_time_s=0.0))
    assert slow_empty["n"] == 1 and stats["min_us"] > 0 and stats["mean_us"] > 0, stats


class _GpuContext:
    """What upstream_timing asks of the judge (judge.TimingContext), with the GPU path taken on
    a CPU kernel through _ReportingSlots."""

    def __init__(self, us, host_us, calibration, gpu_s=0.003):
        self.task = problem.load_task(problem.shipped()["vector_add"])
        self.reference = _load_reference("vector_add")
        self.secret, self.on_gpu, self.torch, self.calibration = 5, True, torch, calibration
        self.settings = TimingSettings(warmup=0, min_reps=3, target_rse=0.05, max_time_s=0.0)
        self.shapes = len(self.task.benchmarks)
        self.us, self.host_us, self.gpu_s = us, host_us, gpu_s

    def slot_bytes(self, sample):
        return 1 << 10

    def new_slots(self, sample, count):
        fn = _slow_add if self.gpu_s >= 0.003 else _add
        return _ReportingSlots(fn, sample, count, self.task.output, self.us, self.host_us, gpu_s=self.gpu_s)

    def free_bytes(self):
        return 1 << 34

    def retire(self, slots):
        pass


def _slow_add(data):
    end = time.perf_counter() + 0.003
    while time.perf_counter() < end:
        pass
    _add(data)


def _add(data):
    a, b, out = data
    out.copy_(a + b)


@pytest.mark.parametrize("name, bound", [("gpumode-leaderboard-wall", "calls"),
                                          ("gpumode-leaderboard-events", "batch")])
def test_a_fresh_protocols_figure_is_bound_by_the_judges_clock_on_a_gpu(name, bound):
    from kgit_harness import protocols, upstream_timing

    protocol = protocols.get(name)
    cal = timing.Calibration(ping_us=100.0, copy_fixed_us=50.0, copy_us_per_byte=0.0)
    honest = upstream_timing.measure(protocol, _GpuContext(None, None, cal), {"size": 64, "seed": 1}, True)
    assert "error" not in honest and timing.settle(honest) is None, honest
    assert honest["clock"] == protocol.clock and honest["mean_us"] >= 3000.0
    # The wall figure is bound over each call; an events figure over back-to-back calls, since a
    # single call's clock would hold the flush and the hold before the events.
    assert ("judge_call_us" if bound == "calls" else "host_batch_us") in honest
    assert (honest.get("bound") == "calls") == (bound == "calls")
    forged = upstream_timing.measure(protocol, _GpuContext(1.0, 1.0, cal), {"size": 64, "seed": 1}, True)
    why = timing.settle(forged)
    assert why and "judge's clock" in why, forged


@pytest.mark.parametrize("name", ["gpumode-leaderboard-wall", "gpumode-batch", "kernelbench-events", "kgit-adaptive"])
def test_every_timed_loop_stops_partway_through_a_shape_on_a_racing_verdict(name):
    """The loop asks the judge's race after each call (each sample) and ends the shape on a
    verdict: the calls timed so far, the verdict under `raced`, nothing settled or re-timed."""
    from kgit_harness import judge, protocols, racing, upstream_timing

    shape = {"size": 64, "seed": 1}
    key = problem.shape_key(shape)
    cal = timing.Calibration(ping_us=100.0, copy_fixed_us=50.0, copy_us_per_byte=0.0)
    asked = []

    def timed_against(incumbent_us, us, target_rse=0.001):
        # 10% apart a call: a precision of 0.1% is met by no protocol before its most calls; one of
        # 1% (1.22% a shape over vector_add's 3, Protocol.precision) after about 45, well past racing's
        # first verdict.
        wobble = itertools.cycle([0.9, 1.0, 1.1])
        ctx = _GpuContext(lambda: us * next(wobble), None, cal, gpu_s=0.0002)
        ctx.settings = TimingSettings(warmup=0, min_reps=3, target_rse=target_rse, max_time_s=0.0)
        ask = judge._ShapeRace({"name": "inc", "times": {key: incumbent_us}, "noise": 0.002}, [], key, 2, True,
                                 "mean_us")

        def race(times):
            asked.append(len(times))
            return ask(times)

        if name == protocols.DEFAULT:
            settings = TimingSettings(warmup=0, min_reps=3, target_rse=0.0, max_time_s=3.0)
            return timing.measure(ctx.task, ctx.reference, shape, 5, settings, True, torch, ctx.new_slots, cal,
                                  race=race)
        return upstream_timing.measure(protocols.get(name), ctx, shape, True, race=race)

    stats = timed_against(incumbent_us=1000.0, us=5000.0)
    assert stats["raced"]["calls"] == racing.WITHIN_MIN_CALLS == stats["n"], stats
    assert stats["raced"]["slower"] == pytest.approx(5.0, rel=0.02)
    assert stats["mean_us"] == pytest.approx(5000.0, rel=0.02)
    assert asked == list(range(1, racing.WITHIN_MIN_CALLS + 1))
    assert "device_us" not in stats and "bound" not in stats and "judge_batch" not in stats
    if name != protocols.DEFAULT:
        # As fast as the incumbent: timed to the protocol's own end, asked after every call before it.
        asked.clear()
        full = timed_against(incumbent_us=5000.0, us=5000.0, target_rse=0.01)
        assert "raced" not in full and full["n"] == len(asked) + 1 > racing.WITHIN_MIN_CALLS


@pytest.mark.parametrize("wrong_from", [None, 2, 1])
def test_the_device_figure_checks_its_first_output_and_any_later_one_that_differs(monkeypatch, wrong_from):
    """The flushed device-figure calls after a shape's timing run on one input's values: the first
    output is checked, a later one bit for bit the same is not checked again, and a later one that
    differs is, so a kernel right on the first and wrong after it gets no device figure."""
    from kgit_harness import protocols, upstream_timing

    cal = timing.Calibration(ping_us=100.0, copy_fixed_us=50.0, copy_us_per_byte=0.0)
    ctx = _GpuContext(None, None, cal, gpu_s=0.0002)
    # Slot 0 takes the first check, the next max_calls the timed calls, the ones after the device
    # figure's: one arena for all of them.
    first_device_slot = 1 + protocols.get("gpumode-leaderboard-wall").max_calls
    monkeypatch.setattr(upstream_timing, "FRESH_CHUNK", first_device_slot)

    class Drifting(_ReportingSlots):
        def _launch(self, slot):
            super()._launch(slot)
            if wrong_from is not None and slot >= first_device_slot + wrong_from - 1:
                self.slots[slot][2].add_(1.0)

    ctx.new_slots = lambda sample, count: Drifting(_add, sample, count, ctx.task.output, None, None, gpu_s=0.0002)
    checks = []
    real_check = upstream_timing._check
    monkeypatch.setattr(upstream_timing, "_check", lambda *a: checks.append(1) or real_check(*a))
    stats = upstream_timing.measure(protocols.get("gpumode-leaderboard-wall"), ctx, {"size": 64, "seed": 1}, True)
    timed_checks = 1 + stats["n"]  # the first check, then every timed call
    if wrong_from is None:
        assert stats["device_us"] > 0 and len(checks) == timed_checks + 1, (stats, len(checks))
    else:
        assert stats["device_us"] is None
        assert len(checks) == timed_checks + wrong_from  # up to the first wrong one


def test_the_judge_narrows_an_output_only_to_a_dtype_its_values_hold():
    # The runner says which outputs it widened into the judge's buffer; a problem's own check
    # may pick its tolerance by dtype, so the word alone must not give it a narrower copy.
    from types import SimpleNamespace

    from kgit_harness import judge

    out = torch.zeros(4, dtype=torch.float32)
    slots = SimpleNamespace(torch=torch, views=[(None, (out,))])
    assert judge.Slots._dtypes(slots, ["float16"]) == ["float16"]
    assert judge.Slots._dtypes(slots, [None]) == [None]
    for claim in (["int8"], ["float64"], ["bool"], ["float32"], ["nonsense"], ["float16", None], "float16"):
        with pytest.raises(channel.ChannelError, match="dtypes"):
            judge.Slots._dtypes(slots, claim)
    held = torch.tensor([0.5, -2.0, float("nan"), float("inf")])  # every value a float16 value
    narrowed = judge._narrowed(torch, (held,), iter(["float16"]))
    assert narrowed[0].dtype == torch.float16 and torch.equal(narrowed[0][:2].float(), held[:2])
    with pytest.raises(channel.ChannelError, match="float16 cannot hold"):
        judge._narrowed(torch, (torch.tensor([0.1, 1.0]),), iter(["float16"]))


def test_same_values_counts_nan_as_nan_and_an_infinity_only_as_itself():
    nan, inf = float("nan"), float("inf")
    assert checking.same_values(torch, torch.tensor([1.0, nan, -inf]), torch.tensor([1.0, nan, -inf]))
    # A kernel that wrote the largest finite value over an infinite input did change it.
    assert not checking.same_values(torch, torch.tensor([inf]), torch.tensor([torch.finfo(torch.float32).max]))
    assert not checking.same_values(torch, torch.tensor([1.0, nan]), torch.tensor([1.0, 2.0]))
    assert not checking.same_values(torch, torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))  # another dtype
    assert not checking.same_values(torch, torch.tensor([1.0]), torch.tensor([1.0, 1.0]))


def test_a_shape_whose_figures_disagree_is_timed_once_more_on_new_seeds_and_rejected_only_twice(monkeypatch):
    # Other processes' GPU work (other evaluations, a spare pair starting) can fall in the judge's
    # clock for a whole shape: on a GPU the shape is timed again, on inputs of new seeds (nothing
    # of the first timing can be replayed), and rejected only when it disagrees again.
    from types import SimpleNamespace

    from kgit_harness import judge, protocols, upstream_timing

    seen = []
    verdicts = []

    def measure(protocol, ctx, shape, first_shape, race=None):
        seen.append(shape["seed"])
        return {"mean_us": 100.0, "clock": "wall", "bound": "calls", "judge_call_us": 100.0}

    def settle(entry):
        return verdicts.pop(0)

    monkeypatch.setattr(upstream_timing, "measure", measure)
    monkeypatch.setattr(timing, "settle", settle)
    monkeypatch.setattr(judge, "RETIME_WAIT_S", 0.0)
    spec = SimpleNamespace(secret_seed=1, timing=None, race=None)
    protocol = protocols.get("gpumode-leaderboard-wall")

    def time_shapes(on_gpu):
        shapes: list = []
        outcome = judge._time_shapes(spec, None, None, None, on_gpu, None, {}, None, protocol, None, [], shapes,
                                     [{"size": 8, "seed": 7}, {"size": 16, "seed": 9}], "mean_us")
        return outcome, shapes

    verdicts[:] = ["disagrees", None, None]  # contention in the first shape's first timing only
    outcome, shapes = time_shapes(True)
    assert outcome is None and seen == [7, 7 + judge.RETIME_SEED_OFFSET, 9], seen
    assert shapes[0]["retimed"] == "disagrees" and "retimed" not in shapes[1]
    assert shapes[0]["key"] == problem.shape_key({"size": 8, "seed": 7}) and "seed" not in shapes[0]["shape"]

    seen.clear()
    verdicts[:] = ["disagrees", "disagrees again"]  # a forged figure disagrees every time
    with pytest.raises(judge.Verdict) as caught:
        time_shapes(True)
    assert caught.value.status == "rejected" and "disagrees again" in str(caught.value) and len(seen) == 2

    seen.clear()
    verdicts[:] = ["disagrees"]  # the interpreter's figures are the judge's clock: nothing to time again
    with pytest.raises(judge.Verdict):
        time_shapes(False)
    assert seen == [7]


FAKE_RUNNER = """
import socket, sys, time
from kgit_harness import channel
fd = int(sys.argv[sys.argv.index("--channel-fd") + 1])
sock = socket.socket(fileno=fd)
message, _ = channel.recv(sock)
assert message["op"] == "bye"
if {acks}:
    channel.send(sock, {{"op": "bye", "rid": None}})
time.sleep(60)  # as slow to end as it likes
"""


@pytest.mark.parametrize("acks", [True, False])
def test_the_judge_goes_on_once_its_runner_says_bye_and_kills_one_that_does_not(tmp_path, monkeypatch, acks):
    """A runner told to end flushes and lets go of its output, then says so; the judge goes on
    without waiting for its process to end (a device context's teardown). One that does not
    answer within BYE_WAIT_S is killed and waited for."""
    from kgit_harness import judge
    from kgit_harness.spec import StartSpec

    script = tmp_path / "fake_runner.py"
    script.write_text(FAKE_RUNNER.format(acks=acks))
    monkeypatch.setattr(judge, "BYE_WAIT_S", 1.0)
    runner = judge.Runner(StartSpec(problem_dir=str(tmp_path), candidate_dir=str(tmp_path), kernel_split=False,
                                    runner_prefix=(sys.executable, str(script))))
    runner.ready = True
    runner.close()
    if acks:
        assert runner.proc.returncode is None  # killed, not reaped: the judge did not wait
        assert runner.proc.wait(timeout=30) == -signal.SIGKILL
    else:
        assert runner.proc.returncode == -signal.SIGKILL


def test_a_fresh_shape_makes_an_empty_request_after_a_few_calls_and_gives_the_hold_with_every_call(monkeypatch):
    """The floor verdict needs the fastest of a few empty requests, not one a call (each cost
    0.75 ms on the H200); the runner's allocator still gets the judge's free segments for every
    call, with the call's request, to take once its reply is sent."""
    from kgit_harness import protocols, upstream_timing

    segments = [1 << 20, 3 << 20]
    monkeypatch.setattr(timing, "free_segments", lambda torch, budget: list(segments))
    requests = []

    class Spy(_ReportingSlots):
        def call(self, slot, *, clock=None, flush=True, empty=False, hold=None):
            requests.append((clock, empty, hold))
            return super().call(slot, clock=clock, flush=flush, empty=empty, hold=hold)

    class Context(_GpuContext):
        def new_slots(self, sample, count):
            return Spy(_add, sample, count, self.task.output, self.us, self.host_us, gpu_s=self.gpu_s)

    cal = timing.Calibration(ping_us=100.0, copy_fixed_us=50.0, copy_us_per_byte=0.0)
    rng = random.Random(0)
    ctx = Context(lambda: 100.0 + 40.0 * rng.random(), None, cal, gpu_s=0.0002)
    ctx.settings = TimingSettings(warmup=0, min_reps=3, target_rse=0.001, max_time_s=0.0)  # to the 100-call cap
    stats = upstream_timing.measure(protocols.get("gpumode-leaderboard-wall"), ctx, {"size": 64, "seed": 1}, True)
    assert "error" not in stats and stats["n"] == 100, stats
    first = next(i for i, r in enumerate(requests) if r[0] == "wall")
    timed = [i for i, r in enumerate(requests) if r[0] == "wall"]
    assert len(timed) == 100 and all(requests[i][2] == segments for i in timed)
    followed = [requests[i + 1][1] for i in timed]
    assert followed == [timing.empty_due(i) for i in range(100)]
    assert sum(followed) == 15  # after calls 0, 1, 2, then 7, 15, ..., 95
    # Before the first call, an empty request gives the allocator its blocks.
    assert any(r[1] and r[2] == segments for r in requests[:first])


def test_the_runner_refuses_a_hold_that_is_not_a_list_of_sizes_within_its_limit():
    from kgit_harness import runner

    assert runner.Session._hold_sizes(None) == [] and runner.Session._hold_sizes([1, 2]) == [1, 2]
    for bad in ("64", [0], [-1], [1.5], [True], [runner.HOLD_MAX_BYTES + 1], [runner.HOLD_MAX_BYTES, 1]):
        with pytest.raises(channel.ChannelError, match="'hold' must be a list of sizes"):
            runner.Session._hold_sizes(bad)
