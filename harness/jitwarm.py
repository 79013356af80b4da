"""Triton's one-time costs, paid by a runner started ahead of need rather than by its candidate.

Each runner has a Triton cache of its own (TRITON_CACHE_DIR in its scratch: no candidate
reads what another wrote), so a candidate's first launch paid, besides its own kernel's
compilation, for Triton's driver helper (a C module built with the host's compiler), the
hash of Triton's sources that keys every cache entry, and the compiler's first run (MLIR
and LLVM set up, ptxas read from disk). On the H200 host, in a fresh cache, the fp8
baseline's first check call took 1.54 s and its next specialization 0.62 s; the driver
helper alone was 0.50 s. A runner started ahead of need pays these before its candidate
exists: `before_device` (host work only, so it goes on before the pair's gate) and
`after_device` (a compilation for the device's target, which needs the device context to
name the target; nothing is loaded onto the GPU or launched).
"""

from __future__ import annotations

# Triton is imported inside the functions, never with this module: the runner imports it
# before it decides whether kernels run in Triton's interpreter (TRITON_INTERPRET), which
# must be set before triton is first imported. The kernel is in warmkernel.py for the same reason.


def before_device() -> None:
    """The driver helper built and loaded (no device context needed). Failing, the
    candidate's first launch meets the failure itself, where it is reported."""
    try:
        import triton

        triton.runtime.driver.active.utils  # noqa: B018 - the property builds and loads the helper
    except Exception:  # noqa: BLE001 - the candidate's launch reports it, as its own failure
        pass


def after_device(torch) -> None:
    """One small kernel compiled for this device (not loaded, not launched): the compiler's
    first run and the source hash out of the way."""
    try:
        from kgit_harness.warmkernel import scale

        scale.warmup(torch.float32, torch.float32, 1024, 2.0, BLOCK=128, grid=(1,))
    except Exception:  # noqa: BLE001 - as above
        pass
