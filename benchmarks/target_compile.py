"""What the build-target cross-compiles cost one evaluation, and the facts they give.

Evaluates each shipped baseline (a fresh kernel repository per problem, kgit's default
timing) three ways, alternated so that drifting load hits all alike: with `targets: []`
(no build facts), with a cold facts cache (the judge's cache folder removed first: every
launch is cross-compiled, as before the cache existed) and with a warm one (the same
code evaluated again: the facts come from the judge's cache, harness/factcache.py).
Prints, per problem, the evaluation's wall time each way, what the targets add, the
cold cross-compiles' own wall time (all targets side by side, started after the
checks, overlapping the timing) and the part of it the evaluation waited for at its
end; then per target the figures of the trailer. Goal: under 10% of one evaluation.

    python benchmarks/target_compile.py                    # every shipped problem
    python benchmarks/target_compile.py softmax --repeat 3
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from tabulate import tabulate

from kgit import config as config_mod
from kgit import workflow
from kgit.archive import buildfacts
from kgit.archive.repo import Repo
from kgit.evaluation.evaluated import Evaluation
from kgit_harness import problem, targets


def _repo(root: Path, name: str) -> Repo:
    root.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "bench"], ["config", "user.email", "b@x"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    workflow.init(root, name)
    return Repo(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", default=list(problem.shipped()))
    parser.add_argument("--repeat", type=int, default=2, help="evaluations per problem (after kgit init's)")
    args = parser.parse_args()
    cost, facts = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.problems:
            repo = _repo(Path(tmp) / name, name)
            config = config_mod.load(repo.root)
            without = dataclasses.replace(config, targets=[])
            cache = repo.state / "target-facts"
            cold, warm, bare = [], [], []
            for _ in range(args.repeat):
                shutil.rmtree(cache, ignore_errors=True)
                cold.append(workflow.evaluate_rev(repo, config, repo.rev("kgit/baseline")).to_document())
                warm.append(workflow.evaluate_rev(repo, config, repo.rev("kgit/baseline")).to_document())
                bare.append(workflow.evaluate_rev(repo, without, repo.rev("kgit/baseline")).to_document())
            assert all(d["targets"] is None for d in bare)
            assert not any(d["targets"].get("cached") for d in cold), "a cold evaluation was served from the cache"
            assert all(d["targets"].get("cached") for d in warm), "a warm evaluation was not served from the cache"
            bare_s = statistics.median(d["eval_s"] for d in bare)
            cold_s = statistics.median(d["eval_s"] for d in cold)
            warm_s = statistics.median(d["eval_s"] for d in warm)
            cost.append([name, cold[-1]["device"], args.repeat, f"{bare_s:.1f}", f"{cold_s:.1f}",
                         f"{100 * (cold_s / bare_s - 1):+.1f}%", f"{warm_s:.1f}", f"{100 * (warm_s / bare_s - 1):+.1f}%",
                         f"{statistics.median(d['targets']['compile_s'] for d in cold):.2f}",
                         f"{statistics.median(d['targets']['waited_s'] for d in cold):.2f}",
                         cold[-1]["targets"]["variants"], cold[-1]["targets"]["triton"]])
            assert warm[-1]["targets"]["results"] == cold[-1]["targets"]["results"]
            for target, value in buildfacts.trailers(Evaluation.of(cold[-1]).result)[:-1]:
                kernels = cold[-1]["targets"]["results"][targets.name_of_key(target[len("Kgit-Target-"):])]["kernels"]
                each = ", ".join(f"{k['compile_s']:.1f}" for k in kernels)
                facts.append([name, target[len("Kgit-Target-"):], value, each])
    print(tabulate(cost, headers=["problem", "device", "evals each", "eval s, no targets", "eval s, cold cache",
                                  "added cold", "eval s, warm cache", "added warm", "cold cross-compile s",
                                  "cold waited s", "launch variants", "triton"], tablefmt="simple"))
    print()
    print(tabulate(facts, headers=["problem", "target", "trailer", "compile s per variant"], tablefmt="simple"))


if __name__ == "__main__":
    main()
