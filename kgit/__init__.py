"""kgit: optimize GPU kernels with an LLM scientist; every experiment is a git commit."""

from kgit_harness import __version__  # one release number for kgit and its harness

__all__ = ["__version__"]
