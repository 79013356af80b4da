"""What the build-target cross-compiles cost one evaluation, and the facts they give.

Evaluates each shipped baseline (a fresh kernel repository per problem, kgit's default
timing) and prints, per problem: the evaluation's wall time, the cross-compiles' wall
time (all targets side by side, started after the checks, overlapping the timing), the
part of it the evaluation waited for at its end, and per target the figures of the
trailer. Each evaluation alternates with one of `targets: []`, so "added" is the whole
cost, CPU contention with the timing included. Goal: under 10% of one evaluation.

    python benchmarks/target_compile.py                    # every shipped problem
    python benchmarks/target_compile.py softmax --repeat 3
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import tempfile
from pathlib import Path

from tabulate import tabulate

from kgit import config as config_mod
from kgit import workflow
from kgit.archive.repo import Repo
from kgit.evaluation import buildfacts
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
            docs, bare = [], []
            for _ in range(args.repeat):  # alternated, so drifting load hits both alike
                docs.append(workflow.evaluate_rev(repo, config, repo.rev("kgit/baseline")).to_document())
                bare.append(workflow.evaluate_rev(repo, without, repo.rev("kgit/baseline")).to_document())
            assert all(d["targets"] is None for d in bare)
            evals = [d["eval_s"] for d in docs]
            bare_s = statistics.median(d["eval_s"] for d in bare)
            compiles = [d["targets"]["compile_s"] for d in docs]
            waits = [d["targets"]["waited_s"] for d in docs]
            device = docs[-1]["device"]
            cost.append([name, device, len(docs), f"{bare_s:.1f}", f"{statistics.median(evals):.1f}",
                         f"{100 * (statistics.median(evals) / bare_s - 1):+.1f}%",
                         f"{statistics.median(compiles):.2f}", f"{statistics.median(waits):.2f}",
                         f"{100 * statistics.median(w / e for w, e in zip(waits, evals)):.1f}%",
                         docs[-1]["targets"]["variants"], docs[-1]["targets"]["triton"]])
            for target, value in buildfacts.trailers(Evaluation.of(docs[-1]).result)[:-1]:
                kernels = docs[-1]["targets"]["results"][targets.name_of_key(target[len("Kgit-Target-"):])]["kernels"]
                each = ", ".join(f"{k['compile_s']:.1f}" for k in kernels)
                facts.append([name, target[len("Kgit-Target-"):], value, each])
    print(tabulate(cost, headers=["problem", "device", "evals", "eval s, no targets", "eval s", "added",
                                  "cross-compile s",
                                  "waited s", "waited / eval", "launch variants", "triton"], tablefmt="simple"))
    print()
    print(tabulate(facts, headers=["problem", "target", "trailer", "compile s per variant"], tablefmt="simple"))


if __name__ == "__main__":
    main()
