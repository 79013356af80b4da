"""The model path's fault table: `kgit evolve` through litellm against a local endpoint.

Each case runs `kgit evolve --model openai/<name> --api-base <endpoint>` as a user would (a
subprocess, a dummy key in the environment) on a fresh copy of one vector_add kernel
repository, against tests/endpoint.py playing the case's script: prose answers, rate
limits with Retry-After, a reasoning model, a priced run, --max-cost, a writer that gets
no answer, a server that dies, answers cut at the output limit. Then a follow-up run
against a healthy endpoint says whether the repository is resumable, and what that run
had to ask.

Columns: the case; the line kgit printed that says what happened; the exit code; the
attempt commits the case made; and the follow-up run's outcome (exit code, the stages it
asked, the attempts it committed). The priced case also compares the cost kgit recorded
(`kgit report --json`) with the endpoint's own token counts at litellm's prices.

    python benchmarks/llm_faults.py                          # the kgit of this checkout
    python benchmarks/llm_faults.py --kgit-src /tmp/kgit-main  # another checkout's kgit (before/after)
    python benchmarks/llm_faults.py --only 2,8 --json

`--kgit-src` runs `python -m kgit` with that folder first on PYTHONPATH, so a throwaway
copy of main (`git archive main | tar -x -C /tmp/kgit-main`) is measured with the same
script and endpoint. Evaluations run in the Triton CPU interpreter (fast timing): a few
seconds each, one per correct attempt.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import endpoint  # noqa: E402
import fake_llm  # noqa: E402

KEY = "sk-benchmark-0123456789abcdef"
FAST_TIMING = {"target_rse": 0.5, "max_time_s": 0.05, "min_reps": 2, "warmup": 0}
SLOW_BLOCK = "BLOCK_SIZE = 1024  # kgit: tune 256 512 1024 2048 4096"
FAST_BLOCK = "BLOCK_SIZE = 2048  # kgit: tune 256 512 1024 2048 4096"
PROSE = "I would rather describe my plans in words than in JSON."
# gpt-4o-mini's and o3-mini's prices per token in litellm's bundled table.
PRICES = {"openai/gpt-4o-mini": (1.5e-07, 6e-07, 7.5e-08), "openai/o3-mini": (1.1e-06, 4.4e-06, 5.5e-07)}


class Kgit:
    """`python -m kgit` of the checkout under test, run in a kernel repository."""

    def __init__(self, src: Path | None):
        self.env = {**os.environ, "OPENAI_API_KEY": KEY, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
        if src is not None:
            self.env["PYTHONPATH"] = str(src) + os.pathsep + self.env.get("PYTHONPATH", "")

    def __call__(self, cwd: Path, *args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kgit", *args], cwd=cwd, env=self.env, capture_output=True,
                              text=True)

    def source(self) -> str:
        # Run outside any checkout: the current folder comes first on sys.path.
        out = subprocess.run([sys.executable, "-c", "import kgit; print(kgit.__file__)"], env=self.env,
                             capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
        return out.stdout.strip()


def git(repo: Path, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def template(kgit: Kgit, root: Path) -> Path:
    repo = root / "template"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Fault Benchmark")
    git(repo, "config", "user.email", "faults@localhost")
    done = kgit(repo, "init", "--problem", "vector_add")
    if done.returncode != 0:
        raise SystemExit(f"kgit init failed:\n{done.stderr}")
    return repo


def configure(repo: Path, llm: dict | None = None, **evolve):
    """The repository's own default .kgit.yaml (whichever kgit wrote it), fast and small."""
    data = yaml.safe_load((repo / ".kgit.yaml").read_text())
    data["timing"] = dict(FAST_TIMING)
    data["targets"] = []
    data["evaluator"]["warm"] = False
    data["evolve"].update({"pick": 1, "attempts": 1, "knowledge": [], **evolve})
    data["llm"].update({"retries": 2, "timeout_s": 10, **(llm or {})})
    (repo / ".kgit.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def attempts(repo: Path) -> list[str]:
    return git(repo, "rev-list", "--branches=kgit/*", "--not", "kgit/baseline").split()


def healthy(baseline: str) -> dict:
    return {"select": endpoint.answer(fake_llm.selection(baseline[:10])),
            "design": endpoint.answer(fake_llm.design(["Larger blocks per program"])),
            "write": endpoint.answer(fake_llm.search_replace("kernel.py", SLOW_BLOCK, FAST_BLOCK))}


def design(title="Larger blocks per program", usage=None):
    return endpoint.answer(fake_llm.design([title]), stage="design", usage=usage)


def writes(block=FAST_BLOCK):
    return endpoint.answer(fake_llm.search_replace("kernel.py", SLOW_BLOCK, block), stage="write")


def line(out: str, *patterns) -> str:
    """The first line matching one of `patterns` (a kgit: error line first), shortened."""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    for pattern in ("^kgit: ",) + patterns:
        for ln in lines:
            if re.search(pattern, ln):
                return ln if len(ln) <= 150 else ln[:147] + "..."
    return "(nothing matching)"


# -- the cases ---------------------------------------------------------------------------
# Each: (name, model, config, script of the first run, extra CLI args, the patterns of the line
# to show, and what else to note after the run).
CASES = [
    ("1 designer answers prose twice, then the server is healthy", "openai/test-model", {},
     [endpoint.answer(PROSE, stage="design"), endpoint.answer(PROSE, stage="design")], [],
     [r"skipped", r"Stopped"]),
    ("2 rate limit: 429, Retry-After 6 s for 6 s (llm.retries 2)", "openai/test-model", {},
     [endpoint.limited(6, 6, stage="design"), design(), writes()], [],
     [r"waiting|retrying", r"Stopped"]),
    ("3 rate limit beyond the wait: writer gets 429, Retry-After 3600", "openai/test-model", {},
     [design(), endpoint.status(429, 3600, stage="write")], [],
     [r"write .*(rate limit|kept for the next run|did not answer|no answer)", r"Stopped"]),
    ("4 reasoning model openai/o3-mini, default temperature", "openai/o3-mini", {},
     [design(), writes()], [], [r"takes no temperature", r"Stopped"]),
    ("5 priced run, -n 2: a commit, then a skipped iteration", "openai/gpt-4o-mini", {"iterations": 2},
     [design(), writes(), endpoint.answer(PROSE, stage="select"), endpoint.answer(PROSE, stage="select"),
      endpoint.answer(PROSE, stage="design"), endpoint.answer(PROSE, stage="design")], [],
     [r"model use"]),
    ("6a --max-cost 0.001 below one design call", "openai/gpt-4o-mini", {},
     [design(usage={"prompt_tokens": 3000, "completion_tokens": 8000, "total_tokens": 11000}), writes()],
     ["--max-cost", "0.001"], [r"Stopped"]),
    ("6b --max-cost 0.012: the design fits, design + writer does not", "openai/gpt-4o-mini", {},
     [design(usage={"prompt_tokens": 3000, "completion_tokens": 8000, "total_tokens": 11000}), writes()],
     ["--max-cost", "0.012"], [r"Stopped"]),
    ("7 writer gets no answer: 503 on every try", "openai/test-model", {},
     [design(), endpoint.status(503, stage="write")], [], [r"write .*(did not answer|no answer)", r"Stopped"]),
    ("8 server dies after the design answer", "openai/test-model", {},
     [design(), endpoint.die()], [], [r"Stopped"]),
    ("9 writer's whole file cut at the output limit", "openai/test-model", {},
     [design(), endpoint.cut("kernel.py\n```python\n\"\"\"vector_add\"\"\"\n\nimport triton\n"
                             "import triton.language as tl\n\nBLOCK_SIZE = 2048\n\n\n@triton.jit\ndef _add(",
                             stage="write")], [],
     [r"attempt 1: (rejected|compile|runtime|incorrect|ok)", r"Stopped"]),
]


def run_case(kgit: Kgit, template_repo: Path, root: Path, case) -> dict:
    name, model, evolve, script, extra, patterns = case
    repo = root / re.sub(r"\W+", "-", name)[:40]
    shutil.copytree(template_repo, repo, symlinks=True)
    configure(repo, **evolve)
    baseline = git(repo, "rev-parse", "kgit/baseline").strip()
    server = endpoint.Endpoint(script).start()
    started = time.monotonic()
    try:
        first = kgit(repo, "evolve", "--model", model, "--api-base", server.url, *extra)
    finally:
        server.stop()
    seconds = time.monotonic() - started
    sent = server.log
    made = attempts(repo)
    row = {"case": name, "printed": line(first.stdout + "\n" + first.stderr, *patterns), "exit": first.returncode,
           "committed": len(made), "requests": [e["stage"] for e in sent], "seconds": round(seconds, 1),
           "summary_table": "Stopped:" in first.stdout}
    row["statuses"] = [git(repo, "log", "-1", "--format=%(trailers:key=Kgit-Status,valueonly)", sha).strip()
                       for sha in made]
    if name.startswith("4"):
        body = sent[0]["body"] if sent else {}
        row["sent"] = {k: body[k] for k in ("temperature", "max_tokens", "max_completion_tokens") if k in body}
    if name.startswith("5"):
        row.update(priced(kgit, repo, model, server))
    if name.startswith("6"):
        row["spent_by_server_count"] = round(server.billed(*PRICES[model]), 6)

    # The follow-up: the same repository against a healthy endpoint at the same address (so
    # the same requests have the same cache keys), with no budget.
    follow = endpoint.Endpoint(healthy(baseline), port=server.port).start()
    try:
        again = kgit(repo, "evolve", "--model", model, "--api-base", follow.url)
    finally:
        follow.stop()
    after = attempts(repo)
    row["resumable"] = (f"exit {again.returncode}; asked {'+'.join(e['stage'] for e in follow.log) or 'nothing'}; "
                        f"{len(after) - len(made)} new attempt(s)")
    row["follow_up_line"] = line(again.stdout + "\n" + again.stderr, r"Stopped")
    return row


def priced(kgit: Kgit, repo: Path, model: str, server) -> dict:
    """What kgit recorded for a priced run, against the endpoint's own token counts."""
    report = kgit(repo, "report", "--json")
    markdown = kgit(repo, "report", "--markdown")
    totals = json.loads(report.stdout) if report.returncode == 0 else {}
    trailer = git(repo, "log", "-1", "--branches=kgit/*", "--format=%(trailers:key=Kgit-Cost-USD,valueonly)").strip()
    return {"billed_by_server_count_usd": round(server.billed(*PRICES[model]), 8),
            "report_json_cost_usd": totals.get("cost_usd"),
            "report_markdown_cost": line(markdown.stdout, r"LLM cost"),
            "commit_cost_trailer": trailer,
            "server_tokens": [(e["stage"], e.get("usage", {}).get("prompt_tokens"),
                               e.get("usage", {}).get("completion_tokens")) for e in server.log]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kgit-src", type=Path, help="Run the kgit of this checkout (put first on PYTHONPATH).")
    parser.add_argument("--only", help="Comma-separated case numbers, e.g. 2,8 or 6a.")
    parser.add_argument("--json", action="store_true", help="Print the rows as JSON instead of the table.")
    args = parser.parse_args()
    kgit = Kgit(args.kgit_src.resolve() if args.kgit_src else None)
    print(f"kgit under test: {kgit.source()}", file=sys.stderr)
    wanted = set(args.only.split(",")) if args.only else None
    root = Path(tempfile.mkdtemp(prefix="kgit-llm-faults-"))
    try:
        template_repo = template(kgit, root)
        rows = []
        for case in CASES:
            number = case[0].split()[0]
            if wanted and number not in wanted and number.rstrip("ab") not in wanted:
                continue
            print(f"case {case[0]} ...", file=sys.stderr, flush=True)
            rows.append(run_case(kgit, template_repo, root, case))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(tabulate([[r["case"], r["printed"] + ("" if r["summary_table"] else " [no summary table]"), r["exit"],
                     f"{r['committed']} {','.join(r['statuses'])}".strip(),
                     r["resumable"]] for r in rows],
                   headers=["case", "what kgit printed", "exit", "committed", "resumable (follow-up run)"],
                   tablefmt="github"))
    for r in rows:
        details = {k: v for k, v in r.items() if k not in ("case", "printed", "exit", "committed", "statuses",
                                                           "resumable", "summary_table")}
        print(f"\n{r['case']}: " + json.dumps(details))


if __name__ == "__main__":
    main()
