"""Files kgit ships beside its code: the prompt templates and the default `.kgit.yaml`.

They live at the top of the kgit repository (`prompts/`, `.kgit.yaml`), where people
look for them. A wheel carries copies under `kgit/_shipped/` (setup.py puts them
there); a checkout or an editable install reads them in place.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PACKAGED = "_shipped"
DEFAULT_CONFIG = ".kgit.yaml"


def path(relative: str) -> Path:
    packaged = Path(str(resources.files("kgit").joinpath(PACKAGED).joinpath(relative)))
    if packaged.exists():
        return packaged
    return Path(__file__).resolve().parent.parent / relative


def prompts_dir() -> Path:
    return path("prompts")


def default_config() -> Path:
    return path(DEFAULT_CONFIG)
