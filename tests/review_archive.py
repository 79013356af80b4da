"""A fabricated campaign for the review tests: attempt commits written directly with
workflow.commit_attempt and made-up H200 results, far faster than evaluating.

The baseline gets an H200 measurement as a git note, so every fabricated result
compares against it without kgit re-measuring anything.
"""

from __future__ import annotations

import os
import shutil
import uuid

from kgit import config as config_mod
from kgit import workflow
from kgit.archive.repo import BASELINE_TAG, Repo

DEVICE, HARNESS = "NVIDIA H200", "kgit-test harness abc123"
SHAPES = ["size=4096", "size=65536"]
BASELINE_US = {"size=4096": 40.0, "size=65536": 160.0}


def result(times: dict | None = None, status: str = "ok", error: str = "", eval_s: float = 10.0) -> dict:
    doc = {"schema": "kgit.result/1", "status": status, "device": DEVICE, "timing": "events", "harness": HARNESS,
           "ranking": "mean", "eval_s": eval_s}
    if status == "ok":
        doc["shapes"] = [{"key": k, "mean_us": v} for k, v in times.items()]
        product = 1.0
        for v in times.values():
            product *= v
        doc["geomean_us"] = product ** (1 / len(times))
    else:
        doc["error"] = error or f"{status}: something went wrong"
    return doc


def tree_with(repo: Repo, base: str, text: str, path: str = "kernel.py") -> str:
    """The tree of `base` with `path` replaced by `text`, built in a private index."""
    index = repo.state / f"index-test-{uuid.uuid4().hex}"
    repo.state.mkdir(parents=True, exist_ok=True)
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        repo.git("read-tree", base, env=env)
        blob = repo.git("hash-object", "-w", "--stdin", input=text).strip()
        repo.git("update-index", "--cacheinfo", f"100644,{blob},{path}", env=env)
        return repo.git("write-tree", env=env).strip()
    finally:
        if index.exists():
            os.unlink(index)


def scaled(factor: float) -> dict:
    return {k: v / factor for k, v in BASELINE_US.items()}


def build(root) -> dict:
    """Baseline plus four experiments:

    #1 from the baseline: attempt 1 incorrect, attempt 2 ok at 1.25x  (the first step)
    #2 from #1's attempt 2: compile error, then ok at 1.6x vs baseline  (the best)
    #3 from the baseline: one timeout  (a dead end)
    #4 from #1's attempt 2: ok but slower than its base
    Returns the shas by name.
    """
    repo = Repo(root)
    config = config_mod.load(repo.root)
    baseline = repo.rev(BASELINE_TAG)
    repo.add_note(baseline, {"device": DEVICE, "harness": HARNESS, "timing": "events", "status": "ok",
                             "geomean_us": (40.0 * 160.0) ** 0.5, "times": dict(BASELINE_US), "when": 1})
    kernel = repo.git("show", f"{baseline}:kernel.py")
    shas = {"baseline": baseline}

    def experiment(name, hypothesis, base, steps):
        branch, _ = workflow.start(repo, hypothesis, base, checkout=False)
        parent = base
        for i, (doc, model, cost) in enumerate(steps, 1):
            tree = tree_with(repo, base, kernel + f"\n# {name} attempt {i}: {hypothesis}\n")
            outcome = workflow.commit_attempt(repo, config, branch=branch, tree=tree, parent=parent, result=doc,
                                        notes=f"{name} attempt {i}", plan=f"Plan: {hypothesis}, step by step.",
                                        author=None, model=model, cost=cost, tokens=1000)
            parent = shas[f"{name}.{i}"] = outcome.sha
        shas[name] = branch

    experiment("e1", "use BLOCK_SIZE 2048 for wider tiles", baseline,
               [(result(status="incorrect", error="Mismatch at index 17: got nan, expected 1.5"), "openai/gpt-5", 0.02),
                (result(scaled(1.25)), "openai/gpt-5", 0.03)])
    experiment("e2", "vectorize loads with 4 elements per thread", shas["e1.2"],
               [(result(status="compile-error", error="Traceback (most recent call last):\n  File \"kernel.py\", "
                        "line 3\ntriton.CompilationError: bad cast"), "openai/gpt-5", 0.01),
                (result(scaled(1.6)), "openai/gpt-5", 0.04)])
    experiment("e3", "persistent kernel with grid stride loop", baseline,
               [(result(status="timeout", error="timed out after 600 s"), "offline", None)])
    experiment("e4", "num_warps 8 everywhere", shas["e1.2"],
               [(result(scaled(1.1)), "offline", None)])
    return shas


def copy_built(template, dest) -> dict:
    """Copy an initialized kernel repository to `dest` and build the campaign there."""
    shutil.copytree(template, dest, symlinks=True)
    return build(dest)


def build_interpreter(root) -> dict:
    """A campaign timed only in the interpreter, as a machine without a GPU makes it: the
    results carry the baseline's own device and harness, so every ratio kgit stores is an
    interpreter ratio that no view may show.

    #1 from the baseline: ok, at 1.03x its speed (a ratio above 1 that no view may call "improved")
    #2 from #1: ok and the most recent, 0.88x the baseline's time
    #3 from the baseline: a compile error
    """
    repo = Repo(root)
    config = config_mod.load(repo.root)
    baseline = next(a for a in repo.read() if a.is_baseline)
    kernel = repo.git("show", f"{baseline.sha}:kernel.py")
    shas = {"baseline": baseline.sha}

    def doc(factor=None, status="ok", error=""):
        out = {"schema": "kgit.result/1", "status": status, "device": baseline.device, "timing": baseline.timing,
               "harness": baseline.harness, "ranking": "mean", "eval_s": 5.0}
        if status == "ok":
            times = {k: v / factor for k, v in baseline.times.items()}
            out["shapes"] = [{"key": k, "mean_us": v} for k, v in times.items()]
            product = 1.0
            for v in times.values():
                product *= v
            out["geomean_us"] = product ** (1 / len(times))
        else:
            out["error"] = error
        return out

    for name, hypothesis, base, result_doc in (
            ("e1", "BLOCK_SIZE 1024 -> 2048", baseline.sha, doc(1.03)),
            ("e2", "NUM_WARPS 4 -> 8", "e1", doc(0.88)),
            ("e3", "BLOCK_SIZE 1024 -> 512", baseline.sha, doc(status="compile-error", error="SyntaxError: x"))):
        base = shas.get(base, base)
        branch, _ = workflow.start(repo, hypothesis, base, checkout=False)
        tree = tree_with(repo, base, kernel + f"\n# {name}: {hypothesis}\n")
        shas[name] = workflow.commit_attempt(repo, config, branch=branch, tree=tree, parent=base, result=result_doc,
                                       author=None, model="offline").sha
    return shas
