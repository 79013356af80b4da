"""A campaign evaluated in the interpreter and re-measured on a GPU is reviewed on the GPU's figures."""

from kgit.archive.repo import parse_log
from kgit.review import campaign as review
from kgit.review import plots


def _attempt(sha: str, experiment: int, cpu_us: float, notes: str, baseline: bool = False):
    trailers = f"Kgit-Experiment: {experiment}\nKgit-Attempt: {0 if baseline else 1}\n"
    message = (f"x: correct\n\n{trailers}Kgit-Status: ok\nKgit-Device: cpu\nKgit-Timing: interpreter\n"
               f"Kgit-Harness: h0\nKgit-Geomean-us: {cpu_us}\nKgit-Time-us: m=1 {cpu_us}\n")
    record = "\x1f".join([sha * 40, "b" * 40, "t" * 40, "n", "e", str(5 + experiment), message])
    return parse_log(record + "\0", notes={sha * 40: notes})[0]


def _note(us: float) -> str:
    return ('{"device":"NVIDIA H200","harness":"h1","timing":"events","status":"ok","geomean_us":%s,'
            '"times":{"m=1":%s},"when":9}\n' % (us, us))


def test_the_gpu_re_measurements_rank_and_are_shown():
    baseline = _attempt("a", 0, 9000.0, _note(480.0), baseline=True)
    fast = _attempt("c", 1, 20000.0, _note(160.0))  # slower in the interpreter, faster on the GPU
    slow = _attempt("d", 2, 8000.0, _note(240.0))
    c = review.from_attempts([baseline, fast, slow], baseline)
    assert (c.device, c.harness) == ("NVIDIA H200", "h1")
    assert c.best.sha == fast.sha
    assert c.geomean_of(fast) == 160.0 and c.baseline_geomean == 480.0
    assert c.speedup_of(slow) == 2.0 and c.best_speedup() == 3.0
    assert c.shape_speedups() == [("m=1", 480.0, 160.0, 3.0)]
    assert c.totals["best_geomean_us"] == 160.0
    markdown = review.markdown(c, "p")
    assert "160.00 us, 3.00x vs baseline on NVIDIA H200" in markdown
    assert "CPU interpreter" not in markdown
    assert plots.progress(c)[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_re_measurements_the_commits_own_figures_are_used():
    baseline = _attempt("a", 0, 9000.0, "", baseline=True)
    other = _attempt("c", 1, 8000.0, "")
    c = review.from_attempts([baseline, other], baseline)
    assert c.harness is None and c.device == "cpu"
    assert c.geomean_of(other) == 8000.0
