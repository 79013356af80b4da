"""The evaluation runtime. It runs as `python -I -B -m kgit.harness` in a child process.

Nothing here is imported by the parent except `problem` (task.yml parsing) and
`result` (the JSON schema): torch and the candidate stay in the child.
"""
