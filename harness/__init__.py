"""The evaluation runtime. It runs as `python -I -B -m kgit_harness` in a child process.

It imports nothing from kgit: it is the piece that runs on a remote GPU host, where it
needs only the standard library, torch, triton and pyyaml. Nothing here is imported by
kgit except `problem` (task.yml parsing) and `result` (the JSON schema): torch and the
candidate stay in the child.
"""

# The kgit release this harness belongs to: part of every result's harness id.
__version__ = "0.1.0"
