"""compile_ahead on a machine without a GPU, as far as it goes: a driver that answers with
MI300X's target (Triton's AMD back end compiles on the CPU), printed as JSON. Its launcher
"stub" builds nothing: it notes, one JSON line each, when it was made and from what.

    python tests/precompile_probe.py KERNEL.py CACHE_DIR [WAIT_S]

Run in a fresh process: the kernel is imported in compiled mode (TRITON_INTERPRET=0) before
anything imports Triton otherwise, and the driver is tests/mi300_driver.py's.
"""

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

from mi300_driver import Mi300Driver

os.environ["TRITON_INTERPRET"] = "0"
os.environ["TRITON_CACHE_DIR"] = sys.argv[2]


class _NotingLauncher:
    """Notes in CACHE_DIR/../launchers.jsonl when it was made, for which kernel, and what it read
    of the metadata that goes into a real stub's source."""

    def __init__(self, src, metadata):
        note = {"at": time.time(), "kernel": src.fn.__name__, "signature": repr(src.signature),
                "warp_size": metadata.warp_size, "tensordesc_meta": metadata.tensordesc_meta}
        with open(Path(sys.argv[2]).parent / "launchers.jsonl", "a") as f:
            f.write(json.dumps(note) + "\n")


def _entries(folder: str) -> set:
    return {p.name for p in Path(folder).iterdir()} if Path(folder).exists() else set()


def main():
    import torch
    from triton.runtime import driver, jit

    from kgit_harness import portable, precompile

    spec = importlib.util.spec_from_file_location("_probe_kernel", sys.argv[1])
    kernel = importlib.util.module_from_spec(spec)
    sys.modules["_probe_kernel"] = kernel
    spec.loader.exec_module(kernel)
    driver.set_active(Mi300Driver(_NotingLauncher))
    # The runner's warm-up pays Triton's one-time costs (its source hash, the back end) before a
    # candidate arrives; so does this, with a kernel of its own.
    from kgit_harness import jitwarm

    jitwarm.after_device(torch)
    # Two sizes, one variant: n is specialized only by its divisibility by 16, as on a GPU.
    inputs = [tuple(torch.empty(n) for _ in range(3)) for n in (4096, 65536)]
    wait = float(sys.argv[3]) if len(sys.argv) > 3 else precompile.WAIT_S
    ahead = precompile.compile_ahead(kernel.custom_kernel, inputs, wait)
    cached = _entries(sys.argv[2])

    found = {"ahead": ahead, "cached": len(cached)}
    if ahead.get("variants"):
        # The check's own first call, as the runner would make it, minus the launch.
        run = jit.JITFunction.run
        jit.JITFunction.run = lambda self, *args, grid, warmup, **kwargs: run(self, *args, grid=grid, warmup=True,
                                                                              **kwargs)
        started = time.perf_counter()
        with portable.mapped_devices("cpu"):
            kernel.custom_kernel(inputs[0])
        found.update(new_after_call=sorted(_entries(sys.argv[2]) - cached),
                     call_s=round(time.perf_counter() - started, 3))
    print(json.dumps(found))


if __name__ == "__main__":
    main()
