"""What a scripted `kgit evolve` run sends to the model, per stage: characters, the share
that repeats an earlier request's prefix (what provider prompt caching can reuse), and
tokens per iteration.

It replays the same scripted model (answers built with tests/fake_llm.py) and a fake
evaluator, so no model and no GPU is needed and two versions of kgit compare exactly:

    .venv/bin/python benchmarks/prompt_cost.py                      # this tree ("after")
    git archive main | tar -x -C /tmp/kgit-main                     # a scratch copy of main
    PYTHONPATH=/tmp/kgit-main .venv/bin/python benchmarks/prompt_cost.py   # "before"
    .venv/bin/python benchmarks/prompt_cost.py --problem softmax    # another shipped problem

Each run measures the problem's baseline once in the interpreter (fp8_blockscale_gemm takes
a minute or so on a CPU); the writer's edits change the kernel's first tunable line.

Tokens come from litellm's token counter (its bundled tokenizer, model gpt-4o), or
chars / 4 when it is unavailable.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # fake_llm's answer builders

import fake_llm  # noqa: E402

from kgit import evolve, workflow  # noqa: E402
from kgit.scientist.llm import Reply  # noqa: E402

# The line every writer answer edits: the first tunable constant of the kernel (vector_add's
# BLOCK_SIZE, softmax's NUM_WARPS, fp8_blockscale_gemm's BLOCK_M).
BLOCK = re.compile(r"^[A-Z_]+ = \d+ +# kgit: tune.*$", re.M)


class ScriptedModel:
    """Answers every stage in the real formats, whatever order the loop asks in; records requests."""

    def __init__(self, baseline: str, pick: int):
        self.baseline, self.pick = baseline, pick
        self.requests: list[tuple[str, str]] = []  # (stage, the whole text sent)
        self.writes = 0
        self.kernel_line = ""

    def model(self, stage: str) -> str:
        return "openai/scripted"

    def ask(self, stage: str, messages: list[dict]) -> Reply:
        text = "\n\n".join(f"[{m['role']}]\n{fake_llm.flatten(m['content'])}" for m in messages)
        self.requests.append((stage, text))
        if stage == "select":
            answer = fake_llm.selection(self.baseline[:10])
        elif stage == "design":
            answer = fake_llm.design([f"Plan {i}: a change the writer makes" for i in range(5)],
                                     chosen=list(range(self.pick)), lessons=["the block size matters"])
        else:
            self.writes += 1
            line = BLOCK.search(text).group(0)
            # Every first attempt misses (a fix prompt follows), every fix applies.
            search = line if self.writes % 2 == 0 else "NO_SUCH_LINE = 999"
            answer = fake_llm.search_replace("kernel.py", search, f"{line}\n# variant {self.writes}")
        return Reply(answer, "openai/scripted", None, None)


def tokens_of(text: str) -> tuple[int, str]:
    try:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        return litellm.token_counter(model="gpt-4o", text=text), "litellm gpt-4o"
    except Exception:  # noqa: BLE001 - offline or no tokenizer: the documented fallback
        return len(text) // 4, "chars/4"


def make_repo(root: Path, problem: str, iterations: int, pick: int, attempts: int) -> Path:
    import yaml

    from kgit import config as config_mod

    path = root / "repo"
    workflow.init(path, problem)
    data = yaml.safe_load(config_mod.default_text())
    data["evolve"].update(iterations=iterations, pick=pick, attempts=attempts)
    (path / ".kgit.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--pick", type=int, default=3)
    parser.add_argument("--problem", default="vector_add", help="the shipped problem (default: vector_add)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kgit-prompt-cost-") as tmp:
        path = make_repo(Path(tmp), args.problem, args.iterations, args.pick, attempts=2)
        repo, config = workflow.load(path)
        baseline = repo.read()[0]
        model = ScriptedModel(baseline.sha, args.pick)
        shapes = [{"key": k, "mean_us": v, "std_us": 0.0, "n": 10} for k, v in baseline.times.items()]

        def evaluate(sha):  # what the interpreter would report, without running it
            from kgit_harness import result as result_mod

            return result_mod.new("ok", device=baseline.device, timing=baseline.timing, harness=baseline.harness,
                                  geomean_us=baseline.geomean_us, shapes=shapes, eval_s=0.0)

        evolve.evolve(repo, config, client=model, evaluate=evaluate)
    stats = defaultdict(lambda: {"calls": 0, "chars": 0, "repeat": 0, "tokens": 0, "new_tokens": 0})
    seen: list[str] = []
    how = ""
    for stage, text in model.requests:
        repeat = max((len(os.path.commonprefix([text, old])) for old in seen), default=0)
        seen.append(text)
        s = stats[stage]
        s["calls"] += 1
        s["chars"] += len(text)
        s["repeat"] += repeat
        tokens, how = tokens_of(text)
        new_tokens, _ = tokens_of(text[repeat:])
        s["tokens"] += tokens
        s["new_tokens"] += new_tokens
    import kgit

    n = args.iterations
    print(f"kgit from {Path(kgit.__file__).parent}; problem {args.problem}; {n} iteration(s), pick {args.pick}, "
          f"2 writer attempts per plan (the first always fails), default knowledge documents; tokens: {how}")
    header = f"{'stage':<8}{'calls':>6}{'chars sent':>12}{'repeated prefix':>17}{'tokens/iter':>13}{'new tokens/iter':>17}"
    print(header)
    rows = [(stage, stats[stage]) for stage in ("select", "design", "write") if stage in stats]
    total = {k: sum(s[k] for _, s in rows) for k in ("calls", "chars", "repeat", "tokens", "new_tokens")}
    for stage, s in rows + [("all", total)]:
        print(f"{stage:<8}{s['calls']:>6}{s['chars']:>12}{s['repeat'] / s['chars']:>16.1%}"
              f"{s['tokens'] / n:>13.0f}{s['new_tokens'] / n:>17.0f}")
    print("repeated prefix: the share of the characters that begin like an earlier request of the run (what "
          "provider prompt caching can reuse); new tokens: those outside that prefix.")
    designs = [len(text) for stage, text in model.requests if stage == "design"]
    if designs:
        print(f"design request: {designs[0]} characters the first time, {max(designs)} at most")

if __name__ == "__main__":
    main()
