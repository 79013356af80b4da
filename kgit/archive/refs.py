"""The names of kgit's refs: experiment branches `kgit/<N>-<slug>`, the baseline tag and
the notes ref. `ExperimentRef` is the one place a branch name is parsed or built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kgit.errors import KgitError

BRANCH_PREFIX = "kgit/"
BASELINE_TAG = "kgit/baseline"
NOTES_REF = "refs/notes/kgit"
_SLUG = re.compile(r"^[a-z0-9-]+$")
_BRANCH = re.compile(r"^kgit/(\d+)-([a-z0-9-]+)$")


class BadRefName(KgitError):
    """A name that is not an experiment branch `kgit/<N>-<slug>`."""


@dataclass(frozen=True, order=True)
class ExperimentRef:
    """Experiment `number` on branch `kgit/<number>-<slug>`."""

    number: int
    slug: str

    def __post_init__(self):
        if isinstance(self.number, bool) or not isinstance(self.number, int) or self.number < 0:
            raise BadRefName(f"an experiment number is a whole number >= 0, not {self.number!r}.")
        if not isinstance(self.slug, str) or not _SLUG.match(self.slug):
            raise BadRefName(f"an experiment slug is lowercase letters, digits and dashes, not {self.slug!r}.")

    @classmethod
    def parse(cls, name: str) -> ExperimentRef:
        """`kgit/<N>-<slug>`; anything else is refused."""
        found = cls.match(name)
        if found is None:
            raise BadRefName(f"{name!r} is not an experiment branch: those are named kgit/<N>-<slug>, "
                             "for example kgit/3-larger-blocks (`kgit log` lists them).")
        return found

    @classmethod
    def match(cls, name: str | None) -> ExperimentRef | None:
        """The experiment a branch name names, or None when it names none."""
        m = _BRANCH.match(name or "")
        return cls(int(m.group(1)), m.group(2)) if m else None

    @property
    def branch(self) -> str:
        return f"{BRANCH_PREFIX}{self.number}-{self.slug}"

    @property
    def ref(self) -> str:
        return f"refs/heads/{self.branch}"

    def __str__(self) -> str:
        return self.branch
