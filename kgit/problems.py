"""kgit's side of problem folders: the harness's parser, its errors in kgit's family.

The harness (`kgit_harness.problem`) reads task.yml for the judge too, so it cannot
raise KgitError; everything in kgit loads problems through here instead.
"""

from __future__ import annotations

from pathlib import Path

from kgit.errors import ConfigError, KgitError
from kgit_harness.problem import ProblemError, Task, TaskError, shape_key, shipped, shipped_dir

__all__ = ["Task", "load_task", "shape_key", "shipped", "shipped_dir"]


def load_task(problem_dir: Path) -> Task:
    from kgit_harness import problem

    try:
        return problem.load_task(problem_dir)
    except TaskError as e:
        raise ConfigError(str(e)) from None
    except ProblemError as e:
        raise KgitError(str(e)) from None
