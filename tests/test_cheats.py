"""Cheating kernels, one per family (tests/cheats/), each caught for the right reason.

Cheats run the harness in a child process (see tests/cheats/__init__.py); the
`gpu` ones need a CUDA or ROCm device and run with `pytest -m gpu tests/test_cheats.py`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from cheats import FAST_TIMING, baseline, in_fork, run_harness, source

from kgit import config as config_mod
from kgit.evaluation import child


def _last_error(doc) -> str:
    return (doc.get("error") or "").strip()


@pytest.mark.parametrize("name, reason", [
    ("forbidden_static", "forbidden by the problem: torch.add"),
    ("forbidden_runtime", "forbidden by the problem: torch.add"),
    ("import_reference", "forbidden import: reference (the reference)"),
    ("gc_reference", "object hunting through gc"),
    ("gc_expected", "object hunting through gc"),
    ("patched_timer", "patched timers"),
    ("thread_deferral", "threads started by the kernel"),
])
@pytest.mark.slow
def test_rejected_with_the_rule(tmp_path, name, reason):
    doc = run_harness(tmp_path, name)
    assert (doc["status"], doc["reason"]) == ("rejected", reason), _last_error(doc)


@pytest.mark.parametrize("name, message", [
    ("cache_identity", "differ beyond"),
    ("partial", "NaN or Inf"),
    ("nan_inf", "1 of 16000 outputs are NaN or Inf"),
    ("precision", "differ beyond rtol=1e-05"),
    ("mutate_inputs", "the kernel modified the input"),
    ("lazy_output", "torch.Tensor subclass"),
])
@pytest.mark.slow
def test_incorrect_with_the_cause(tmp_path, name, message):
    doc = run_harness(tmp_path, name)
    assert doc["status"] == "incorrect", _last_error(doc)
    assert message in doc["error"]


@pytest.mark.slow
def test_output_right_once_then_stale_fails_the_timed_recheck(tmp_path):
    doc = run_harness(tmp_path, "stale_later")
    assert doc["status"] == "incorrect"
    assert all(t["ok"] for t in doc["tests"])  # it passed every correctness test...
    assert "timed repetition" in doc["error"]  # ...and was caught by the re-check of timed outputs


def test_memorised_published_outputs_fail_the_secret_seeds(tmp_path):
    doc = run_harness(tmp_path, "memorized")
    assert doc["status"] == "incorrect"
    published = {101, 102, 103}
    assert all(t["ok"] for t in doc["tests"] if t["seed"] in published)
    secret = [t for t in doc["tests"] if t["seed"] not in published]
    assert secret and not any(t["ok"] for t in secret)


def test_the_gc_cheat_would_find_an_expected_output_that_existed():
    # gc_expected is rejected by the audit hook; behind that line, no expected output
    # exists during the call (tests/test_harness.py checks that). This is the control:
    # unguarded, with an expected output alive, the same cheat would pass.
    def attempt():
        import torch

        namespace = {}
        exec(compile(source("gc_expected"), "kernel.py", "exec"), namespace)
        a, b = torch.randn(4097), torch.randn(4097)
        expected = a + b
        out = torch.full_like(a, float("nan"))
        return bool(torch.equal(namespace["custom_kernel"]((a, b, out)), expected))

    assert in_fork(attempt) is True


@pytest.mark.parametrize("name", ["find_reference", "frame_reference"])
@pytest.mark.slow
def test_reference_is_not_importable_nor_loaded_nor_on_the_stack(tmp_path, name):
    # The reference lives in the judge only: no module, no frame of the runner holds it.
    doc = run_harness(tmp_path, name)
    assert doc["status"] == "runtime-error", _last_error(doc)
    assert "reference not found" in doc["error"]


@pytest.mark.slow
def test_honest_kernel_passes_with_guards_on(tmp_path):
    # Plain torch ops, none of them forbidden: the op guard must let them through.
    doc = run_harness(tmp_path, "honest_torch_softmax")
    assert doc["status"] == "ok", _last_error(doc)
    assert len(doc["tests"]) == 2 * 3  # every CPU test shape, published and secret seed
    assert doc["speed_of_light"]["checked"] is False and "interpreter" in doc["speed_of_light"]["why"]
    assert all(s["n"] >= FAST_TIMING["min_reps"] and s["rechecked"] >= 1 for s in doc["shapes"])


@pytest.mark.slow
def test_shipped_baseline_passes_through_the_real_child(kernel_repo, tmp_path):
    """The child.run_child path kgit uses: python -I in its own process group."""
    doc = child.evaluate_tree(kernel_repo, config_mod.load(kernel_repo), state_dir=tmp_path / "state")
    assert doc["status"] == "ok", (doc.get("error"), doc.get("stderr"))
    assert doc["schema"] == "kgit.result/1" and doc["geomean_us"] > 0


@pytest.mark.parametrize("problem", ["vector_add", "softmax"])
@pytest.mark.slow
def test_shipped_triton_baselines_pass(tmp_path, problem):
    doc = run_harness(tmp_path, problem=problem, code=baseline(problem))
    assert doc["status"] == "ok", _last_error(doc)


def test_a_runtime_cheat_is_rejected_through_the_real_child(kernel_repo, tmp_path):
    config = config_mod.load(kernel_repo)
    (kernel_repo / "kernel.py").write_text(source("forbidden_runtime"))
    doc = child.evaluate_tree(kernel_repo, config, state_dir=tmp_path / "state")
    assert (doc["status"], doc["reason"]) == ("rejected", "forbidden by the problem: torch.add")


# ---- the classes the judge/runner split defeats (each got through the one-process harness) ----

def test_a_forged_result_document_and_reply_do_not_count(tmp_path):
    # Written to every fd the runner holds (the channel included) and to stdout; the
    # judge holds the result pipe, and a forged "done" leaves the poisoned output there.
    doc = run_harness(tmp_path, "forged_result")
    assert doc["status"] in ("incorrect", "crash", "rejected"), _last_error(doc)
    assert doc["geomean_us"] is None and doc["shapes"] == []


def test_a_forged_result_through_the_real_child_is_not_the_verdict(kernel_repo, tmp_path):
    # As kgit evaluates, the whole static policy applies: the forger's computed names never run
    # (run_harness above shows the layers behind it holding when they do).
    (kernel_repo / "kernel.py").write_text(source("forged_result"))
    doc = child.evaluate_tree(kernel_repo, config_mod.load(kernel_repo), state_dir=tmp_path / "state")
    assert (doc["status"], doc["reason"]) == ("rejected", "forbidden call: getattr with a computed name "
                                              "(dynamic attribute access)"), doc.get("error")
    assert doc["geomean_us"] is None and '"status": "ok"' not in doc["stdout"]


@pytest.mark.parametrize("name", ["patched_checker", "patched_torch", "lying_mode"])
@pytest.mark.slow
def test_nan_outputs_fail_whatever_the_candidate_patches_in_its_own_process(tmp_path, name):
    doc = run_harness(tmp_path, name)
    assert doc["status"] == "incorrect", _last_error(doc)
    assert "NaN or Inf" in doc["error"]


@pytest.mark.slow
def test_a_patched_clock_on_the_stack_does_not_change_the_judges_figure(tmp_path):
    # Every call really spends 30 ms and tells the runner's clock it took 1 us.
    doc = run_harness(tmp_path, "patched_clock")
    assert doc["status"] == "ok", _last_error(doc)
    assert doc["shapes"] and all(s["clock"] == "judge" and s["min_us"] >= 30_000 for s in doc["shapes"])
    assert all(s["host_call_us"] < 1000 for s in doc["shapes"])  # what the patched runner clock said


@pytest.mark.slow
def test_work_deferred_to_a_profile_hook_is_counted_or_fails(tmp_path):
    doc = run_harness(tmp_path, "profile_deferral")
    if doc["status"] == "ok":
        assert all(s["min_us"] >= 30_000 for s in doc["shapes"]), doc["shapes"]
    else:
        assert doc["status"] == "incorrect", _last_error(doc)


@pytest.mark.slow
def test_the_secret_seed_and_the_sampler_are_not_in_the_runner(tmp_path, capfd):
    doc = run_harness(tmp_path, "seed_hunt")
    found = [line for line in capfd.readouterr().out.splitlines() if line.startswith("KGIT-FOUND")]
    assert doc["status"] == "ok", _last_error(doc)
    assert found == ["KGIT-FOUND nothing"], found


def test_the_reference_read_from_disk_gets_no_pass(tmp_path):
    # Found on disk (the shipped problem in the installed harness) its ref_kernel runs in
    # the runner, under the op guard: vector_add's reference adds with `+`, which reaches
    # aten::add, named by the first forbidden name that lowers to it.
    doc = run_harness(tmp_path, "reference_from_disk")
    assert doc["status"] != "ok"
    assert (doc["status"], doc["reason"]) == ("rejected", "forbidden by the problem: torch.add") or \
        "reference not found" in (doc["error"] or ""), _last_error(doc)


# ---- GPU: run on the device machine with `pytest -m gpu tests/test_cheats.py` ----

GPU_TIMING = {"target_rse": 0.01, "max_time_s": 0.5, "min_reps": 10, "warmup": 2}


def _gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.fail("gpu tests need a CUDA or ROCm device (deselect them with -m 'not gpu')")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["patched_events", "patched_synchronize"])
def test_gpu_patched_timing_functions(tmp_path, name):
    _gpu()
    doc = run_harness(tmp_path, name, GPU_TIMING)
    assert (doc["status"], doc["reason"]) == ("rejected", "patched timers"), _last_error(doc)


@pytest.mark.gpu
def test_gpu_side_stream_work_escapes_the_events_and_the_judges_clock_catches_it(tmp_path):
    _gpu()
    doc = run_harness(tmp_path, "side_stream", GPU_TIMING)
    assert (doc["status"], doc["reason"]) == ("rejected", "timings disagree with the judge's clock"), _last_error(doc)


@pytest.mark.gpu
def test_gpu_forged_event_figures_disagree_with_the_judges_clock(tmp_path):
    # Inputs and outputs cross to the runner through CUDA IPC; its clock is patched on
    # the stack to report 0.5 us a call, and the judge's own clock over a batch says otherwise.
    _gpu()
    doc = run_harness(tmp_path, "forged_events", GPU_TIMING)
    assert (doc["status"], doc["reason"]) == ("rejected", "timings disagree with the judge's clock"), _last_error(doc)
    shape = doc["shapes"][-1]
    assert shape["min_us"] < 1.0 and shape["host_batch_us"] > 100.0, shape  # forged, then caught


@pytest.mark.gpu
def test_gpu_several_evaluations_on_one_gpu_reject_no_honest_kernel_and_still_the_forged_one(tmp_path):
    # On the H200, with six evaluations sharing the GPU, honest baselines ended "rejected
    # (timings disagree with the judge's clock)". Here five run at once on one GPU, under
    # kgit's protocol and the wall clock's, beside a runner that forges its event figures.
    from concurrent.futures import ThreadPoolExecutor

    _gpu()
    honest = [("vector_add", None), ("softmax", None), ("vector_add", "gpumode-leaderboard-wall"),
              ("softmax", "gpumode-leaderboard-wall"), ("vector_add", "gpumode-leaderboard-events")]

    def evaluate(i, problem, protocol):
        extra = {"protocol": protocol} if protocol else {}
        return run_harness(tmp_path / f"h{i}", timing=GPU_TIMING, problem=problem, code=baseline(problem), **extra)

    with ThreadPoolExecutor(len(honest) + 1) as pool:
        forged = pool.submit(run_harness, tmp_path / "forged", "forged_events", GPU_TIMING)
        docs = [pool.submit(evaluate, i, *job) for i, job in enumerate(honest)]
        docs = [d.result() for d in docs]
        forged_doc = forged.result()
    for job, doc in zip(honest, docs):
        assert doc["status"] == "ok", (job, _last_error(doc))
    assert (forged_doc["status"], forged_doc["reason"]) == ("rejected", "timings disagree with the judge's clock"), \
        _last_error(forged_doc)


@pytest.mark.gpu
def test_gpu_forged_events_on_a_side_stream_are_rejected(tmp_path):
    # Events and host figures both forged small, the work on a side stream: nothing the
    # runner reports accounts for what the judge's clock saw.
    _gpu()
    doc = run_harness(tmp_path, "forged_events_side_stream", GPU_TIMING)
    assert (doc["status"], doc["reason"]) == ("rejected", "timings disagree with the judge's clock"), _last_error(doc)
    assert doc["shapes"][-1]["events_min_us"] < 1.0, doc["shapes"][-1]


@pytest.mark.gpu
def test_gpu_forged_host_figures_gain_nothing(tmp_path):
    # Huge host figures "explain" the judge's clock, so the events do not rank: the judge's
    # clock does, and it holds the ~200 us a call the kernel really keeps the GPU busy.
    _gpu()
    doc = run_harness(tmp_path, "forged_host_figures", GPU_TIMING)
    assert doc["status"] == "ok", _last_error(doc)
    for shape in doc["shapes"]:
        assert shape["events_min_us"] < 1.0 and shape["host_call_us"] > 1e5, shape  # what the runner said
        assert shape["clock"] == "judge" and shape["min_us"] > 100.0 and "judge's clock" in shape["note"], shape


@pytest.mark.gpu
@pytest.mark.parametrize("problem", ["vector_add", "softmax"])
def test_gpu_honest_baseline_passes_within_the_speed_of_light(tmp_path, problem):
    _gpu()
    doc = run_harness(tmp_path, timing=GPU_TIMING, problem=problem, code=baseline(problem))
    assert doc["status"] == "ok", _last_error(doc)
    assert doc["timing"] == "events" and doc["speed_of_light"]["checked"] is True
    assert doc["speed_of_light"]["peak"]["source"] in ("datasheet", "measured")
    for shape in doc["shapes"]:
        assert shape["sol_us"] and shape["min_us"] >= shape["sol_us"] * 0.5
        assert 0 < shape["host_batch_us"] and shape["clock"] in ("events", "judge"), shape
        if shape["clock"] == "judge":
            # Only a launch-bound shape: the judge's clock over its events, ranked by it.
            assert shape["mean_us"] > shape["events_mean_us"] and "launch-bound" in shape["note"], shape
    # The largest shapes are GPU-bound: their flushed events rank them.
    assert doc["shapes"][-1]["clock"] == "events", doc["shapes"][-1]


@pytest.mark.gpu
def test_gpu_faster_than_light_with_an_injected_slow_device(tmp_path):
    # A device 1000x slower than an H200 makes the honest baseline impossibly fast:
    # the guard must fire on real event timings.
    _gpu()
    doc = run_harness(tmp_path, timing=GPU_TIMING, problem="vector_add", code=baseline("vector_add"),
                     device_peaks={"name": "test slow GPU", "bytes_per_s": 4.8e9})
    assert (doc["status"], doc["reason"]) == ("rejected", "faster than physically possible"), _last_error(doc)
    assert doc["speed_of_light"]["peak"]["source"] == "override"


@pytest.mark.gpu
def test_gpu_l2_is_flushed_between_timed_calls(tmp_path):
    # The 1M-element shape (12 MB) fits in an H100/H200 L2. Timed calls must pay for
    # HBM reads like do_bench's flushed calls do, not run at warm-L2 speed.
    torch = _gpu()
    import triton.testing

    doc = run_harness(tmp_path, timing=GPU_TIMING, problem="vector_add", code=baseline("vector_add"))
    assert doc["status"] == "ok", _last_error(doc)
    # The flushed, event-timed calls (kept as events_* whichever clock ranks the shape:
    # a shape this small may be launch-bound and ranked by the judge's clock).
    harness = next(s for s in doc["shapes"] if s["shape"]["size"] == 1 << 20)["events_median_us"]

    # Triton needs the kernel in a real file (it reads the source back).
    path = tmp_path / "l2_kernel.py"
    path.write_text(baseline("vector_add"))
    spec = importlib.util.spec_from_file_location("l2_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    namespace = vars(module)
    a, b = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(a)
    call = lambda: namespace["custom_kernel"]((a, b, out))  # noqa: E731
    cold = triton.testing.do_bench(call, return_mode="median") * 1e3
    # Warm: the same call right after one that left its 12 MB in L2, with the GPU held
    # busy while it is launched (as the harness does) so launch latency is not counted.
    # A loop of back-to-back calls would measure the host's launch rate instead.
    warm_times = []
    for _ in range(20):
        call()
        torch.cuda._sleep(2_000_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        warm_times.append(start.elapsed_time(end) * 1e3)
    warm = sorted(warm_times)[len(warm_times) // 2]
    assert harness >= 0.9 * cold, (harness, cold, warm)
    assert harness > 1.1 * warm, (harness, cold, warm)


# ---- what a hostile runner reports, and when: nothing the runner says reaches the archive unchecked ----

@pytest.mark.parametrize("name", ["timed_only_inference", "guard_flag_cleared"])
@pytest.mark.slow
def test_a_forbidden_op_in_timed_calls_only_is_caught_whatever_it_skips(tmp_path, name):
    # Inference mode skips autograd's keys, and the trap no longer asks a flag the kernel can
    # clear: the same guard sits at a key every call's dispatch passes.
    doc = run_harness(tmp_path, name)
    assert (doc["status"], doc["reason"]) == ("rejected", "forbidden by the problem: torch.softmax"), _last_error(doc)


def test_every_computed_name_cheat_is_refused_first(tmp_path):
    # Under the whole policy, as kgit evaluates: the names built at run time never run.
    for name in ("timed_only_inference", "guard_flag_cleared", "patched_clock", "gc_reference", "patched_torch"):
        doc = run_harness(tmp_path / name, name, computed_names=False)
        assert doc["status"] == "rejected" and "computed name" in doc["reason"], (name, doc["reason"])


def _hostile(mode: str) -> list[str]:
    return [sys.executable, str(Path(__file__).with_name("hostile_runner.py")), mode, "--"]


@pytest.mark.slow
def test_forged_build_facts_keep_only_the_targets_asked_for_and_the_kernels_the_source_defines(tmp_path):
    doc = run_harness(tmp_path, problem="vector_add", code=baseline("vector_add"), targets=["gfx942", "sm_90a"],
                      runner_prefix=_hostile("forge-targets"))
    assert doc["status"] == "ok", _last_error(doc)
    facts = doc["targets"]
    assert set(facts["results"]) == {"gfx942", "sm_90a"} and facts["reported_by"] == "candidate"
    assert facts["results"]["gfx942"]["kernels"] == [] and facts["results"]["gfx942"]["builds"] is None
    assert len(facts["results"]["gfx942"]["error"]) <= 300
    dropped = " ".join(facts["dropped"])
    assert "not asked for" in dropped and "_kernel_the_source_lacks" in dropped and "notes" in dropped


def test_a_reply_sent_ahead_of_its_request_is_a_broken_protocol(tmp_path):
    doc = run_harness(tmp_path, problem="vector_add", code=baseline("vector_add"),
                      runner_prefix=_hostile("reply-ahead"))
    assert (doc["status"], doc["reason"]) == ("rejected", "broken channel protocol"), _last_error(doc)


@pytest.mark.slow
def test_the_runners_own_checks_are_outside_the_judges_clock(tmp_path):
    # Each call's checks take half a second in this runner (they ran twice inside each call's
    # figure before); the judge's figure of a call of milliseconds must not hold them, so an
    # honest runner's checks cost its figure nothing.
    doc = run_harness(tmp_path, problem="vector_add", code=baseline("vector_add"),
                      runner_prefix=_hostile("slow-checks"))
    assert doc["status"] == "ok", _last_error(doc)
    assert all(s["mean_us"] < 400_000 for s in doc["shapes"]), [s["mean_us"] for s in doc["shapes"]]
