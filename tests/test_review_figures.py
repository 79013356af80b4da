"""`kgit log` and `kgit best` on an archive timed in the interpreter and re-measured on a GPU:
the ranking device's figures are printed, interpreter ratios are not shown as speed, and
numbers are plain (no 1.33104e+06)."""

from __future__ import annotations

import json

from kgit.archive.repo import parse_log
from kgit.review import text

GPU = "NVIDIA H200"


def attempt(sha, experiment, when, geomean, speedup=None, gpu_us=None, hypothesis="h"):
    """An attempt timed in the interpreter, with a `kgit remeasure` note on the GPU when gpu_us is given."""
    message = (f"x\n\nKgit-Experiment: {experiment}\nKgit-Attempt: 1\nKgit-Status: ok\nKgit-Device: cpu\n"
               f"Kgit-Timing: interpreter\nKgit-Harness: h\nKgit-Geomean-us: {geomean}\n"
               f"Kgit-Branch: kgit/{experiment}-x\nKgit-Hypothesis: {hypothesis}\n"
               + (f"Kgit-Speedup: {speedup}\nKgit-Speedup-Baseline: {speedup}\n" if speedup else ""))
    note = "" if gpu_us is None else json.dumps({"device": GPU, "harness": "g", "timing": "events", "status": "ok",
                                                 "geomean_us": gpu_us, "when": 100 + when, "times": {}}) + "\n"
    record = "\x1f".join([sha * 40, "", "t" * 40, "n", "e", str(when), message])
    return parse_log(record + "\0", notes={sha * 40: note})[0]


def archive():
    return [attempt("a", 0, 1, 750000.0, gpu_us=483.0),
            attempt("b", 1, 2, 2069440.91, speedup=0.36, gpu_us=169.10, hypothesis="K-major split-K"),
            attempt("c", 2, 3, 1331040.0, speedup=0.56)]


def test_best_prints_the_figures_of_the_device_that_ranks_it():
    attempts = archive()
    best = next(a for a in attempts if a.experiment == 1)
    first, rule = text.best_lines(attempts, best)
    assert rule.startswith(f"rule: the fastest geomean on {GPU}")
    assert f"169.10 us on {GPU}" in first and "2.86x vs baseline" in first
    assert "2069440" not in first and "0.36x" not in first


def test_best_of_an_interpreter_only_archive_claims_no_speed():
    attempts = [attempt("a", 0, 1, 750000.0), attempt("c", 2, 3, 1331040.0, speedup=0.56)]
    first, rule, can, gpu = text.best_lines(attempts, attempts[1])
    assert "latest correct attempt" in first and "best" not in first
    assert "0.56x" not in first and "1331040" not in first
    assert "most recent correct attempt" in rule
    assert "correctness only (1 of 1 attempt(s) correct)" in can and "kgit remeasure --all" in gpu


def test_log_prints_plain_numbers_blank_interpreter_ratios_and_the_ranking_devices_column():
    table = text.log_table(archive(), wide=True)
    assert "1331040.0" in table and "e+06" not in table
    assert "0.56x" not in table and "0.36x" not in table  # interpreter ratios are not speed
    header = table.splitlines()[0]
    assert f"{GPU} us" in header and f"vs baseline on {GPU}" in header
    row = next(line for line in table.splitlines() if "kgit/1-x" in line)
    assert "169.10" in row and "2.86x" in row


def test_log_fits_the_terminal_and_says_repeated_columns_once():
    long = "split K four ways and keep the partial sums in shared memory, then reduce them in a second pass"
    attempts = [attempt("a", 0, 1, 750000.0), attempt("b", 1, 2, 2069440.91, speedup=0.36, hypothesis=long),
                attempt("c", 2, 3, 1331040.0, speedup=0.56, hypothesis=long)]
    table = text.log_table(attempts, width=80)
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 80
    # The device and timing method, the same on every row, said once above the table.
    assert lines[0] == "measured on, every correct attempt: cpu, Triton interpreter (not performance)"
    assert table.count("interpreter") == 1
    head = next(line for line in lines if line.startswith("exp "))
    for gone in ("branch", "vs base", "verdict", "measured on"):
        assert gone not in head
    assert "split K four ways" in table and long not in table  # cut to fit, not dropped
    wide = text.log_table(attempts, width=80, wide=True)
    assert long in wide and "kgit/1-x" in wide and wide.count("Triton interpreter") == 3
    assert max(len(line) for line in wide.splitlines()) > 80


def test_log_keeps_columns_that_differ_between_rows():
    attempts = archive()
    table = text.log_table(attempts, width=200)
    head = next(line for line in table.splitlines() if line.startswith("exp "))
    assert "gpu us" in head and "gpu vs baseline" in head
    assert f"gpu: {GPU}, the device that ranks the attempts" in table
    assert "measured on, every correct attempt: cpu" in table  # the commits' own device, the same everywhere
