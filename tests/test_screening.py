"""Interpreter timing where nobody ranks on it: a `kgit evolve` on a CPU whose
archive ranks on a GPU (re-measurement notes) only screens each CPU benchmark shape (one
warm-up, a few repetitions) and says so; where the interpreter figures rank (a fresh
repository, the CPU demo) the configured timing stays.
"""

from __future__ import annotations

import fake_llm
import pytest
from conftest import fast_config_text

from kgit import evolve, workflow
from kgit.evaluation import gpus

SLOW_BLOCK = "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096"
TIMING = {"target_rse": 0.0001, "max_time_s": 0.5, "min_reps": 7, "warmup": 2}  # far from the screening's


def _repo(kernel_repo, ranked_on_gpu: bool):
    (kernel_repo / ".kgit.yaml").write_text(fast_config_text(timing=TIMING, evolve={"knowledge": [], "pick": 1,
                                                                                     "attempts": 1}), encoding="utf-8")
    repo, config = workflow.load(kernel_repo)
    if ranked_on_gpu:  # what `kgit remeasure` on an H200 leaves on the baseline
        repo.add_note(repo.rev("kgit/baseline"), {
            "device": "NVIDIA H200", "harness": "h", "timing": "events", "status": "ok", "geomean_us": 100.0,
            "times": {"size=1048576": 100.0}, "noise": 0.001, "when": 2_000_000_000, "versions": {}})
    return repo, config


def _run(repo, config, monkeypatch):
    # A CPU host, whatever this one has: kgit sees no GPU, and neither does the judge.
    monkeypatch.setattr(gpus, "discover", lambda: gpus.Host(None, ()))
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, "")
    edit = fake_llm.search_replace("kernel.py", SLOW_BLOCK, f"{SLOW_BLOCK}\n# variant A")
    fake = fake_llm.FakeLLM([("design", fake_llm.design(["Plan A"])), ("write", edit)])
    lines, docs = [], []
    run = evolve.Run(repo, config, client=fake, progress=lines.append)
    evaluate = run.evaluate

    def recording(sha, **kw):
        docs.append(evaluate(sha, **kw))
        return docs[-1]

    recording.races = getattr(evaluate, "races", False)
    recording.close = getattr(evaluate, "close", lambda: None)
    run.evaluate = recording
    summary = run.run()
    return summary, lines, docs


@pytest.mark.slow
def test_an_archive_ranked_on_a_gpu_gets_screening_timing_on_the_cpu(kernel_repo, monkeypatch):
    repo, config = _repo(kernel_repo, ranked_on_gpu=True)
    summary, lines, docs = _run(repo, config, monkeypatch)
    assert [r.status for r in summary.rows] == ["ok"]
    (doc,) = docs
    assert doc["timing"] == "interpreter" and doc["shapes"]
    # Each CPU benchmark shape: exactly the screening's repetitions, not the configured 7 or more.
    assert [s["n"] for s in doc["shapes"]] == [evolve.SCREENING_TIMING.min_reps] * len(doc["shapes"])
    said = next(line for line in lines if line.startswith("no GPU"))
    assert "rank on NVIDIA H200" in said and "only screened" in said and "3 timed repetitions" in said


@pytest.mark.slow
def test_a_fresh_repository_keeps_the_configured_timing(kernel_repo, monkeypatch):
    repo, config = _repo(kernel_repo, ranked_on_gpu=False)
    summary, lines, docs = _run(repo, config, monkeypatch)
    (doc,) = docs
    assert doc["status"] == "ok", doc.get("error")
    assert all(s["n"] >= TIMING["min_reps"] for s in doc["shapes"])
    assert not any("screened" in line for line in lines)
