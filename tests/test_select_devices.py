"""The selector sees re-measurements: the latest timing per device and the spread."""

from kgit.archive.repo import parse_log
from kgit.scientist import select as select_mod


def _attempt(notes: str):
    message = ("x: speedup 1.10x\n\nKgit-Experiment: 1\nKgit-Attempt: 1\nKgit-Status: ok\n"
               "Kgit-Device: NVIDIA H200\nKgit-Harness: h\nKgit-Geomean-us: 10.0\nKgit-Time-us: n=1 10.0\n")
    record = "\x1f".join(["a" * 40, "b" * 40, "t" * 40, "n", "e", "5", message, notes])
    return parse_log(record + "\0")[0]


def test_row_shows_devices_and_spread():
    notes = ('{"device":"AMD Instinct MI300X","geomean_us":20.0,"when":10,"times":{}}\n\n'
             '{"device":"AMD Instinct MI300X","geomean_us":22.0,"when":20,"times":{}}\n')
    line = select_mod.row(_attempt(notes))
    assert "remeasured:" in line
    assert "AMD Instinct MI300X 22.0 (n=2, spread 10.0%)" in line
    assert "NVIDIA H200 10.0 (n=1" in line


def test_row_without_remeasurements_has_no_device_column():
    assert "remeasured" not in select_mod.row(_attempt(""))
