"""Where kgit's wall figure parts from GPU MODE's: the fp8 kernels in upstream's timing loop,
one difference from kgit's runner added at a time.

On the H200 GPU MODE's amd/eval.py (leaderboard mode) gave the fp8 baseline 631.6 us a call
(geomean of 18 shapes) where kgit's gpumode-leaderboard-wall gave 883.9, a constant ~180 us
more on every shape; experiment 47 of the shipped campaign took 1724.9 us there and 689.4 in
kgit. Each column below is amd/eval.py's loop (synchronize, clock, one call, synchronize,
clock, fresh inputs every call), per shape, with one of kgit's circumstances added:

- upstream-like: each call's inputs made in this process just before it, a clone kept for the
  check, checked after it, then dropped (what amd/eval.py does);
- made ahead: every call's inputs made before the loop, in buffers of their own;
- + guards: made ahead, with kgit's runtime guards armed around each call (harness/guards.py);
- 2 processes: kgit's layout: a judge process makes each call's inputs and copies them into
  buffers it shares with a runner process over CUDA IPC, synchronizes, and asks the runner,
  which times the call; the GPU last ran the judge's work when the runner's clock starts;
- + context touched: the same, the runner first running a one-element op of its own and
  synchronizing before its clock starts (the GPU's last work is then the runner's, as in
  upstream's single process);
- + upstream's cache: the same again, the runner also making and dropping a tuple of inputs,
  a clone and the check's dequantized operands before its clock (its caching allocator then
  holds what upstream's holds when a call starts; `torch.cuda.graph` empties it on every
  capture, which costs a cudaFree a cached segment);
- + judge's cache: instead, the runner allocates and drops segments of the sizes the judge's
  caching allocator holds free at that moment (the judge makes each call's inputs and checks
  its output, as upstream's process does, so its cache is upstream's less the clone);
- upstream-like again: the first column repeated, for the run-to-run spread.

The columns that move the figure towards upstream's name the cause; the host column is the
time until the call returned (its launches), from the made-ahead loop.

    python benchmarks/process_state.py                    # baseline and exp47, 3 shapes (H200)
    python benchmarks/process_state.py --kernels exp47 --reps 30

Needs a GPU: the interpreter on the CPU neither captures graphs nor caches device memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

from protocol_compare import PROBLEM_DIR, kernel_sources
from tabulate import tabulate

from kgit_harness import timing

# A launch-bound shape, a mid one and a large one of the fp8 problem's benchmark set.
SHAPES = [(1024, 7168, 256, 5364), (6144, 4096, 512, 45245), (6144, 7168, 2048, 76547)]
# The most the runner holds free in the "+ judge's cache" column, as the judge allows it (16 GiB).
HOLD_BYTES = 16 << 30
FORBIDDEN = ["torch._scaled_mm", "torch.matmul", "torch.mm", "torch.bmm", "torch.addmm", "torch.einsum",
             "torch.tensordot", "torch.nn.functional.linear", "torch.Tensor.matmul", "torch.Tensor.mm"]


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _clone(data):
    return tuple(x.clone() for x in data)


def _sync(torch) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(torch, kernel, data) -> tuple[float, float]:
    """(wall us, host us) of one call, as amd/eval.py's leaderboard mode times it."""
    _sync(torch)
    start = time.perf_counter_ns()
    out = kernel.custom_kernel(data)
    returned = time.perf_counter_ns()
    _sync(torch)
    end = time.perf_counter_ns()
    del out
    return (end - start) / 1e3, (returned - start) / 1e3


def upstream_like(torch, ref, kernel, shape, reps: int) -> float:
    m, n, k, seed = shape
    data = ref.generate_input(m, n, k, seed)
    check = _clone(data)
    ok, why = ref.check_implementation(check, kernel.custom_kernel(data))
    if not ok:
        raise SystemExit(f"the first call is wrong: {why}")
    times = []
    for _ in range(reps):
        seed += 13
        data = ref.generate_input(m, n, k, seed)
        check = _clone(data)
        wall, _host = _timed(torch, kernel, data)
        times.append(wall)
        ok, why = ref.check_implementation(check, data[-1])
        if not ok:
            raise SystemExit(f"a timed call is wrong: {why}")
    return statistics.fmean(times)


def made_ahead(torch, ref, kernel, shape, reps: int, guards=None) -> tuple[float, float]:
    m, n, k, seed = shape
    inputs = [ref.generate_input(m, n, k, seed + 13 * i) for i in range(reps + 1)]
    kernel.custom_kernel(inputs[0])
    walls, hosts = [], []
    for data in inputs[1:]:
        if guards is None:
            wall, host = _timed(torch, kernel, data)
        else:
            with guards.armed():
                wall, host = _timed(torch, kernel, data)
        walls.append(wall)
        hosts.append(host)
    return statistics.fmean(walls), statistics.fmean(hosts)


# -- two processes: kgit's judge/runner layout -------------------------------------------------

def _runner(kernel_path: str, conn) -> None:
    """The runner's side: shared slots in, one timed call per request, its figure out."""
    import torch

    sys.path.insert(0, str(PROBLEM_DIR))
    ref = _module(PROBLEM_DIR / "reference.py", "fp8_reference")
    kernel = _module(Path(kernel_path), "kernel_runner")
    tiny = torch.zeros(1, device="cuda" if torch.cuda.is_available() else "cpu")
    slots = None
    while True:
        message = conn.recv()
        if message[0] == "slots":
            slots = message[1]
            conn.send("ok")
        elif message[0] == "warm":
            kernel.custom_kernel(slots[0])
            _sync(torch)
            conn.send("ok")
        elif message[0] == "call":
            _, index, touch, cache, shape = message
            if cache == "upstream":
                m, n, k, seed = shape
                data = ref.generate_input(m, n, k, seed)
                check = _clone(data)
                dequantized = ref.dequantize(*check[:4])
                del data, check, dequantized
            elif cache:
                held = [torch.empty(size, dtype=torch.uint8, device="cuda") for size in cache]
                del held
            if touch:
                tiny.zero_()
            conn.send(_timed(torch, kernel, slots[index])[0])
        else:
            conn.send("bye")
            return


def two_processes(torch, ref, kernel_path: Path, shape, reps: int, variants: list[tuple[bool, str | None]]) -> list[float]:
    """Mean wall us a call for each (touch, cache) variant, the judge filling a fresh slot each
    time and checking the output afterwards, as kgit's judge does. `cache`: None, "upstream"
    (the runner makes and drops a tuple, its clone and the check's operands before its clock)
    or "judge" (the runner allocates and drops segments of the sizes the judge's allocator
    holds free)."""
    import torch.multiprocessing  # noqa: F401  (tensors then travel through pipes, CUDA ones over IPC)

    m, n, k, seed = shape
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    runner = ctx.Process(target=_runner, args=(str(kernel_path), there), daemon=True)
    runner.start()
    calls = reps * len(variants)
    slots = [ref.generate_input(m, n, k, seed + 7 * i) for i in range(calls + 1)]
    _sync(torch)
    here.send(("slots", slots))
    here.recv()
    here.send(("warm",))
    here.recv()
    times: list[list[float]] = [[] for _ in variants]
    free: list[int] = []
    for i in range(calls):
        v = i % len(variants)  # interleaved, so drift falls on every variant alike
        private = ref.generate_input(m, n, k, seed + 100_003 + i)
        for dst, src in zip(slots[1 + i], private):
            dst.copy_(src)
        _sync(torch)
        touch, cache = variants[v]
        here.send(("call", 1 + i, touch, free if cache == "judge" else cache, (m, n, k, seed + 200_003 + i)))
        times[v].append(here.recv())
        ok, why = ref.check_implementation(private, slots[1 + i][-1])
        if not ok:
            raise SystemExit(f"a timed call in the runner is wrong: {why}")
        del private
        free = timing.free_segments(torch, HOLD_BYTES)
    here.send(("stop",))
    here.recv()
    runner.join(timeout=30)
    return [statistics.fmean(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", nargs="+", default=["baseline", "exp47"],
                        help="baseline, exp47, or paths to kernel files")
    parser.add_argument("--reps", type=int, default=20, help="timed calls per column and shape")
    parser.add_argument("--smoke", action="store_true",
                        help="on the CPU, in Triton's interpreter, on a small shape: the code paths, no figures")
    args = parser.parse_args()
    shapes = SHAPES
    if args.smoke:
        import os

        os.environ["TRITON_INTERPRET"] = "1"
        shapes = [(64, 192, 256, 1)]
    import torch

    if not torch.cuda.is_available() and not args.smoke:
        raise SystemExit("needs a CUDA or ROCm GPU: the interpreter neither captures graphs nor caches device memory "
                         "(--smoke runs the code paths on the CPU)")
    from kgit_harness.guards import Guards

    sys.path.insert(0, str(PROBLEM_DIR))
    ref = _module(PROBLEM_DIR / "reference.py", "fp8_reference")
    guards = Guards(torch, FORBIDDEN, None)
    headers = ["kernel", "shape", "upstream-like", "made ahead", "host", "+ guards", "guards host",
               "2 processes", "+ context touched", "+ upstream's cache", "+ judge's cache", "upstream-like again"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, source in kernel_sources(args.kernels, Path(tmp)).items():
            path = Path(tmp) / f"{name}.py"
            path.write_text(source)
            kernel = _module(path, f"kernel_{name}")
            for shape in shapes:
                first = upstream_like(torch, ref, kernel, shape, args.reps)
                ahead, host = made_ahead(torch, ref, kernel, shape, args.reps)
                guarded, guarded_host = made_ahead(torch, ref, kernel, shape, args.reps, guards)
                apart = two_processes(torch, ref, path, shape, args.reps,
                                      [(False, None), (True, None), (True, "upstream"), (True, "judge")])
                again = upstream_like(torch, ref, kernel, shape, args.reps)
                figures = [first, ahead, host, guarded, guarded_host, *apart, again]
                rows.append([name, "x".join(map(str, shape[:3])), *(round(f, 1) for f in figures)])
                print(*rows[-1], flush=True)
    where = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (interpreter, no figures)"
    print(f"\n{where}, torch {torch.__version__}; mean us a call over {args.reps} calls")
    print(tabulate(rows, headers=headers))


if __name__ == "__main__":
    main()
