"""What building a variant's launcher stub beside its compile (harness/precompile.py, _EarlyLauncher)
saves the compiles ahead, on a machine without a GPU.

In fresh processes with a fresh Triton cache each, after kgit's warm-up: `compile_ahead` of the
fp8 problem's baseline for MI300X (gfx942, which Triton's AMD back end compiles on the CPU) with
Triton's own HIP launcher class, which in Triton 3.6 builds a C stub with the host's compiler.
The stub loads a HIP runtime when it is imported; a stand-in one (one function, built here with
`cc`) lets it load on a machine without ROCm. "after" builds the stub once the compile is done,
as before the early build; "beside" is kgit's way. From Triton 3.9 the launcher is generic
Python that asks the driver for its helper, which this driver has not: the table then shows no
stubs, and nothing to save. On the H200 host (Triton 3.6) the stub took 0.22-0.34 s after the
compiles (benchmarks/evolve_rate.py's precompile table).

    python benchmarks/launcher_overlap.py                 # one shape (one variant), 3 runs each
    python benchmarks/launcher_overlap.py --shapes 4 --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from mi300_driver import Mi300Driver  # noqa: E402 - the tests' stand-in driver

# The HIP runtime's one entry point a Triton 3.6 stub asks for; every symbol it then asks for
# is a function that does nothing (none is called: nothing is launched).
_STAND_IN = """
static int nothing(void) { return 0; }
int hipGetProcAddress(const char *symbol, void **pfn, int version, unsigned long flags, int *status) {
  *pfn = (void *)nothing;
  if (status) *status = 0;
  return 0;
}
"""
# (m, n, k) of the fp8 problem's test shapes: the first is one variant, the four two.
SHAPES = [(64, 1536, 7168), (64, 64, 128), (96, 7168, 256), (64, 576, 7168)]


def one(shapes: int, early: bool) -> dict:
    """In this (fresh) process: compile_ahead's report."""
    os.environ["TRITON_INTERPRET"] = "0"
    import torch
    from triton.backends.amd.driver import HIPLauncher
    from triton.runtime import driver

    from kgit_harness import jitwarm, precompile, problem

    folder = problem.shipped()["fp8_blockscale_gemm"]
    kernel = problem.load_module(folder / "kernel.py", "_kgit_bench_kernel")
    driver.set_active(Mi300Driver(HIPLauncher))
    jitwarm.after_device(torch)
    if not early:
        class After:
            def __init__(self, fn, deadline):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return None

            def answer(self):
                return "not started"

        precompile._EarlyLauncher = After

    def laid_out(m, n, k):
        fp8 = torch.float8_e4m3fn
        blocks = -(-k // 128)
        return (torch.empty(k, m, dtype=fp8).t(), torch.empty(k, n, dtype=fp8).t(), torch.empty(blocks, m).t(),
                torch.empty(blocks, -(-n // 128)).t(), torch.empty(m, n, dtype=torch.bfloat16))

    return precompile.compile_ahead(kernel.custom_kernel, [laid_out(*s) for s in SHAPES[:shapes]], 120.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=int, default=1, choices=range(1, len(SHAPES) + 1))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--one", choices=["after", "beside"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.shapes, args.one == "beside")))
        return
    import triton

    with tempfile.TemporaryDirectory(prefix="kgit-launcher-") as tmp:
        lib = Path(tmp, "rocm", "lib")
        lib.mkdir(parents=True)
        Path(tmp, "hip.c").write_text(_STAND_IN)
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib / "libamdhip64.so"), str(Path(tmp, "hip.c"))],
                       check=True)
        rows = []
        for run in range(args.runs):
            for way in ("after", "beside"):  # alternated, so drift in the machine's load hits both
                env = {**os.environ, "ROCM_PATH": str(lib.parent), "TRITON_CACHE_DIR": tempfile.mkdtemp(dir=tmp)}
                done = subprocess.run([sys.executable, __file__, "--one", way, "--shapes", str(args.shapes)], env=env,
                                      capture_output=True, text=True, timeout=600)
                if done.returncode:
                    sys.exit(f"the {way} run failed:\n{done.stderr[-3000:]}")
                r = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append([run + 1, way, r.get("variants"), r.get("launchers"), r.get("early_launchers", 0),
                             r.get("slowest_compile_s"), r.get("slowest_launcher_s"), r.get("seconds")])
    print(f"fp8_blockscale_gemm baseline for gfx942, {args.shapes} shape(s), Triton {triton.__version__}, "
          f"{os.cpu_count()} cores; seconds")
    print(tabulate(rows, headers=["run", "launcher", "variants", "stubs", "built beside", "slowest compile",
                                  "slowest stub after it", "compile_ahead"]))
    for way in ("after", "beside"):
        total = [r[-1] for r in rows if r[1] == way]
        print(f"{way}: compile_ahead mean {sum(total) / len(total):.3f} s over {len(total)} runs")


if __name__ == "__main__":
    main()
