"""The judge's build-facts cache: keyed by what the judge reads itself, whole entries only,
out of the runner's reach (harness/factcache.py, docs/targets.md)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kgit import config as config_mod
from kgit.archive import buildfacts
from kgit.archive.repo import Repo
from kgit.evaluation import child, sandbox
from kgit_harness import factcache

NAMESPACES = sandbox.plan("auto").namespaces


def _setup(tmp_path: Path) -> tuple[object, object, dict]:
    candidate, problem = tmp_path / "candidate", tmp_path / "problem"
    candidate.mkdir()
    problem.mkdir()
    (candidate / "kernel.py").write_text("BLOCK = 128\n")
    (problem / "task.yml").write_text("tests: [{n: 8}]\n")
    (problem / "reference.py").write_text("def generate_input(n, seed): ...\n")
    spec = SimpleNamespace(candidate_dir=str(candidate), problem_dir=str(problem))
    doc = {"device": "cpu", "versions": {"torch": "2.13.0", "python": "3.12.3"}}
    return spec, SimpleNamespace(files=["kernel.py"]), doc


def _facts(error=None) -> dict:
    return {"reported_by": "candidate", "triton": "3.9.0", "compile_s": 4.2, "waited_s": 1.0,
            "results": {"gfx942": {"builds": True, "error": error, "kernels": [{"vgpr": 22, "occupancy": 8}],
                                   "failures": [], "not_compiled": 0}}}


def test_the_key_follows_every_input_the_facts_depend_on(tmp_path):
    spec, task, doc = _setup(tmp_path)
    names = ["gfx942", "sm_90a"]
    first = factcache.key(spec, task, names, doc)
    assert factcache.key(spec, task, names, doc) == first
    assert factcache.key(spec, task, ["gfx942"], doc) != first
    assert factcache.key(spec, task, names, {**doc, "device": "NVIDIA H200"}) != first
    assert factcache.key(spec, task, names, {**doc, "versions": {"torch": "2.11.0"}}) != first
    kernel = Path(spec.candidate_dir) / "kernel.py"
    kernel.write_text("BLOCK = 256\n")
    assert factcache.key(spec, task, names, doc) != first
    kernel.write_text("BLOCK = 128\n")
    (Path(spec.problem_dir) / "task.yml").write_text("tests: [{n: 16}]\n")
    assert factcache.key(spec, task, names, doc) != first


def test_only_whole_entries_are_served_and_only_under_their_own_key(tmp_path):
    folder = tmp_path / "cache"
    spec, task, doc = _setup(tmp_path)
    digest = factcache.key(spec, task, ["gfx942"], doc)
    entry = factcache.Cache(str(folder), digest)
    assert entry.read() is None
    # A compile that crashed or overran says more about the machine's load than the kernel.
    assert entry.write(_facts("not built: the compile did not finish within 120 s")) is False
    assert entry.read() is None
    assert entry.write(_facts()) is True
    served = entry.read()
    assert served["cached"] is True and served["waited_s"] == 0.0
    assert served["results"] == _facts()["results"]
    # Served facts are never stored again as if compiled.
    assert entry.write(served) is False
    # An entry copied under another name (as a planted file would be) is not served there.
    other = factcache.Cache(str(folder), ("cd" if digest.startswith("ab") else "ab") + digest[2:])
    other.path.parent.mkdir(parents=True, exist_ok=True)
    other.path.write_text(entry.path.read_text())
    assert other.read() is None
    entry.path.write_text("{not json")
    assert entry.read() is None
    assert factcache.Cache(None, digest).read() is None and factcache.Cache(None, digest).write(_facts()) is False


@pytest.mark.slow
def test_an_evaluation_of_the_same_code_takes_its_facts_from_the_cache(softmax_repo):
    repo = Repo(softmax_repo)
    config = config_mod.load(softmax_repo)
    (baseline,) = repo.read()
    folder = repo.state / "target-facts"
    assert len(list(folder.glob("*/*.json"))) == 1  # kgit init's evaluation stored the baseline's
    again = child.evaluate_tree(softmax_repo, config, state_dir=repo.state / "scratch")
    assert again["status"] == "ok" and again["targets"]["cached"] is True
    assert {k[len(buildfacts.TRAILER_PREFIX):].replace("-", "_"): v
            for k, v in buildfacts.trailers(again)[:-1]} == baseline.targets
    # One changed byte of the candidate is another candidate: compiled afresh, stored beside.
    kernel = softmax_repo / "kernel.py"
    kernel.write_text(kernel.read_text() + "\n# a comment\n")
    changed = child.evaluate_tree(softmax_repo, config, state_dir=repo.state / "scratch")
    assert changed["status"] == "ok" and not changed["targets"].get("cached")
    assert changed["targets"]["compile_s"] > 0
    assert len(list(folder.glob("*/*.json"))) == 2


PLANT = '''
import os
try:
    os.makedirs({folder!r}, exist_ok=True)
    with open(os.path.join({folder!r}, "planted.json"), "w") as f:
        f.write("{{}}")
    said = "written"
except OSError as e:
    said = "refused " + type(e).__name__
raise RuntimeError("KGIT-PLANT: " + said)  # the import fails either way: the error says which
'''


@pytest.mark.skipif(not NAMESPACES, reason="this host allows no namespaces: the runner sees the repository "
                                           "(docs/targets.md says what the cache then trusts)")
@pytest.mark.slow
def test_a_hostile_runner_cannot_write_the_cache(softmax_repo):
    """The planting code sits in a helper module beside the problem (the static policy reads only
    the editable files; the judge hands the runner the helpers it imports): the sandbox meets it."""
    repo = Repo(softmax_repo)
    config = config_mod.load(softmax_repo)
    folder = repo.state / "target-facts"
    (softmax_repo / config.problem / "plant.py").write_text(PLANT.format(folder=str(folder)))
    kernel = softmax_repo / "kernel.py"
    kernel.write_text("import plant\n" + kernel.read_text())
    doc = child.evaluate_tree(softmax_repo, config, state_dir=repo.state / "scratch")
    assert "KGIT-PLANT: refused" in (doc["error"] or ""), doc["error"]
    assert not (folder / "planted.json").exists()
