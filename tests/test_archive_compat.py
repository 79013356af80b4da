"""Archives written before the typed notes read with the same figures.

The measurement note, the kernel-split note and the trailers are kgit's on-disk format
(docs/archive.md): a version that parses them into typed values must read every archive
an earlier version wrote as that version did. Two archives are read here: the shipped fp8
campaign (examples/fp8-h200/kgit-fp8.bundle, written by kgit on an H200), and one built
below with plain git plumbing in the older shapes (no protocol, no evaluator, a kernels
note without per-call times, a null noise). Each figure kgit reads is checked against the
note's JSON and the commit's trailer lines as git holds them, read without kgit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import git, make_git_repo, rev

from kgit.archive import figures, measure
from kgit.archive.notes import Measurement
from kgit.archive.refs import NOTES_REF
from kgit.archive.repo import Repo

BUNDLE = Path(__file__).resolve().parents[1] / "examples" / "fp8-h200" / "kgit-fp8.bundle"


def _trailer_lines(repo: Path, sha: str) -> dict[str, list[str]]:
    """Every `Kgit-*: value` line of a commit's message, as git stores it."""
    found: dict[str, list[str]] = {}
    for line in git(repo, "show", "-s", "--format=%B", sha).splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.startswith("Kgit-"):
            found.setdefault(key, []).append(value)
    return found


def _note_documents(repo: Path, sha: str) -> list[dict]:
    listed = {line.split()[1] for line in git(repo, "notes", "--ref", NOTES_REF, "list").splitlines()}
    if sha not in listed:
        return []
    text = git(repo, "notes", "--ref", NOTES_REF, "show", sha)
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def _assert_reads_as_stored(repo: Path) -> list:
    attempts = Repo(repo).read()
    assert attempts
    for a in attempts:
        lines = _trailer_lines(repo, a.sha)
        geomean = lines.get("Kgit-Geomean-us")
        assert a.geomean_us == (float(geomean[-1]) if geomean and a.status == "ok" else None), a.sha
        if a.status == "ok":
            times = {v.rpartition(" ")[0]: float(v.rpartition(" ")[2]) for v in lines["Kgit-Time-us"]}
            assert a.times == times, a.sha
        assert a.status == lines["Kgit-Status"][-1] and a.device == (lines.get("Kgit-Device") or [""])[-1]
        documents = _note_documents(repo, a.sha)
        assert list(a.notes.documents) == documents
        plain = [d for d in documents if not d.get("kind")]
        assert len(a.notes.measurements) == len(plain)
        for typed, stored in zip(a.notes.measurements, plain):
            assert typed.geomean_us == stored.get("geomean_us") and dict(typed.times) == stored.get("times", {})
            assert (typed.device, typed.harness, typed.status) == tuple(stored.get(k) for k in
                                                                        ("device", "harness", "status"))
            assert typed.when == stored.get("when", 0)
            # Written again, a note holds what it held: the keys it had with their values, and
            # at most the standard keys it lacked, empty.
            again = typed.to_note()
            assert {k: again[k] for k in stored} == stored
            assert all(again[k] is None for k in set(again) - set(stored))
        # The commit's own figure counts once, each timed re-measurement once.
        timed = [d for d in plain if d.get("geomean_us")]
        assert len(a.measurements()) == int(a.ok) + len(timed)
        assert sum(slot["n"] for slot in measure.by_device(a).values()) == int(a.ok) + len(timed)
    return attempts


def test_the_shipped_fp8_campaign_reads_with_the_figures_git_holds(tmp_path):
    repo = make_git_repo(tmp_path / "fp8")
    git(repo, "fetch", "-q", str(BUNDLE), "refs/heads/*:refs/heads/*", f"{NOTES_REF}:{NOTES_REF}",
        "refs/tags/kgit/baseline:refs/tags/kgit/baseline")
    attempts = _assert_reads_as_stored(repo)
    assert len(attempts) > 40 and sum(bool(a.notes.documents) for a in attempts) > 10
    # The campaign's ranking: the H200's figures, from the re-measurement notes.
    group = figures.gpu_group(attempts)
    assert group is not None and group.device.startswith("NVIDIA H200")
    ranked = {a.sha: g for a, g in group.entries}
    compared = 0
    for a in attempts:
        on_gpu = [d for d in _note_documents(repo, a.sha) if not d.get("kind") and d.get("device") == group.device
                  and d.get("harness") == group.harness and d.get("geomean_us") and d.get("status") in (None, "ok")
                  and (d.get("evaluator") or None) == group.evaluator]
        if on_gpu and a.device != group.device:  # ranked by the latest note, by its stamp, as stored
            assert ranked[a.sha] == max(on_gpu, key=lambda d: d.get("when", 0))["geomean_us"]
            compared += 1
    assert compared > 5, compared


def _commit(repo: Path, parent: str | None, message: str) -> str:
    tree = git(repo, "write-tree").strip()
    args = ["commit-tree", tree, "-m", message] + (["-p", parent] if parent else [])
    return git(repo, *args).strip()


def test_an_archive_in_the_older_formats_reads_as_it_did(tmp_path):
    repo = make_git_repo(tmp_path / "old")
    (repo / "kernel.py").write_text("BLOCK = 128\n")
    git(repo, "add", "kernel.py")
    # Trailers as kgit wrote them before protocols, evaluators and runs were recorded.
    base = _commit(repo, None, "baseline: geomean 40.0 us\n\nKgit-Experiment: 0\nKgit-Attempt: 0\n"
                   "Kgit-Status: ok\nKgit-Device: NVIDIA H200\nKgit-Timing: events\nKgit-Geomean-us: 40.000\n"
                   "Kgit-Time-us: m=1 20.000\nKgit-Time-us: m=2 80.000\nKgit-Harness: kgit 0.1.0 harness aaa\n")
    git(repo, "tag", "kgit/baseline", base)
    (repo / "kernel.py").write_text("BLOCK = 256\n")
    git(repo, "add", "kernel.py")
    tip = _commit(repo, base, "wider: speedup 2.00x vs base (geomean 20.0 us)\n\nKgit-Experiment: 1\n"
                  "Kgit-Attempt: 1\nKgit-Branch: kgit/1-wider\nKgit-Base: " + base + "\nKgit-Hypothesis: wider\n"
                  "Kgit-Status: ok\nKgit-Device: NVIDIA H200\nKgit-Timing: events\nKgit-Geomean-us: 20.000\n"
                  "Kgit-Time-us: m=1 10.000\nKgit-Time-us: m=2 40.000\nKgit-Harness: kgit 0.1.0 harness aaa\n"
                  "Kgit-Speedup: 2.000\nKgit-Speedup-Baseline: 2.000\nKgit-Model: human\n")
    git(repo, "update-ref", "refs/heads/kgit/1-wider", tip)
    older = [
        # A re-measurement of the base on an MI300X, before evaluators and protocols were kept.
        {"device": "AMD Instinct MI300X", "harness": "kgit 0.1.0 harness aaa", "timing": "events", "status": "ok",
         "geomean_us": 50.0, "times": {"m=1": 25.0, "m=2": 100.0}, "tag": "remeasure", "when": 200,
         "versions": {"torch": "2.5.0"}, "error": None},
        # A base re-timed for a ratio, its noise unknown (written null).
        {"device": "NVIDIA H200", "harness": "kgit 0.1.0 harness aaa", "timing": "events", "status": "ok",
         "geomean_us": 44.0, "times": {"m=1": 22.0, "m=2": 88.0}, "tag": "re-timed as a base", "when": 100,
         "versions": {}, "error": None, "noise": None},
        # The per-kernel split beside the commit's own GPU result, before per-call times.
        {"kind": "kernels", "device": "NVIDIA H200", "harness": "kgit 0.1.0 harness aaa", "timing": "events",
         "kernels": {"m=1": [["_k", 1, 19.5]]}, "when": 90},
    ]
    for doc in older:
        git(repo, "notes", "--ref", NOTES_REF, "append", "-m", json.dumps(doc, sort_keys=True), base)

    attempts = _assert_reads_as_stored(repo)
    baseline = next(a for a in attempts if a.is_baseline)
    attempt = next(a for a in attempts if not a.is_baseline)
    assert baseline.sha == rev(repo, "kgit/baseline") and attempt.base == baseline.sha
    assert (attempt.protocol, attempt.evaluator, attempt.run) == ("", "", None)
    # Of the base's two H200 figures the later is the commit's own (stamped with the commit's
    # time; the re-timed note says 100), as the reader before typed notes picked it.
    found = measure.comparable(baseline, "NVIDIA H200", "kgit 0.1.0 harness aaa")
    assert found is not None and found.source == "commit" and found.when == baseline.time
    assert measure.ratio(found, attempt.geomean_us, attempt.times) == pytest.approx(2.0)
    # The split beside the commit's own measurement is found through it; no per-call times were kept.
    assert measure.kernels_of(baseline, "NVIDIA H200", "kgit 0.1.0 harness aaa") == {"m=1": [["_k", 1, 19.5]]}
    assert measure.per_call_of(baseline, "NVIDIA H200", "kgit 0.1.0 harness aaa") == {}
    # The MI300X figure is its own device's, never compared with the H200's.
    assert measure.comparable(baseline, "AMD Instinct MI300X", "kgit 0.1.0 harness aaa").geomean_us == 50.0
    devices = measure.by_device(baseline)
    assert (devices["NVIDIA H200"]["n"], devices["AMD Instinct MI300X"]["n"]) == (2, 1)
    assert devices["NVIDIA H200"]["min_us"] == 40.0 and devices["NVIDIA H200"]["max_us"] == 44.0
    # A null noise reads as none: the commit's own figure carries its noise in a trailer instead.
    retimed = next(m for m in baseline.notes.measurements if m.tag == "re-timed as a base")
    assert retimed.noise is None and figures.measurement_noise(baseline, retimed) is None
    assert Measurement.from_note(older[1]).to_note()["times"] == older[1]["times"]
