"""How fast kgit reads big archives.

Synthesizes kernel repositories with 10,000 and 100,000 attempt commits (through
`git fast-import`; 10 attempts per experiment branch, 18 per-shape timing trailers each,
a measurement note on every tenth attempt) and times `Repo.read()` (one `git log -z`
call plus parsing): cold (no archive cache; before and after kgit's ref packing and
commit-graph), warm (cache, nothing new), and after one new attempt; and the whole
`kgit log --json` command: its first run (which renders every attempt and keeps them),
later ones (nothing moved: the kept objects are the answer), and one after a new note on
an old attempt (the archive read warm, that one attempt rendered again).

    python benchmarks/archive_scale.py [--sizes 10000 100000]
Goals: at 100,000 attempts on a 2-core machine, the first read
<= 2 s, `kgit log --json` <= 3 s, the warm read no slower than 1.67 s. Other work on the
machine inflates wall times: repeat, and compare before and after back to back.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from kgit import config as config_mod
from kgit.archive.repo import Repo

SHAPES = [f"m={m},n={n},k={k}" for m in (1024, 6144) for n, k in
          [(1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048), (4608, 7168),
           (7168, 2304), (512, 7168), (4096, 512)]]
IDENT = "kgit bench <bench@localhost>"
T0 = 1_700_000_000


def _data(text: str) -> bytes:
    raw = text.encode()
    return b"data %d\n" % len(raw) + raw + b"\n"


def _message(exp: int, att: int, base_sha_mark: str, ok: bool) -> str:
    lines = [f"Kgit-Experiment: {exp}", f"Kgit-Attempt: {att}", f"Kgit-Branch: kgit/{exp}-idea-{exp}",
             f"Kgit-Base: {base_sha_mark}", f"Kgit-Hypothesis: idea number {exp}: retile and pipeline deeper",
             f"Kgit-Status: {'ok' if ok else 'incorrect'}", "Kgit-Device: NVIDIA H200", "Kgit-Timing: events"]
    if ok:
        lines.append(f"Kgit-Geomean-us: {100 + (exp * 7 + att) % 50}.5")
        lines += [f"Kgit-Time-us: {s} {50 + (exp + i) % 90}.25" for i, s in enumerate(SHAPES)]
        lines += ["Kgit-Speedup: 1.050", "Kgit-Speedup-Baseline: 1.100"]
    lines += ["Kgit-Harness: kgit 0.1.0 harness bench", "Kgit-Eval-s: 12.0", "Kgit-Model: offline"]
    subject = f"idea-{exp}: speedup 1.05x vs base (geomean 120.5 us)" if ok else f"idea-{exp}: incorrect"
    return f"{subject}\n\nHypothesis: idea number {exp}\n\n" + "\n".join(lines) + "\n"


def synthesize(root: Path, attempts: int) -> None:
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    out = []
    out.append(b"blob\nmark :1\n" + _data(config_mod.default_text()))
    out.append(b"blob\nmark :2\n" + _data("def custom_kernel(data):\n    return data\n"))
    baseline = "\n".join(["kgit baseline: bench", "", "Kgit-Experiment: 0", "Kgit-Attempt: 0",
                          "Kgit-Status: ok", "Kgit-Device: NVIDIA H200", "Kgit-Geomean-us: 130.0"]) + "\n"
    out.append(f"commit refs/heads/main\nmark :3\ncommitter {IDENT} {T0} +0000\n".encode() + _data(baseline)
               + b"M 100644 :1 .kgit.yaml\nM 100644 :2 kernel.py\n\n")
    out.append(b"reset refs/tags/kgit/baseline\nfrom :3\n\n")
    mark = 4
    per_branch = 10
    for exp in range(1, attempts // per_branch + 1):
        parent = ":3"
        for att in range(1, per_branch + 1):
            msg = _message(exp, att, "0" * 40, ok=att % 3 != 0)
            out.append(f"commit refs/heads/kgit/{exp}-idea-{exp}\nmark :{mark}\ncommitter {IDENT} {T0 + mark} +0000\n".encode()
                       + _data(msg) + f"from {parent}\n\n".encode())
            parent = f":{mark}"
            mark += 1
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input=b"".join(out), check=True)
    # Notes on every tenth attempt, added in one fast-import commit on the notes ref.
    shas = subprocess.run(["git", "rev-list", "--branches=kgit/*", "--not", "main"], cwd=root,
                          capture_output=True, text=True, check=True).stdout.split()
    note = b'{"device":"AMD Instinct MI300X","geomean_us":99.0,"harness":"h","times":{}}'
    notes = [b"blob\nmark :1\n" + _data(note.decode()),
             f"commit refs/notes/kgit\ncommitter {IDENT} {T0 + mark} +0000\n".encode() + _data("notes")]
    notes += [f"N :1 {sha}\n".encode() for sha in shas[::10]]
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input=b"".join(notes) + b"\n", check=True)
    # As in a real archive, every commit is a second newer than the one before: git's
    # walk keeps pending tips in a date-sorted list, and identical dates make it quadratic.
    subprocess.run(["git", "checkout", "-q", "main"], cwd=root, check=True)


def best_of(fn, repeat=3, before=None) -> float:
    times = []
    for _ in range(repeat):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def add_attempt(root: Path) -> None:
    """One more attempt on the newest branch, as kgit would commit it."""
    tip = subprocess.run(["git", "for-each-ref", "--count=1", "--sort=-committerdate", "--format=%(refname) %(objectname)",
                          "refs/heads/kgit/"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    tree = subprocess.run(["git", "rev-parse", f"{tip[1]}^{{tree}}"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()
    sha = subprocess.run(["git", "commit-tree", tree, "-p", tip[1], "-F", "-"], cwd=root, input=_message(1, 99, "0" * 40, True),
                         capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["git", "update-ref", tip[0], sha], cwd=root, check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "repo"
            t0 = time.perf_counter()
            synthesize(root, size)
            build = time.perf_counter() - t0
            repo = Repo(root)
            cache = repo.state / "cache" / "archive-state.json"
            drop = lambda: cache.unlink(missing_ok=True)  # noqa: E731
            count = len(repo.read())
            first = best_of(repo.read, before=lambda: shutil.rmtree(repo.state / "cache", ignore_errors=True))
            cold_loose = best_of(repo.read, before=drop)
            noted = sum(1 for a in repo.read() if a.notes.documents)
            repo.maintain()  # what kgit does every MAINTAIN_EVERY experiments
            cold = best_of(repo.read, before=drop)
            repo.read()
            warm = best_of(repo.read)
            grown = best_of(repo.read, before=lambda: add_attempt(root))
            kgit_log = lambda: subprocess.run([sys.executable, "-m", "kgit", "log", "--json"], cwd=root, check=True,  # noqa: E731
                                              stdout=subprocess.DEVNULL)
            # The first `kgit log --json` renders every attempt (and keeps them); later ones join what was kept.
            first_log = best_of(kgit_log, repeat=1)
            log_json = best_of(kgit_log)
            shas = [a.sha for a in repo.read()]
            noted_log = best_of(kgit_log, before=lambda: repo.add_note(
                shas[len(shas) // 2], {"device": "NVIDIA H200", "geomean_us": 98.0, "times": {}}))
            rows.append([size, count, noted, f"{build:.1f}", f"{first:.3f}", f"{cold_loose:.3f}", f"{cold:.3f}",
                         f"{warm:.3f}", f"{grown:.3f}", f"{first_log:.3f}", f"{log_json:.3f}", f"{noted_log:.3f}"])
    print(tabulate(rows, headers=["attempts", "read back", "with notes", "synthesize s", "first read s (no cache)",
                                  "cold read s (loose refs)", "cold read s (maintained)", "warm read s",
                                  "read after +1 attempt s", "first kgit log --json s", "kgit log --json s",
                                  "kgit log --json after a new note s"],
                   tablefmt="github"))


if __name__ == "__main__":
    main()
