"""Entry point: `python -I -B -m kgit_harness judge ...` or `... runner ...`.

kgit starts the judge (harness/judge.py), the trusted side that decides the result; the
judge starts the runner (harness/runner.py), where the candidate's code runs. The runner
confines itself (harness/confine.py) before torch or the candidate is imported.
"""

import sys


def _start() -> int:
    argv = sys.argv[1:]
    role = argv[0] if argv else ""
    if role == "judge":
        from kgit_harness.judge import main
    elif role == "runner":
        from kgit_harness.runner import main
    else:
        print("usage: python -I -B -m kgit_harness {judge --spec SPEC --result-fd FD | runner ...}", file=sys.stderr)
        return 2
    return main(argv[1:])


sys.exit(_start())
