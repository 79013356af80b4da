"""kgit: optimize GPU kernels with an LLM scientist; every experiment is a git commit."""

__version__ = "0.1.0"
