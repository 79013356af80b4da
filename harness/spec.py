"""The evaluation kgit hands the judge, as typed values read once from its JSON.

kgit writes the spec (kgit/evaluation/child.py: the start-up part when the pair starts,
the evaluation once its candidate is staged); the judge reads it here and nowhere else.
Whatever `.kgit.yaml` sets (the time limit, the kernel split, the timing settings) must
be in it: the judge has no default of its own for those, so a value can never differ
between the config and what an evaluation used. A missing or mistyped key is a
ValueError naming it, which the judge reports as a crash of the harness.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _need(doc: Mapping[str, Any], key: str, kinds: type | tuple[type, ...]) -> Any:
    value = doc.get(key)
    if value is None or not isinstance(value, kinds) or isinstance(value, bool) and bool not in _tuple(kinds):
        raise ValueError(f"the judge's spec needs {key!r} ({_names(kinds)}), not {value!r}")
    return value


def _maybe(doc: Mapping[str, Any], key: str, kinds: type | tuple[type, ...]) -> Any:
    return None if doc.get(key) is None else _need(doc, key, kinds)


def _tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _names(kinds: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _tuple(kinds))


@dataclass(frozen=True)
class TimingSettings:
    """`.kgit.yaml`'s timing section (kgit.config.TimingConfig), for the kgit-adaptive loop
    and the upstream protocols' stopping rules."""

    warmup: int  # untimed calls before the timed ones
    min_reps: int  # the fewest timed calls
    target_rse: float  # stop once the mean's relative standard error is below this
    max_time_s: float  # or once this many seconds went into timing the shape
    protocol: str | None = None  # the timing protocol; None: the problem's own (task.yml)

    @classmethod
    def from_dict(cls, doc: object) -> TimingSettings:
        if not isinstance(doc, Mapping):
            raise ValueError(f"the judge's spec needs 'timing' (an object), not {doc!r}")
        return cls(warmup=int(_need(doc, "warmup", (int, float))), min_reps=int(_need(doc, "min_reps", (int, float))),
                   target_rse=float(_need(doc, "target_rse", (int, float))),
                   max_time_s=float(_need(doc, "max_time_s", (int, float))), protocol=_maybe(doc, "protocol", str))

    def to_dict(self) -> dict[str, Any]:
        return {"target_rse": self.target_rse, "max_time_s": self.max_time_s, "min_reps": self.min_reps,
                "warmup": self.warmup, "protocol": self.protocol}


@dataclass(frozen=True)
class StartSpec:
    """What starting a judge and its runner needs, before any candidate exists."""

    problem_dir: str
    candidate_dir: str
    kernel_split: bool  # the runner's per-kernel split (evaluator.kernel_split): a warm runner loads the profiler
    sandbox: Mapping[str, Any] = field(default_factory=dict)  # the runner's confinement (kgit/evaluation/sandbox.py)
    runner_prefix: tuple[str, ...] = ()  # the command that wraps the runner (unshare ...)
    runner_cwd: str | None = None  # the runner's folder; None: the candidate folder's parent
    runner_env: Mapping[str, str] = field(default_factory=dict)  # set on top of the judge's environment
    parent_pid: int | None = None  # kgit: the judge dies with it
    lifeline_fd: int | None = None  # closed when kgit dies, however it dies
    notice_fd: int | None = None  # where the judge tells kgit each stage
    spawned_at: float | None = None  # kgit's monotonic clock when it started the judge (phases)
    ahead: bool = False  # started before its candidate exists, for a later one
    gate_fd: int | None = None  # a pair started ahead makes its device contexts once kgit writes here

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> StartSpec:
        return cls(problem_dir=str(_need(doc, "problem_dir", str)), candidate_dir=str(_need(doc, "candidate_dir", str)),
                   kernel_split=_need(doc, "kernel_split", bool), sandbox=_maybe(doc, "sandbox", dict) or {},
                   runner_prefix=tuple(_maybe(doc, "runner_prefix", list) or ()),
                   runner_cwd=_maybe(doc, "runner_cwd", str) or None, runner_env=_maybe(doc, "runner_env", dict) or {},
                   parent_pid=_maybe(doc, "parent_pid", int), lifeline_fd=_maybe(doc, "lifeline_fd", int),
                   notice_fd=_maybe(doc, "notice_fd", int), spawned_at=_maybe(doc, "spawned_at", (int, float)),
                   ahead=bool(_maybe(doc, "ahead", bool)), gate_fd=_maybe(doc, "gate_fd", int))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the judge's --start file holds."""
        return {"problem_dir": self.problem_dir, "candidate_dir": self.candidate_dir, "sandbox": dict(self.sandbox),
                "runner_prefix": list(self.runner_prefix), "runner_cwd": self.runner_cwd,
                "runner_env": dict(self.runner_env), "parent_pid": self.parent_pid, "ahead": self.ahead,
                "kernel_split": self.kernel_split, "lifeline_fd": self.lifeline_fd, "notice_fd": self.notice_fd,
                "spawned_at": self.spawned_at, "gate_fd": self.gate_fd}


@dataclass(frozen=True)
class Spec:
    """One whole evaluation: the start-up part and what kgit sends with the candidate."""

    start: StartSpec
    timing: TimingSettings
    timeout_s: float  # evaluator.timeout_s: the whole evaluation's limit
    secret_seed: int  # mixed into every input seed; never shown to the candidate
    targets: tuple[str, ...] | None = None  # build targets (config `targets`); None: the problem's own
    targets_gpu_shapes: bool = False  # config `targets_gpu_shapes`: build facts at the GPU shapes, in the interpreter
    targets_cache: str | None = None  # the judge's build-facts cache folder (harness/factcache.py)
    race: Mapping[str, Any] | None = None  # the incumbent to race against (harness/racing.py)
    protocol: str | None = None  # a timing protocol chosen over timing.protocol and the problem's
    device_peaks: Mapping[str, Any] | None = None  # peaks that override the table (harness/peaks.py)
    # Tests only: let attribute names built at run time past the static policy, to show
    # the defences behind it holding (kgit never sets it).
    computed_names: bool = False

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Spec:
        targets = _maybe(doc, "targets", list)
        timeout = float(_need(doc, "timeout_s", (int, float)))
        if timeout <= 0:
            raise ValueError(f"the judge's spec needs a positive 'timeout_s', not {timeout!r}")
        return cls(start=StartSpec.from_dict(doc), timing=TimingSettings.from_dict(doc.get("timing")),
                   timeout_s=timeout, secret_seed=int(_need(doc, "secret_seed", int)),
                   targets=None if targets is None else tuple(str(t) for t in targets),
                   targets_gpu_shapes=bool(_maybe(doc, "targets_gpu_shapes", bool)),
                   targets_cache=_maybe(doc, "targets_cache", str) or None, race=_maybe(doc, "race", dict),
                   protocol=_maybe(doc, "protocol", str), device_peaks=_maybe(doc, "device_peaks", dict),
                   computed_names=bool(_maybe(doc, "computed_names", bool)))

    def evaluation_dict(self) -> dict[str, Any]:
        """The JSON object kgit sends a started judge with its candidate (the start-up part
        stays as the judge read it; the folders come again, to be checked against it)."""
        doc = {"problem_dir": self.problem_dir, "candidate_dir": self.candidate_dir, "timing": self.timing.to_dict(),
               "secret_seed": self.secret_seed, "timeout_s": self.timeout_s,
               "targets": None if self.targets is None else list(self.targets),
               "targets_gpu_shapes": self.targets_gpu_shapes, "targets_cache": self.targets_cache,
               "race": None if self.race is None else dict(self.race), "kernel_split": self.kernel_split}
        optional = {"protocol": self.protocol, "device_peaks": self.device_peaks,
                    "computed_names": self.computed_names}
        return doc | {key: value for key, value in optional.items() if value}

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the judge's --spec file holds: the start-up part and the evaluation."""
        return self.start.to_dict() | self.evaluation_dict()

    @property
    def problem_dir(self) -> str:
        return self.start.problem_dir

    @property
    def candidate_dir(self) -> str:
        return self.start.candidate_dir

    @property
    def kernel_split(self) -> bool:
        return self.start.kernel_split
