from pathlib import Path

import pytest
import yaml

from kgit import config as config_mod
from kgit.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_top_level_kgit_yaml_is_the_commented_default_and_loads():
    text = (ROOT / ".kgit.yaml").read_text()
    assert text == config_mod.default_text()
    assert "#" in text  # commented, so users learn every key from it
    loaded = config_mod.parse(text)
    assert loaded == config_mod.Config()


def test_every_dataclass_field_is_documented_in_the_default():
    data = yaml.safe_load(config_mod.default_text())
    cfg = config_mod.Config()
    for section in ("evaluator", "timing", "llm", "evolve"):
        assert set(data[section]) == set(vars(getattr(cfg, section))), section


@pytest.mark.parametrize("text, fragment", [
    ("evolve:\n  iteratons: 3\n", "unknown key 'evolve.iteratons'. Did you mean evolve.iterations?"),
    ("probelm: x\n", "unknown key 'probelm'"),
    ("timing:\n  min_reps: many\n", "timing.min_reps must be an integer"),
    ("llm:\n  cache: 3\n", "llm.cache must be true/false"),
    ("evaluator:\n  backend: cloud\n", "evaluator.backend must be one of local, ray, command"),
    ("evaluator:\n  devices: some\n", "evaluator.devices must be \"all\" or a list"),
    ("evaluator:\n  backend: command\n", "evaluator.command is empty"),
    ("evolve:\n  pick: 0\n", "evolve.pick must be greater than 0"),
    ("evolve: [1, 2]\n", "evolve must be a mapping"),
    ("a: [\n", "not valid YAML"),
])
def test_strict_config_names_the_key(text, fragment):
    with pytest.raises(ConfigError) as err:
        config_mod.parse(text, "repo/.kgit.yaml")
    assert fragment in str(err.value)


def test_missing_file_means_defaults(tmp_path):
    assert config_mod.load(tmp_path) == config_mod.Config()


def test_per_stage_model_override():
    cfg = config_mod.parse("llm:\n  model: openai/gpt-x\n  write_model: ollama/coder\n")
    assert cfg.llm.model_for("write") == "ollama/coder"
    assert cfg.llm.model_for("select") == "openai/gpt-x"


def test_invalid_yaml_is_one_line_with_a_hint_that_loses_nothing():
    with pytest.raises(ConfigError) as err:
        config_mod.parse("llm:\n  model: x\n bad: 1\n", "repo/.kgit.yaml")
    message = str(err.value)
    assert "\n" not in message and "line 3, column 2" in message
    assert "--force" not in message and "git diff .kgit.yaml" in message


def test_machine_local_settings_lie_over_the_committed_file_and_stay_strict(kernel_repo, run_kgit):
    from kgit import workflow

    done = run_kgit(kernel_repo, "config", "--local", "evaluator.command", "./box.sh {device}",
                    "evaluator.backend", "command", "evaluator.devices", "[0, 1]")
    assert done.exit_code == 0, done.output
    assert "evaluator.devices = [0, 1]" in done.stdout
    local = kernel_repo / ".git" / "kgit" / "local.yaml"
    _, config = workflow.load(kernel_repo)
    assert (config.evaluator.backend, config.evaluator.command, config.evaluator.devices) == (
        "command", "./box.sh {device}", [0, 1])
    assert config.timing.min_reps == 2  # the rest is .kgit.yaml's
    refused = [
        (("--local", "llm.model", "x"), "cannot be set machine-locally"),
        (("--local", "evaluator.bakend", "x"), "Did you mean evaluator.backend?"),
        (("--local", "evaluator.timeout_s", "soon"), "evaluator.timeout_s must be a number"),
        (("--local", "--unset", "evaluator.command"), "evaluator.command is empty"),
        (("--local", "evaluator.backend"), "give each key a value"),
    ]
    before = local.read_text()
    for args, fragment in refused:
        done = run_kgit(kernel_repo, "config", *args)
        assert done.exit_code != 0 and fragment in done.stderr, (args, done.stderr)
    assert local.read_text() == before  # a refused setting is never saved
    assert run_kgit(kernel_repo, "config", "--local", "--unset", "evaluator.backend", "evaluator.command",
                    "evaluator.devices").exit_code == 0
    assert workflow.load(kernel_repo)[1].evaluator.backend == "local"
    # A hand-edited file is read as strictly as .kgit.yaml.
    local.write_text("llm:\n  model: x\n")
    with pytest.raises(ConfigError, match="cannot be machine-local"):
        workflow.load(kernel_repo)
