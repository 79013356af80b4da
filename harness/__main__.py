"""Child start-up: confine this process, then run the harness.

The confinement (dying with kgit, resource limits, read-only filesystem, no
capabilities) is applied here, before torch or the candidate is imported, so nothing
the candidate does runs with more than what is left. What held is reported on the
result pipe as a first line, ahead of the result document.
"""

import faulthandler
import json
import os
import sys

from kgit_harness import confine
from kgit_harness.runner import main


def _start() -> int:
    argv = sys.argv[1:]
    spec_path = argv[argv.index("--spec") + 1]
    result_fd = int(argv[argv.index("--result-fd") + 1])
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    # The spec holds the secret seed; the candidate runs in this folder, so the file goes.
    os.unlink(spec_path)
    # A segfault or abort then leaves the Python stack in stderr: the excerpt the writer sees.
    faulthandler.enable()
    report = confine.apply(spec)
    os.write(result_fd, (json.dumps({"kgit_confine": report}) + "\n").encode())
    return main(argv, spec=spec)


sys.exit(_start())
