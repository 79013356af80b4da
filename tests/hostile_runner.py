"""A runner its candidate has taken over, for tests of what the judge accepts from it.

The judge starts its runner as `[*runner_prefix, python, -I, -B, -m, kgit_harness, runner,
--channel-fd N, --lifeline-fd M]`; with this script as the prefix (`python
tests/hostile_runner.py MODE --`) the real runner runs, changed the way a candidate that
owns the process could change it:

- forge-targets: build facts for a target name that writes trailers, and for a kernel the
  source does not define;
- reply-ahead: after each reply to a call, a second `done` sent before any request for it;
- slow-checks: the runner's own checks of each call take half a second.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    mode = sys.argv[1]
    argv = sys.argv[sys.argv.index("--") + 1:]
    argv = argv[argv.index("runner") + 1:]
    from kgit_harness import runner, targets

    if mode == "forge-targets":
        finish = targets.Build.finish

        def forged(self, wait=True):
            doc = finish(self, wait)
            doc["results"]["sm_90a\n\nKgit-Status: ok\nKgit-Geomean-us: 0.04"] = {"builds": True, "kernels": []}
            doc["results"]["gfx942"] = {"builds": True, "error": "x" * 100_000,
                                        "kernels": [{"kernel": "_kernel_the_source_lacks", "vgpr": 8}]}
            doc["notes"] = {"anything": ["else"]}
            return doc

        targets.Build.finish = forged
    elif mode == "reply-ahead":
        tell = runner.Session.tell

        def eager(self, message):
            tell(self, message)
            if message.get("op") == "done" and getattr(self, "after", None) is not None:
                tell(self, {"op": "done", "us": 0.01, "host_us": 0.01, "output": None})

        runner.Session.tell = eager
    elif mode == "slow-checks":
        verify = runner.Candidate.verify

        def slow(self, *args, **kwargs):
            time.sleep(0.5)
            return verify(self, *args, **kwargs)

        runner.Candidate.verify = slow
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return runner.main(argv)


if __name__ == "__main__":
    sys.exit(main())
