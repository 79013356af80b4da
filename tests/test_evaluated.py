"""kgit's typed evaluation: the harness's Result, validated once, plus what kgit's evaluators add."""

from __future__ import annotations

import pytest

from kgit.evaluation.evaluated import Evaluation
from kgit_harness import result as result_mod
from kgit_harness.result import Result


def _document() -> dict:
    doc = result_mod.new("stopped", device="NVIDIA H200", timing="events", harness="h", eval_s=2.5,
                         shapes=[{"key": "n=1", "mean_us": 9.0}], race={"incumbent": "abc", "timed": 1, "total": 3})
    doc.update(stdout="out", stderr="err", sandbox={"namespaces": True, "applied": [], "missing": []},
               worker={"backend": "local", "device": "0"})
    return doc


def test_an_evaluators_document_becomes_typed_and_comes_back_the_same():
    judged = Evaluation.of(_document())
    assert isinstance(judged.result, Result) and judged.status == "stopped" and not judged.ok
    assert (judged.stdout, judged.stderr, judged.slot) == ("out", "err", "0")
    assert judged.race == {"incumbent": "abc", "timed": 1, "total": 3}
    assert "worker" not in judged.result.extra and "stdout" not in judged.result.extra  # kgit's keys are kgit's
    assert judged.to_document() == _document()
    assert Evaluation.of(judged) is judged and Evaluation.of(judged.result).result is judged.result


@pytest.mark.parametrize("doc, message", [
    ({"status": "ok", "geomean_us": 1.0}, "not a kgit.result/1 document"),
    ({"schema": "kgit.result/1", "status": "fast"}, "unknown status"),
    ({"schema": "kgit.result/1", "status": "ok"}, "needs a positive number in 'geomean_us'"),
])
def test_a_malformed_document_is_refused_where_it_arrives(doc, message):
    with pytest.raises(ValueError, match=message):
        Evaluation.of(doc)


def test_results_kgit_makes_carry_this_harness():
    rejected = Evaluation.new("rejected", reason="no change", error="same files", eval_s=0.0)
    assert rejected.status == "rejected" and rejected.reason == "no change" and rejected.error == "same files"
    assert rejected.harness == result_mod.harness_id() and rejected.worker is None
