"""The runner's host cost per candidate call, on the CPU: what the guards add.

    python benchmarks/runner_overhead.py [--calls 2000] [--repeats 5]

A Triton launch is host-bound Python: it reads each tensor argument's data_ptr, dtype,
strides and device, and the candidate's wrapper allocates its output. That is what a
"launch-bound" shape costs in the judge's back-to-back batch, and every one of those
tensor method calls passes through a TorchFunctionMode when one is armed. This script
runs such a wrapper (no GPU: the launch is emulated by the attribute reads a Triton 3.x
launcher makes, the kernel by a tiny copy) on the softmax problem's forbidden list, and
prints microseconds per call for:

- bare: the wrapper with no guards;
- per-call guarded: guards armed, left and verified around every call (the timed path);
- batch: guards armed once around a loop of calls and verified once (the batch path);
- deliver: the copy-out of the returned tensor into the judge's buffer;
- the intact checks (threads left running, the stream, the timers) and arming the
  guards, each alone;
- the two guarded paths again as they were before the Python-name mode was limited to
  names the ATen mode cannot see (the mode armed on every forbidden name).

The rows are measured interleaved, so load from other processes falls on all alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from kgit_harness import guards as guards_mod
from kgit_harness import problem, timing
from kgit_harness.guards import Guards


# The tensor reads a Triton launcher makes per tensor argument (pointer, specialisation,
# dtype signature, device and stream lookup), as a CPU stand-in for the launch itself.
def _launch(x, y, cols):
    for t in (x, y):
        t.data_ptr()
        t.data_ptr() % 16  # noqa: B018 - each attribute read is what is timed
        t.dtype  # noqa: B018
        t.device  # noqa: B018
        t.is_cuda  # noqa: B018
    x.stride(0)
    y.stride(0)
    y.copy_(x)


def wrapper(x):
    rows, cols = x.shape
    y = torch.empty_like(x)
    _launch(x, y, cols)
    return y


def per_call_us(paths: dict, calls: int, repeats: int) -> dict:
    """{name: median us per call}, the paths run in turn `repeats` times."""
    times = {name: [] for name in paths}
    for _ in range(repeats):
        for name, fn in paths.items():
            t0 = time.perf_counter()
            fn(calls)
            times[name].append((time.perf_counter() - t0) * 1e6 / calls)
    return {name: statistics.median(found) for name, found in times.items()}


def _paths(guards, x, target) -> dict:
    def per_call(n):
        for _ in range(n):
            with guards.armed():
                wrapper(x)
            guards.after_call()

    def batch(n):
        with guards.armed():
            outs = [wrapper(x) for _ in range(n)]
        guards.after_call(trap=False)
        return outs

    return {"per-call guarded (timed path)": per_call, "batch, guards armed once": batch}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from tabulate import tabulate

    forbidden = list(problem.load_task(problem.shipped()["softmax"]).forbidden)
    x = torch.randn(8, 16)
    target = torch.empty_like(x)
    now = Guards(torch, forbidden, None)
    before = Guards(torch, forbidden, None)
    before._ops = guards_mod._resolve(forbidden)  # as before: the Python-name mode on every name
    before._mode = guards_mod._op_mode(torch, before)
    for g in (now, before):
        g.snapshot_threads()

    def bare(n):
        for _ in range(n):
            wrapper(x)

    def deliver(n):
        y = wrapper(x)
        for _ in range(n):
            target.copy_(y)

    clock = timing.Clock(torch, on_gpu=False)

    def checks(n):
        for _ in range(n):
            now.after_call()  # threads left running, the stream
            clock.tampered()  # the timers

    def arm(n):
        for _ in range(n):
            with now.armed():
                pass

    paths = {"bare wrapper": bare, "deliver (copy-out)": deliver,
             "intact checks alone (threads, stream, timers)": checks, "arm + disarm alone": arm}
    paths.update(_paths(now, x, target))
    paths.update({f"{name}, before": fn for name, fn in _paths(before, x, target).items()})
    for fn in paths.values():
        fn(10)  # the first dispatch through each mode builds its caches
    found = per_call_us(paths, args.calls, args.repeats)
    print(f"softmax forbidden list: {len(forbidden)} names; Python-name mode now: {now._mode is not None}; "
          f"ATen trap: {now._key is not None}; "
          f"torch {torch.__version__}; "
          f"load {os.getloadavg()[0]:.1f}")
    print(tabulate([[name, f"{us:.1f}"] for name, us in found.items()], headers=["path", "us per call"]))


if __name__ == "__main__":
    main()
