"""Cheating kernels, one file per family, and ways to run them through the harness.

Each cheat's first comment line names its problem; `source()` prepends that problem's
honest Triton body (_add.py or _softmax.py) so a cheat file holds only the cheat.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from kgit_harness.problem import shipped

HERE = Path(__file__).parent
FAST_TIMING = {"target_rse": 0.5, "max_time_s": 0.05, "min_reps": 2, "warmup": 0}


def problem_of(name: str) -> str:
    first = (HERE / f"{name}.py").read_text().splitlines()[0]
    return "softmax" if first.startswith("# softmax") else "vector_add"


def source(name: str) -> str:
    """The cheat with its problem's honest body before it, and the helpers it names (`# uses: _forge`)."""
    cheat = (HERE / f"{name}.py").read_text()
    parts = [(HERE / ("_softmax.py" if problem_of(name) == "softmax" else "_add.py")).read_text()]
    for line in cheat.splitlines():
        if line.startswith("# uses: "):
            parts += [(HERE / f"{helper.strip()}.py").read_text() for helper in line[len("# uses: "):].split(",")]
    return "\n\n".join([*parts, cheat])


def baseline(problem: str) -> str:
    return (shipped()[problem] / "kernel.py").read_text()


def stage(tmp_path: Path, problem: str, code: str) -> tuple[Path, Path]:
    """(problem_dir, candidate_dir) as child.stage_candidate lays them out."""
    candidate = tmp_path / "candidate"
    candidate.mkdir(parents=True)
    (candidate / "kernel.py").write_text(code)
    return shipped()[problem], candidate


def run_harness(tmp_path: Path, name: str | None = None, timing: dict | None = None, *,
                problem: str | None = None, code: str | None = None, **spec_extra) -> dict:
    """Run the harness on a cheat (by name) or on `code` for `problem`, in a child process.

    On the CPU the judge is forked from the test process, reusing its imported torch
    (seconds saved per cheat); the runner it starts is always a fresh `python -I`, so
    the candidate shares nothing with the test process or the judge. CUDA does not
    survive a fork, so on a GPU the judge is a fresh `python -I` too.
    child.run_child is exercised separately.
    """
    if name is not None:
        problem, code = problem_of(name), source(name)
    problem_dir, candidate = stage(tmp_path, problem, code)
    # Most cheats reach their target through names built at run time, which the static policy
    # refuses outright (test_every_computed_name_cheat_is_refused_first): here they pass it,
    # so that each test shows the defence behind the policy holding. `computed_names=False`
    # runs a cheat under the whole policy, as kgit does.
    spec = {"problem_dir": str(problem_dir), "candidate_dir": str(candidate),
            "timing": dict(timing or FAST_TIMING), "secret_seed": secrets.randbelow(2**31),
            # Every value the config sets is the spec's to give (harness/spec.py): the judge has no default.
            "timeout_s": 3600, "kernel_split": True, "computed_names": True, **spec_extra}
    import torch

    if torch.cuda.is_available():
        return _spawned(tmp_path, spec)


    def evaluate():
        from kgit_harness import judge

        # The real child (`python -I`) has no GitPython; this fork of the test process
        # does (kgit.archive imports it), and its git/refs/reference.py would answer a
        # cheat that searches the loaded modules for a file named reference.py.
        for module in [m for m in sys.modules if m == "git" or m.startswith("git.")]:
            del sys.modules[module]

        return judge.run(spec)

    return in_fork(evaluate, cwd=tmp_path)


def in_fork(fn, cwd: Path | None = None):
    """fn() in a forked child (torch already imported, triton fresh); its JSON-able result."""
    import torch  # noqa: F401 - imported once here, inherited by every fork
    import triton  # noqa: F401

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            os.close(read_fd)
            if cwd is not None:
                os.chdir(cwd)
            _fresh_triton()
            value = fn()
            with os.fdopen(write_fd, "w") as out:
                out.write(json.dumps(value))
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        payload = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert payload, f"the forked child died without a result (wait status {status})"
    return json.loads(payload)


def _spawned(tmp_path: Path, spec: dict) -> dict:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-I", "-B", "-m", "kgit_harness", "judge", "--spec", str(spec_path),
                             "--result-fd", str(write_fd)], cwd=tmp_path, pass_fds=(write_fd,))
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        payload = pipe.read()
    proc.wait()
    assert payload, f"the harness child died without a result (exit code {proc.returncode})"
    return json.loads(payload)


def _fresh_triton():
    """Forget a triton the test process imported: its @jit library functions were built
    for the GPU backend, and the CPU interpreter is only chosen at import time."""
    import torch

    if torch.cuda.is_available():
        return
    os.environ["TRITON_INTERPRET"] = "1"
    for name in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
        if not name.startswith("triton._C"):
            del sys.modules[name]
