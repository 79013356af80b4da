"""The offline strategist: tunable markers, rewriting them, and never repeating a configuration."""

from __future__ import annotations

from dataclasses import dataclass

from conftest import git, make_git_repo

from kgit.archive.notes import Measurement
from kgit.archive.repo import Repo
from kgit.scientist import offline

SOURCE = """import triton

BLOCK_M = 64  # kgit: tune 32 64 128
NUM_WARPS=4 # kgit: tune 4 8
    STAGES = 2  # kgit: tune 2
NOT_TUNED = 7  # a comment
"""


@dataclass
class FakeAttempt:
    """What the strategist reads of an archive attempt."""

    sha: str
    geomean_us: float | None = None
    time: int = 0
    experiment: int = 1
    attempt: int = 1
    timing: str = "events"  # measured on a GPU, so kgit's ranking rule orders by geomean

    @property
    def ok(self):
        return self.geomean_us is not None

    def measurements(self):
        device = "cpu" if self.timing == "interpreter" else "NVIDIA H200"
        return [Measurement(device=device, harness="h", evaluator=None, timing=self.timing,
                            geomean_us=self.geomean_us, times={}, when=self.time, source="commit")] if self.ok else []

    @property
    def speedup_baseline(self):
        return 100.0 / self.geomean_us if self.geomean_us else None


def test_markers_are_read_and_rewritten_in_place():
    found = offline.tunables("kernel.py", SOURCE)
    assert [(t.name, t.value, t.choices) for t in found] == [
        ("BLOCK_M", "64", ["32", "64", "128"]), ("NUM_WARPS", "4", ["4", "8"]), ("STAGES", "2", ["2"])]
    out = offline.assign({"kernel.py": SOURCE}, {("kernel.py", "BLOCK_M"): "128", ("kernel.py", "NUM_WARPS"): "8"})
    text = out["kernel.py"]
    assert "BLOCK_M = 128  # kgit: tune 32 64 128\n" in text
    assert "NUM_WARPS=8 # kgit: tune 4 8\n" in text
    assert "    STAGES = 2  # kgit: tune 2\n" in text and "NOT_TUNED = 7  # a comment" in text
    assert offline.configuration(out) != offline.configuration({"kernel.py": SOURCE})


def test_rationale_names_the_direction_and_the_reason():
    text = offline.rationale("NUM_WARPS", "4", "8")
    assert text.startswith("Raise NUM_WARPS from 4 to 8.") and "latency" in text
    assert offline.rationale("SPLIT_K", "4", "2").startswith("Lower SPLIT_K")


def _commit(repo_path, text, message):
    (repo_path / "kernel.py").write_text(text)
    git(repo_path, "add", "kernel.py")
    git(repo_path, "commit", "-q", "-m", message)
    return git(repo_path, "rev-parse", "HEAD").strip()


def test_never_repeats_a_measured_configuration_and_says_when_exhausted(tmp_path):
    path = make_git_repo(tmp_path / "k")
    small = "B = 1  # kgit: tune 1 2\nW = 1  # kgit: tune 1 2\n"
    repo = Repo(path)
    strategist = offline.Strategist(repo, ["kernel.py"])
    base = FakeAttempt(_commit(path, small, "base"), geomean_us=10.0)
    attempts = [base]
    # Two single changes from the base, then the one combination left: three, all different.
    titles = [p.title for p in strategist.plans(attempts, base.sha, pick=5)]
    assert titles == ["B 1 -> 2", "W 1 -> 2", "B 1 -> 2, W 1 -> 2"]
    proposed = []
    for _ in range(4):
        plans = strategist.plans(attempts, base.sha, pick=1)
        if not plans:
            break
        plan = plans[0]
        files = offline.write({"kernel.py": git(path, "show", f"{plan.base}:kernel.py")}, plan)
        proposed.append(offline.configuration(files))
        # Measured, and slower than the base, so the base stays the best.
        attempts.append(FakeAttempt(_commit(path, files["kernel.py"], plan.title), geomean_us=20.0))
    assert len(proposed) == 3 and len(set(proposed)) == 3  # 2 x 2 space minus the base
    assert offline.configuration({"kernel.py": small}) not in proposed
    assert strategist.plans(attempts, base.sha, pick=3) == []


def test_starts_from_the_best_and_prefers_near_values(tmp_path):
    path = make_git_repo(tmp_path / "k")
    repo = Repo(path)
    first = FakeAttempt(_commit(path, "B = 1  # kgit: tune 1 2 4 8\n", "slow"), geomean_us=30.0)
    best = FakeAttempt(_commit(path, "B = 4  # kgit: tune 1 2 4 8\n", "fast"), geomean_us=10.0)
    plans = offline.Strategist(repo, ["kernel.py"]).plans([first, best], best.sha, pick=2)
    assert [p.title for p in plans] == ["B 4 -> 8", "B 4 -> 2"]
    assert all(p.base == best.sha for p in plans)


def test_interpreter_timings_are_never_ranked(tmp_path):
    """On a CPU-only archive the strategist builds on the most recent correct attempt, not the 'fastest'."""
    from kgit.archive import figures

    path = make_git_repo(tmp_path / "k")
    fast_looking = FakeAttempt(_commit(path, "B = 1  # kgit: tune 1 2 4 8\n", "a"), geomean_us=1.0, time=1,
                               timing="interpreter")
    newest = FakeAttempt(_commit(path, "B = 4  # kgit: tune 1 2 4 8\n", "b"), geomean_us=90.0, time=2,
                         timing="interpreter")
    order, rule = figures.ranked([fast_looking, newest])
    assert order == [newest, fast_looking] and "most recent correct attempt" in rule
    plans = offline.Strategist(Repo(path), ["kernel.py"]).plans([fast_looking, newest], figures.best(
        [fast_looking, newest]).sha, pick=1)
    assert plans[0].base == newest.sha
