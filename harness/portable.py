"""Letting problems written for one machine run under the harness on another.

- `on_cpu()`: a GPU problem's own code (GPU MODE references hard-code `device="cuda"`,
  `torch.Generator(device="cuda")`, `.cuda()`) run on a host without a GPU, its CUDA
  devices mapped to the CPU. `torch.set_default_device` cannot do this: it only fills
  in a device where none is given, and these name one.
- `input_bytes()`: the bytes a shape's inputs take, from a dry run of `generate_input`
  on the `meta` device (shapes and dtypes, no storage), so that a shape too large for
  this machine is refused by name before anything is allocated.
- `shaped_as_reference()`: a filled output buffer given to a problem's own check in the shape
  of its reference's result, where the two differ only by dimensions of size 1.
- `quiet_torch_compile()`: torch.compile's own helper threads (tqdm's monitor, inductor's
  compile workers) switched off before the candidate is imported, so the thread guard
  can stay strict for the candidate's threads.
"""

from __future__ import annotations

import contextlib
import os

from kgit_harness import problem


def quiet_torch_compile() -> None:
    """No helper threads from torch.compile: one compile thread, no progress-bar monitor.

    Inductor reads the variable when its config is first imported, which is after this
    (the harness imports torch but not inductor). tqdm's monitor is a class attribute,
    read when the first bar opens.
    """
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    try:
        import tqdm
    except ImportError:  # no tqdm, no progress bars and no monitor thread
        return
    tqdm.tqdm.monitor_interval = 0


def _is_cuda(device) -> bool:
    import torch

    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, str) and (device == "cuda" or device.startswith("cuda:"))


@contextlib.contextmanager
def mapped_devices(target: str):
    """Inside the block, every CUDA device named to a torch function means `target`."""
    import torch
    from torch.overrides import TorchFunctionMode

    def fix(value):
        # A dry run on meta moves everything there, the CPU included: nothing is allocated.
        if target == "meta" and isinstance(value, (str, torch.device)):
            return target
        return target if _is_cuda(value) else value

    class MapDevices(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = fix(kwargs["device"])
            if target == "meta":
                # Sizing needs no values. A generator, or normal_, sends a meta tensor through
                # torch._refs, whose first call imports torch._dynamo: 2-3 s of the judge's start.
                kwargs.pop("generator", None)
                if func is torch.Tensor.normal_:
                    return args[0]
            if func is torch.Tensor.cuda or (func is torch.Tensor.cpu and target == "meta"):
                return args[0].to(target)
            if func is torch.Tensor.to:  # x.to("cuda"), x.to(torch.device("cuda:0"), dtype)
                args = tuple(fix(a) for a in args)
            return func(*args, **kwargs)

    real_generator = torch.Generator
    real_sync = torch.cuda.synchronize

    class Generator(real_generator):  # type: ignore[valid-type,misc]  # torch's class, as it was before this patch
        # A subclass, not a function: torch's lazily imported modules use the name in
        # annotations (torch.Generator | None) and isinstance checks.
        def __new__(cls, device="cpu"):
            return real_generator.__new__(cls, device="cpu" if _is_cuda(device) or target == "meta" else device)

        def __init__(self, device="cpu"):
            pass

    torch.Generator = Generator
    if target != "cuda":
        # A reference that synchronizes has nothing to wait for on the CPU.
        torch.cuda.synchronize = lambda device=None: None
    try:
        with MapDevices():
            yield
    finally:
        torch.Generator = real_generator
        torch.cuda.synchronize = real_sync


def on_cpu():
    """CUDA devices mapped to the CPU when there is no GPU; nothing changes where there is one."""
    import torch

    if torch.cuda.is_available():
        return contextlib.nullcontext()
    return mapped_devices("cpu")


def shaped_as_reference(ref_kernel, data, output, shapes: dict):
    """`output` in the shape `ref_kernel` returns, where the two differ only by dimensions of size 1.

    A GPU MODE problem's own check compares what it is given with its reference's result,
    shape first; with a (1,) output buffer and a reference returning a 0-d sum
    (pmpp_v2/vectorsum_py) it rejects every kernel that fills the buffer it was given.
    The reference's result shape is learnt once per input layout and kept in `shapes`.
    """
    import torch

    from kgit_harness import checking

    if not isinstance(output, torch.Tensor):
        return output
    key = tuple((tuple(t.shape), str(t.dtype)) for t in _tensors(data))
    if key not in shapes:
        expected = ref_kernel(checking.clone(data))
        shapes[key] = tuple(expected.shape) if isinstance(expected, torch.Tensor) else None
    shape = shapes[key]
    if shape is not None and tuple(output.shape) != shape and problem.same_but_unit_dims(output.shape, shape):
        return output.reshape(shape)
    return output


def input_bytes(generate, shape: dict) -> int | None:
    """Bytes of the tensors `generate(**shape)` returns, sized on the meta device; None if unknown.

    A generator whose work depends on values (`.item()`, data-dependent shapes) cannot
    run on meta tensors; its size is unknown rather than guessed.
    """
    data = meta_input(generate, shape)
    return None if data is None else sum(t.numel() * t.element_size() for t in _tensors(data))


def meta_input(generate, shape: dict):
    """What `generate(**shape)` returns, made on the meta device (shapes, strides and dtypes,
    no storage); None when it cannot be made without values."""
    import torch

    try:
        with mapped_devices("meta"), _meta_default(torch):
            return generate(**shape)
    except Exception:  # noqa: BLE001 - any failure only means no dry run can lay it out
        return None


@contextlib.contextmanager
def _meta_default(torch):
    """Factory calls without a device go to meta too."""
    with torch.device("meta"):
        yield


def _tensors(data, depth: int = 0):
    import torch

    if isinstance(data, torch.Tensor):
        return [data]
    if depth > 4:
        return []
    if isinstance(data, (tuple, list)):
        return [t for d in data for t in _tensors(d, depth + 1)]
    if isinstance(data, dict):
        return [t for d in data.values() for t in _tensors(d, depth + 1)]
    # Objects holding tensors (a dataclass of one rank's data).
    fields = getattr(data, "__dict__", None)
    return [t for d in fields.values() for t in _tensors(d, depth + 1)] if isinstance(fields, dict) else []
