"""The judge's spec: what `.kgit.yaml` sets comes only from it, typed once on both sides."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from conftest import fast_config_text

from kgit import config as config_mod
from kgit_harness.spec import Spec, StartSpec, TimingSettings


def _whole(**changes) -> dict:
    doc = {"problem_dir": "/p", "candidate_dir": "/c", "kernel_split": True, "timeout_s": 600, "secret_seed": 7,
           "timing": {"target_rse": 0.005, "max_time_s": 2.0, "min_reps": 10, "warmup": 3, "protocol": None}}
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not ...}


@pytest.mark.parametrize("key", ["timeout_s", "kernel_split", "secret_seed", "timing", "problem_dir"])
def test_a_spec_without_a_value_the_config_sets_is_refused_naming_it(key):
    with pytest.raises(ValueError, match=repr(key) if key != "timing" else "timing"):
        Spec.from_dict(_whole(**{key: ...}))


@pytest.mark.parametrize("setting", ["warmup", "min_reps", "target_rse", "max_time_s"])
def test_each_timing_setting_must_be_given(setting):
    timing = {"target_rse": 0.005, "max_time_s": 2.0, "min_reps": 10, "warmup": 3}
    del timing[setting]
    with pytest.raises(ValueError, match=repr(setting)):
        Spec.from_dict(_whole(timing=timing))


def test_mistyped_values_are_refused_not_coerced():
    with pytest.raises(ValueError, match="kernel_split"):
        Spec.from_dict(_whole(kernel_split="yes"))
    with pytest.raises(ValueError, match="timeout_s"):
        Spec.from_dict(_whole(timeout_s=True))
    with pytest.raises(ValueError, match="positive 'timeout_s'"):
        Spec.from_dict(_whole(timeout_s=0))


def test_the_config_reaches_the_judge_as_written():
    config = config_mod.parse(fast_config_text(evaluator={"timeout_s": 123, "kernel_split": False}))
    start = StartSpec(problem_dir="/p", candidate_dir="/c", kernel_split=config.evaluator.kernel_split,
                      runner_prefix=("unshare",), lifeline_fd=5)
    spec = Spec(start=start, timing=TimingSettings(**asdict(config.timing)), timeout_s=config.evaluator.timeout_s,
                secret_seed=11, targets=("gfx942",), race={"name": "abc", "times": {"n=1": 2.0}})
    # What the judge reads back from the JSON kgit writes: the --spec file whole, and a
    # started pair's two parts merged as the judge merges them.
    assert Spec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    merged = {**json.loads(json.dumps(start.to_dict())), **json.loads(json.dumps(spec.evaluation_dict()))}
    read = Spec.from_dict(merged)
    assert (read.timeout_s, read.kernel_split, read.timing) == (123, False, spec.timing)
    assert read.timing.max_time_s == config.timing.max_time_s and read.start.lifeline_fd == 5
