"""The selector sees re-measurements: the latest timing per device and the spread."""

from conftest import logged

from kgit.scientist import select as select_mod


def _attempt(notes: str):
    message = ("x: speedup 1.10x\n\nKgit-Experiment: 1\nKgit-Attempt: 1\nKgit-Status: ok\n"
               "Kgit-Device: NVIDIA H200\nKgit-Harness: h\nKgit-Geomean-us: 10.0\nKgit-Time-us: n=1 10.0\n")
    return logged(["a" * 40, "b" * 40, "t" * 40, "n", "e", "5", message, notes])[0]


def test_row_shows_devices_and_spread():
    notes = ('{"device":"AMD Instinct MI300X","geomean_us":20.0,"when":10,"times":{}}\n\n'
             '{"device":"AMD Instinct MI300X","geomean_us":22.0,"when":20,"times":{}}\n')
    line = select_mod.row(_attempt(notes))
    assert "remeasured:" in line
    assert "AMD Instinct MI300X 22.0 (n=2, spread 10.0%)" in line
    assert "NVIDIA H200 10.0 (n=1" in line


def test_row_without_remeasurements_has_no_device_column():
    assert "remeasured" not in select_mod.row(_attempt(""))


def _cpu_attempt(sha: str, notes: str):
    message = ("x: correct\n\nKgit-Experiment: 2\nKgit-Attempt: 1\nKgit-Status: ok\n"
               "Kgit-Device: cpu\nKgit-Timing: interpreter\nKgit-Harness: h\nKgit-Geomean-us: 9000.0\n")
    return logged([sha * 40, "b" * 40, "t" * 40, "n", "e", "6", message, notes])[0]


def test_a_kernel_wrong_on_the_gpu_says_so_and_why():
    """Correct in the interpreter, incorrect when re-measured on the H200: the model must see it."""
    from kgit.scientist.view import ArchiveView

    measured = _attempt('{"device":"NVIDIA H200","harness":"h","status":"ok","geomean_us":10.0,"when":5}\n')
    wrong = _cpu_attempt("c", '{"device":"NVIDIA H200","harness":"h2","status":"incorrect","when":9,'
                              '"error":"m=64,n=576: relative Frobenius error 0.03 on a 128-column piece"}\n')
    other = _cpu_attempt("d", '{"device":"NVIDIA H200","harness":"h2","status":"ok","geomean_us":7.5,"when":9}\n')
    also = _cpu_attempt("e", '{"device":"NVIDIA H200","harness":"h","status":"ok","geomean_us":9.0,"when":6}\n')
    view = ArchiveView([measured, also, wrong, other])  # harness h measured the most: it ranks
    assert view.device == "NVIDIA H200"
    said = view.timing(wrong)
    assert said.startswith("correct in the interpreter, but incorrect on NVIDIA H200")
    assert "relative Frobenius error 0.03" in said
    assert view.timing(other).startswith("7.5 us on NVIDIA H200, by another harness version (h2)")


def test_a_note_of_a_failed_measurement_keeps_its_reason_in_one_line():
    from kgit.archive import measure
    from kgit_harness.result import Result

    failed = Result.from_dict({"schema": "kgit.result/1", "status": "incorrect", "device": "NVIDIA H200",
                               "error": "m=64 (seed 3): mismatch\n  max abs error 2.0"})
    assert measure.note_record(failed).to_note()["error"] == "m=64 (seed 3): mismatch"
    crash = Result.from_dict({"schema": "kgit.result/1", "status": "crash",
                              "error": "Traceback (most recent call last):\n  File x\nRuntimeError: boom"})
    assert measure.note_record(crash).to_note()["error"] == "RuntimeError: boom"


def _measured(sha: str, experiment: int, notes: list[tuple[str, float, int]]):
    message = (f"x: correct\n\nKgit-Experiment: {experiment}\nKgit-Attempt: {0 if experiment == 0 else 1}\n"
               "Kgit-Status: ok\nKgit-Device: cpu\nKgit-Timing: interpreter\nKgit-Harness: h\nKgit-Geomean-us: 9000.0\n")
    note = "\n\n".join('{"device":"NVIDIA H200","harness":"%s","status":"ok","geomean_us":%s,"when":%d}' % n
                       for n in notes)
    return logged([sha * 40, "b" * 40, "t" * 40, "n", "e", "6", message, note + "\n"])[0]


def test_a_baseline_remeasured_by_a_newer_harness_makes_it_the_scale():
    from kgit.archive import figures

    old = [_measured("1", 0, [("old", 480.0, 1), ("new", 470.0, 50)]),
           _measured("2", 1, [("old", 180.0, 2)]), _measured("3", 2, [("old", 170.0, 3)]),
           _measured("4", 3, [("old", 175.0, 4)]), _measured("5", 4, [("new", 150.0, 51)])]
    group = figures.gpu_group(old)
    assert (group.device, group.harness) == ("NVIDIA H200", "new") and len(group.entries) == 2
    assert figures.best(old).sha == "5" * 40
    # Without the baseline the newer version is one measurement among others: the most attempts rank.
    no_base = [a for a in old if a.sha != "1" * 40] + [_measured("1", 0, [("old", 480.0, 1)])]
    assert figures.gpu_group(no_base).harness == "old"


def test_a_launch_bound_shape_shows_the_gpu_time_beside_the_figure():
    from kgit.archive import measure
    from kgit.scientist.design import base_times
    from kgit.scientist.view import ArchiveView
    from kgit_harness.result import Result

    doc = Result.from_dict({"schema": "kgit.result/1", "status": "ok", "device": "NVIDIA H200", "harness": "h",
                            "ranking": "mean", "geomean_us": 100.0, "timing": "events", "shapes": [
                                {"key": "m=64", "mean_us": 197.3, "clock": "judge", "events_mean_us": 64.1,
                                 "host_call_us": 90.0, "runner_batch_host_us": 185.0},
                                {"key": "m=128", "mean_us": 400.0, "clock": "events", "events_mean_us": 400.0}]})
    record = measure.note_record(doc).to_note()
    assert record["launch_bound"] == {"m=64": {"gpu_us": 64.1, "host_us": 185.0}}
    import json
    base = logged(["1" * 40, "b" * 40, "t" * 40, "n", "e", "6",
                   "x: correct\n\nKgit-Experiment: 0\nKgit-Attempt: 0\nKgit-Status: ok\n", json.dumps(record) + "\n"])[0]
    text = base_times(ArchiveView([base]), base.sha)
    assert "- m=64: 197.3 us; launch-bound: the GPU took 64.1 us, the call's host side 185.0 us" in text
    assert "1 shape(s) are launch-bound" in text and "m=128: 400.0 us\n" in text + "\n"


def test_the_selector_row_marks_launch_bound_shapes():
    import json

    record = {"device": "NVIDIA H200", "harness": "h", "status": "ok", "geomean_us": 100.0, "when": 5,
              "times": {"m=64": 197.3, "m=128": 400.0}, "launch_bound": {"m=64": {"gpu_us": 64.1, "host_us": 185.0}}}
    message = ("x: correct\n\nKgit-Experiment: 0\nKgit-Attempt: 0\nKgit-Status: ok\nKgit-Device: cpu\n"
               "Kgit-Timing: interpreter\nKgit-Harness: h\nKgit-Geomean-us: 9000.0\n")
    a = logged(["1" * 40, "b" * 40, "t" * 40, "n", "e", "6", message, json.dumps(record) + "\n"])[0]
    line = select_mod.row(a)
    assert "m=64:197.3(GPU 64.1, launch-bound)" in line and "m=128:400.0" in line
    assert "m=128:400.0(" not in line
