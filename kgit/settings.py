"""`kgit config`: the settings of one clone alone, over the committed `.kgit.yaml`.

Where to evaluate belongs to the machine, not to the kernel's history: the `evaluator`
keys may be set in `.git/kgit/local.yaml` (kgit/config.py reads and checks that file,
`workflow.load` lays it over `.kgit.yaml` for every command). This module shows and
changes it; a change that would make the configuration invalid is refused, not saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from kgit import config as config_mod
from kgit.archive.repo import Repo
from kgit.errors import ConfigError, UsageError


def local_file(repo: Repo) -> Path:
    """The file of this clone's machine-local settings (outside the work tree: never committed)."""
    return repo.state / config_mod.LOCAL_NAME


@dataclass
class Settings:
    """What `kgit config` shows: the machine-local settings, their file, and a key asked for."""

    path: Path
    local: dict  # {"evaluator.backend": "command", ...}
    key: str | None = None
    value: object = None  # the key's effective value (.kgit.yaml with the local settings over it)
    source: str = ""  # where that value comes from

    def to_json(self) -> dict:
        out: dict[str, object] = {"file": str(self.path), "local": self.local}
        if self.key:
            out.update(key=self.key, value=self.value, source=self.source)
        return out

    def text(self) -> str:
        if self.key:
            return f"{self.key} = {config_mod.show_value(self.value)}  ({self.source})"
        if not self.local:
            return (f"no machine-local settings ({self.path} does not exist or is empty); .kgit.yaml applies as "
                    "committed. Set one with `kgit config --local evaluator.KEY VALUE`.")
        lines = [f"machine-local settings of this clone ({self.path}; never committed):"]
        lines += [f"  {k} = {config_mod.show_value(v)}" for k, v in self.local.items()]
        return "\n".join(lines)


def configure(repo: Repo, args: tuple = (), *, local: bool = False, unset: bool = False) -> Settings:
    """`kgit config`: no ARGS shows the machine-local settings; KEY shows a key's value and where it
    comes from; `local` with KEY VALUE pairs sets them for this clone alone, with `unset` KEYs removes them.

    The local file is checked with the committed `.kgit.yaml` before it is written, so a
    setting that would make the configuration invalid is refused, not saved."""
    path = local_file(repo)
    if local and (args or unset):
        if unset:
            pairs = [(key, None) for key in args]
        elif len(args) % 2:
            raise UsageError(f"give each key a value: kgit config --local KEY VALUE [KEY VALUE ...] "
                             f"({args[-1]!r} has none; `--unset KEY` removes one).")
        else:
            pairs = [(args[i], args[i + 1]) for i in range(0, len(args), 2)]
        data = config_mod.read_local(path)
        for key, raw in pairs:
            section, name = config_mod.local_key(key)
            values = data.setdefault(section, {})
            if unset:
                values.pop(name, None)
            else:
                values[name] = _setting_value(raw)
        data = {section: values for section, values in data.items() if values}
        try:
            config_mod.with_local(repo.root, data, path)
        except ConfigError as e:
            raise ConfigError(f"{e} Nothing was saved (settings that need each other go in one call: "
                                         "kgit config --local evaluator.command CMD evaluator.backend command).") from None
        with repo.lock("config"):
            repo.state.mkdir(parents=True, exist_ok=True)
            trial = path.with_name(path.name + ".new")
            trial.write_text(yaml.safe_dump(data, sort_keys=False) if data else "", encoding="utf-8")
            trial.replace(path)
        return configure(repo)
    if args and (local or len(args) > 1):
        raise UsageError("`kgit config KEY` shows one setting; to set one for this machine alone: "
                         "kgit config --local KEY VALUE. Settings that belong to the experiment are edited in "
                         ".kgit.yaml (every key is documented there) and committed with your next `kgit record`.")
    flat = {f"{section}.{name}": value for section, values in config_mod.read_local(path).items()
            for name, value in values.items()}
    shown = Settings(path, flat)
    if args:
        key = args[0]
        section, _, name = key.partition(".")
        config = config_mod.load(repo.root, path)
        holder = getattr(config, section, None) if name else config
        if holder is None or not hasattr(holder, name or section):
            raise UsageError(f"unknown key {key!r}: keys are those of .kgit.yaml, e.g. evaluator.backend.")
        shown.key, shown.value = key, getattr(holder, name or section)
        shown.source = "machine-local, " + str(path) if key in flat else ".kgit.yaml or its default"
    return shown


def _setting_value(raw: str):
    """A value from the command line, read as YAML: 900 is a number, [0, 1] a list, null nothing."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
