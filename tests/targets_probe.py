"""Build facts of one kernel in a fresh interpreter process, printed as JSON.

    python tests/targets_probe.py KERNEL.py INPUT_EXPR [KWARGS_JSON]

The kernel is imported with TRITON_INTERPRET=1 before anything imports Triton (in a
test process Triton may already be imported in compiled mode, which leaves tl.max and
friends as JITFunctions the interpreter cannot call). INPUT_EXPR is evaluated with
`torch` and the kernel's folder's `reference` module (if any) in scope.
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main():
    import torch

    from kgit_harness import targets

    path = Path(sys.argv[1])
    scope = {"torch": torch}
    if (path.parent / "reference.py").exists():
        scope["reference"] = _load(path.parent / "reference.py", "_probe_reference")
    kernel = _load(path, "_probe_kernel")
    data = eval(sys.argv[2], scope)  # noqa: S307 - the test's own expression
    kwargs = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    host_error = None
    with targets.capture() as launches:
        try:
            kernel.custom_kernel(data, **kwargs)
        except Exception as e:  # noqa: BLE001 - reported: a kernel may fail here and build elsewhere
            host_error = f"{type(e).__name__}: {e}"
    print(json.dumps({"host_error": host_error, "targets": targets.build_facts(launches, ["gfx942", "sm_90a"])}))


if __name__ == "__main__":
    main()
