"""`.kgit.yaml`: a strict schema with defaults, and the machine-local settings over it.

The commented default is the top-level `.kgit.yaml` of the kgit repository, shipped
with the package (kgit/shipped.py). Unknown keys and wrong types are errors that
name the key and the file, because a silently ignored typo costs a night of GPU time.

Where to evaluate is a property of the machine, not of the kernel's history: the
`evaluator` keys may also be set for one clone alone (`kgit config --local`), in a file
outside the work tree (`.git/kgit/local.yaml`) that `load` lays over `.kgit.yaml` and that
no commit ever carries.
"""

from __future__ import annotations

import dataclasses
import pathlib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kgit import shipped
from kgit.errors import ConfigError

CONFIG_NAME = ".kgit.yaml"
# The machine-local settings, in the repository's kgit state folder (.git/kgit/).
LOCAL_NAME = "local.yaml"
LOCAL_SECTIONS = ("evaluator",)


@dataclass
class EvaluatorConfig:
    backend: str = "local"
    devices: typing.Union[str, list] = "all"
    address: str = "auto"
    command: typing.Optional[str] = None
    pass_env: list = field(default_factory=list)
    timeout_s: float = 600
    max_output_bytes: int = 20000
    # YAML reads a bare `off` as false, so false is accepted as "off".
    sandbox: typing.Union[str, bool] = "auto"
    # Who the runner is when kgit runs as root (docs/sandbox.md): "auto" a user of its own
    # where no GPU driver is present, "unprivileged" everywhere, "kgit" root of a user namespace.
    runner_user: str = "auto"
    max_memory_gb: typing.Optional[float] = None
    # The size-capped tmpfs that is the candidate's writable scratch (namespaces only).
    scratch_gb: float = 1.0
    # Processes and threads one evaluation may run at once; None: 256 + 2 per CPU.
    max_processes: typing.Optional[int] = None
    # Evaluations that may share one GPU at once (backend local), across kgit processes.
    per_gpu: int = 1
    # Keep the next judge/runner pair of each slot started ahead of need in `kgit evolve`
    # (docs/evaluators.md, "Warm evaluators").
    warm: bool = True
    # After timing, one more profiled call per GPU benchmark shape: the device kernels it
    # ran (harness/kernelsplit.py). Seconds of every GPU evaluation (the profiler's start).
    kernel_split: bool = True

    def validate(self, where):
        _choice(where + ".backend", self.backend, ("local", "ray", "command"))
        if isinstance(self.devices, str) and self.devices != "all":
            raise ConfigError(f"{where}.devices must be \"all\" or a list of GPU indices such as [0, 1], not {self.devices!r}.")
        if isinstance(self.devices, list) and not all(isinstance(d, int) and d >= 0 for d in self.devices):
            raise ConfigError(f"{where}.devices must list GPU indices (integers >= 0), not {self.devices!r}.")
        if self.backend == "command" and not self.command:
            raise ConfigError(f"{where}.backend is \"command\" but {where}.command is empty: set the command template (see docs/evaluators.md).")
        if not all(isinstance(name, str) and name for name in self.pass_env):
            raise ConfigError(f"{where}.pass_env must list environment variable names, not {self.pass_env!r}.")
        _positive(where + ".timeout_s", self.timeout_s)
        _positive(where + ".max_output_bytes", self.max_output_bytes)
        if self.sandbox is False:
            self.sandbox = "off"
        _choice(where + ".sandbox", self.sandbox, ("auto", "strict", "off"))
        _choice(where + ".runner_user", self.runner_user, ("auto", "unprivileged", "kgit"))
        if self.max_memory_gb is not None:
            _positive(where + ".max_memory_gb", self.max_memory_gb)
        _positive(where + ".scratch_gb", self.scratch_gb)
        if self.max_processes is not None:
            _positive(where + ".max_processes", self.max_processes)
        if not isinstance(self.warm, bool):
            raise ConfigError(f"{where}.warm must be true or false, not {self.warm!r}.")
        if isinstance(self.per_gpu, bool) or not isinstance(self.per_gpu, int) or self.per_gpu < 1:
            raise ConfigError(f"{where}.per_gpu must be a whole number of evaluations, 1 or more, not {self.per_gpu!r}.")


@dataclass
class TimingConfig:
    target_rse: float = 0.005
    max_time_s: float = 2.0
    min_reps: int = 10
    warmup: int = 3
    # The timing protocol (harness/protocols.py); None: the problem's own (task.yml `protocol:`).
    protocol: typing.Optional[str] = None

    def validate(self, where):
        _positive(where + ".target_rse", self.target_rse)
        _positive(where + ".max_time_s", self.max_time_s)
        _positive(where + ".min_reps", self.min_reps)
        if self.warmup < 0:
            raise ConfigError(f"{where}.warmup must be 0 or more, not {self.warmup}.")
        if self.protocol is not None:
            from kgit_harness import protocols

            if self.protocol not in protocols.PROTOCOLS:
                close = _closest(self.protocol, protocols.PROTOCOLS)
                raise ConfigError(f"{where}.protocol: unknown timing protocol {self.protocol!r}"
                                  + (f" (did you mean {close!r}?)" if close else "")
                                  + f"; one of {', '.join(protocols.PROTOCOLS)}, or null for the problem's own "
                                  "(docs/problems.md, \"Timing protocols\").")


@dataclass
class LLMConfig:
    model: str = "offline"
    api_base: typing.Optional[str] = None
    select_model: typing.Optional[str] = None
    design_model: typing.Optional[str] = None
    write_model: typing.Optional[str] = None
    # None: the provider's default. Sent only to models that take it (litellm knows which).
    temperature: typing.Optional[float] = 0.7
    # The longest answer asked for, in tokens; None: the model's own limit from litellm's
    # table, at most 16384 (kgit/scientist/params.py), and nothing sent for a model the table lacks.
    max_tokens: typing.Optional[int] = None
    timeout_s: float = 300
    retries: int = 4
    # The longest a rate limit (Retry-After) is waited out, per call; past it the work is kept for the next run.
    max_wait_s: float = 300
    cache: bool = True
    manual_timeout_s: typing.Optional[float] = None

    def validate(self, where):
        if not self.model.strip():
            raise ConfigError(f"{where}.model is empty: use a litellm model string or \"offline\".")
        _positive(where + ".timeout_s", self.timeout_s)
        _positive(where + ".max_wait_s", self.max_wait_s)
        if self.max_tokens is not None:
            _positive(where + ".max_tokens", self.max_tokens)
        if self.temperature is not None and self.temperature < 0:
            raise ConfigError(f"{where}.temperature must be 0 or more, or null for the provider's default, "
                              f"not {self.temperature}.")
        if self.manual_timeout_s is not None:
            _positive(where + ".manual_timeout_s", self.manual_timeout_s)
        if self.retries < 0:
            raise ConfigError(f"{where}.retries must be 0 or more, not {self.retries}.")

    def model_for(self, stage: str) -> str:
        return getattr(self, f"{stage}_model", None) or self.model


@dataclass
class EvolveConfig:
    iterations: int = 1
    pick: int = 3
    attempts: int = 3
    max_cost_usd: typing.Optional[float] = None
    max_wall_s: typing.Optional[float] = None
    jobs: int = 1
    # "auto": the documents and sections that fit the problem (kgit/scientist/knowledge.py); or names.
    knowledge: typing.Union[str, list] = "auto"
    archive_tokens: int = 6000
    race: bool = True
    # Profile the best attempt of each iteration with this hardware profiler (docs/targets.md).
    profile: typing.Optional[str] = None

    def validate(self, where):
        if not isinstance(self.race, bool):
            raise ConfigError(f"{where}.race must be true or false, not {self.race!r}.")
        if self.profile is not None:
            _choice(where + ".profile", self.profile, ("ncu", "rocprofv3", "auto"))
        for name in ("iterations", "pick", "attempts", "jobs", "archive_tokens"):
            _positive(f"{where}.{name}", getattr(self, name))
        for name in ("max_cost_usd", "max_wall_s"):
            if getattr(self, name) is not None:
                _positive(f"{where}.{name}", getattr(self, name))
        if isinstance(self.knowledge, str) and self.knowledge != "auto":
            raise ConfigError(f"{where}.knowledge must be auto (the documents that fit the problem) or a list of "
                              f"document names such as [auto, ours] or [triton, hopper], not {self.knowledge!r}.")
        if not isinstance(self.knowledge, str) and not all(isinstance(k, str) for k in self.knowledge):
            raise ConfigError(f"{where}.knowledge must be auto or a list of document names, not {self.knowledge!r}.")


@dataclass
class Config:
    problem: str = "problem"
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    evolve: EvolveConfig = field(default_factory=EvolveConfig)
    # Build targets every candidate is cross-compiled for (docs/targets.md); null: the
    # problem's declared ones. require_targets makes a failed build a failing status.
    targets: typing.Optional[list] = None
    require_targets: bool = False
    # Also compile what the GPU benchmark shapes would launch, captured in the CPU
    # interpreter without running it (harness/judge.py _dry_targets): seconds a CPU evaluation.
    targets_gpu_shapes: bool = False

    def validate(self, where):
        if self.targets is not None:
            from kgit_harness.targets import check_names

            try:
                check_names(self.targets)
            except ValueError as e:
                raise ConfigError(f"{where}targets: {e}.") from None
        parts = pathlib.PurePosixPath(self.problem).parts
        if not parts or self.problem.startswith(("/", "\\")) or ".." in parts or parts[0] == ".git":
            raise ConfigError(f"{where}problem must name a folder inside the repository, such as \"problem\", "
                              f"not {self.problem!r}: kgit replaces that folder on `kgit init`.")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value.validate(f"{where}{f.name}")


def _positive(key, value):
    if value <= 0:
        raise ConfigError(f"{key} must be greater than 0, not {value}.")


def _choice(key, value, allowed):
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}, not {value!r}.")


def _type_ok(value, annotation) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin or annotation)


def _type_name(annotation) -> str:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    return {type(None): "null", str: "a string", int: "an integer", float: "a number",
            bool: "true/false", list: "a list"}.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _build(cls, data, where: str, source: str):
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {where.rstrip('.') or 'the file'} must be a mapping of keys, not {type(data).__name__}.")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        dotted = f"{where}{key}"
        if key not in known:
            close = _closest(str(key), known)
            hint = f" Did you mean {where}{close}?" if close else f" Known keys here: {', '.join(known)}."
            raise ConfigError(f"{source}: unknown key {dotted!r}.{hint}")
        annotation = hints[key]
        if dataclasses.is_dataclass(annotation):
            kwargs[key] = _build(annotation, value, dotted + ".", source)
        elif not _type_ok(value, annotation):
            raise ConfigError(f"{source}: {dotted} must be {_type_name(annotation)}, not {value!r}.")
        else:
            kwargs[key] = value
    return cls(**kwargs)


def _closest(key, known):
    import difflib

    match = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def parse(text: str, source: str = CONFIG_NAME) -> Config:
    return _finish(_yaml(text, source), source)


def _yaml(text: str, source: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source} is not valid YAML: {_yaml_problem(e)}. Fix the syntax there"
                          + (" (`git diff .kgit.yaml` shows what changed since the last commit)."
                             if source.endswith(CONFIG_NAME) else ".")) from None


def _finish(data, source: str) -> Config:
    config = _build(Config, data, "", source)
    try:
        config.validate("")
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    return config


def _yaml_problem(error: yaml.YAMLError) -> str:
    """One line for a YAML error; PyYAML's own text spans several, with a quoted excerpt."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context = getattr(error, "context", None)
    text = f"{where}{problem}" + (f" ({context})" if context else "")
    return " ".join(text.split())


def load(root: Path, local: Path | None = None) -> Config:
    """`.kgit.yaml` at `root`, with the machine-local settings in the file `local` over it."""
    return with_local(root, read_local(local) if local is not None else {}, local)


def with_local(root: Path, overrides: dict, local: Path | None) -> Config:
    """`.kgit.yaml` at `root` with the machine-local settings `overrides` (read from `local`) over it."""
    path = Path(root) / CONFIG_NAME
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if not overrides:
        return parse(text, str(path)) if path.exists() else Config()
    data = _yaml(text, str(path)) or {}
    _build(Config, data, "", str(path))  # its own unknown keys are named as its own
    merged = dict(data)
    for section, values in overrides.items():
        base = merged.get(section) if isinstance(merged.get(section), dict) else {}
        merged[section] = {**base, **values}
    return _finish(merged, f"{path} with the machine-local settings of {local}")


def read_local(path: Path) -> dict:
    """The machine-local settings in `path` ({} when it does not exist), checked like `.kgit.yaml`."""
    path = Path(path)
    if not path.exists():
        return {}
    data = _yaml(path.read_text(encoding="utf-8"), str(path)) or {}
    source = f"{path} (machine-local settings; `kgit config --local` changes them)"
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a mapping of keys, not {type(data).__name__}.")
    for section in data:
        if section not in LOCAL_SECTIONS:
            raise ConfigError(f"{source}: {section!r} cannot be machine-local; only the {', '.join(LOCAL_SECTIONS)} "
                              f"keys can. Remove it with `kgit config --local --unset {section}.KEY`.")
    _build(Config, data, "", source)
    return data


def local_key(key: str) -> tuple[str, str]:
    """(section, name) of a dotted key that may be set machine-locally, such as evaluator.backend."""
    section, _, name = key.partition(".")
    if section not in LOCAL_SECTIONS or not name or "." in name:
        raise ConfigError(f"{key!r} cannot be set machine-locally: only {', '.join(s + '.KEY' for s in LOCAL_SECTIONS)} "
                          "can (where to evaluate belongs to the machine). Other settings are part of the "
                          "experiment: edit .kgit.yaml, where every key is documented.")
    known = {f.name for f in dataclasses.fields(EvaluatorConfig)}
    if name not in known:
        close = _closest(name, known)
        raise ConfigError(f"unknown key {key!r}." + (f" Did you mean {section}.{close}?" if close else
                                                     f" Known keys: {', '.join(sorted(known))}."))
    return section, name


def changed_keys(old_text: str | None, new_text: str | None) -> list[str]:
    """The settings two versions of `.kgit.yaml` differ in, one "key: old -> new" each."""
    def flat(text):
        try:
            data = yaml.safe_load(text or "") or {}
        except yaml.YAMLError:
            return None
        out = {}
        for key, value in (data.items() if isinstance(data, dict) else ()):
            if isinstance(value, dict):
                out.update({f"{key}.{k}": v for k, v in value.items()})
            else:
                out[str(key)] = value
        return out

    old, new = flat(old_text), flat(new_text)
    if old is None or new is None:
        return ["the file (one side is not valid YAML)"]
    show = lambda v: "(unset)" if v is _UNSET else show_value(v)  # noqa: E731
    return [f"{k}: {show(old.get(k, _UNSET))} -> {show(new.get(k, _UNSET))}"
            for k in sorted(set(old) | set(new)) if old.get(k, _UNSET) != new.get(k, _UNSET)]


_UNSET = object()


def show_value(value) -> str:
    """A setting's value as YAML on one line: `[0, 1]`, `null`, `command`."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def default_text() -> str:
    return shipped.default_config().read_text(encoding="utf-8")
