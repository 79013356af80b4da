"""Branch names and progress lines of `kgit evolve` that tell experiments apart:
the offline strategist repeats one change from different bases, so the name carries the base."""

from __future__ import annotations

import itertools

from conftest import fast_config_text

from kgit import evolve, workflow
from kgit.archive.repo import Repo, parse_branch


def test_offline_branches_name_their_base_and_progress_names_the_base_used(kernel_repo):
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(evolve={"knowledge": [], "pick": 1, "attempts": 1}))
    repo, config = workflow.load(kernel_repo)
    config = evolve.with_overrides(config, iterations=3)
    baseline = repo.read()[0]
    speed = itertools.count(2)

    def faster_each_time(sha):
        # Stands in for the GPU: each candidate is faster than everything before, so the
        # strategist's next base is the newest experiment. Same device and harness as the
        # baseline, so nothing is re-timed.
        factor = next(speed)
        times = {key: us / factor for key, us in baseline.times.items()}
        return {"schema": "kgit.result/1", "status": "ok", "device": baseline.device, "timing": baseline.timing, "harness": baseline.harness,
                "ranking": "mean", "eval_s": 0.1, "geomean_us": baseline.geomean_us / factor,
                "shapes": [{"key": key, "mean_us": us} for key, us in times.items()]}

    lines = []
    summary = evolve.evolve(repo, config, evaluate=faster_each_time, progress=lines.append)
    branches = [row.branch for row in summary.rows]
    assert len(branches) == 3
    by_number = {parse_branch(b)[0]: b for b in branches}
    assert not by_number[1].endswith("-on-0") and "-on-" not in by_number[1]  # from the baseline
    assert by_number[2].endswith("-on-1") and by_number[3].endswith("-on-2")
    attempts = {a.sha: a for a in Repo(kernel_repo).read()}
    for row in summary.rows:
        base = attempts[row.sha].base
        written = [line for line in lines if " write " in line and "attempt 1: evaluating" in line]
        assert any(f"(base {base[:10]})" in line for line in written), (base, written)
