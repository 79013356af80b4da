"""Tensors in memory the judge and the runner share, described without pickle.

The judge allocates one arena per benchmark or test shape: on the CPU a memfd mapped in
both processes (the descriptor travels with SCM_RIGHTS), on a GPU one device buffer
exported through CUDA/HIP IPC (`UntypedStorage._share_cuda_()`, rebuilt in the runner
with `UntypedStorage._new_shared_cuda`). Inside it, each slot holds one input of the
problem, laid out exactly as `generate_input` made it (shape, stride, dtype), and, for
problems that return a new tensor, an output buffer shaped like the expected output.
A layout is plain JSON: offsets, shapes, strides and dtype names.
"""

from __future__ import annotations

import base64
import mmap
import os

ALIGN = 256


def _dtype(torch, name: str):
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return value


def _span_bytes(t) -> int:
    if t.numel() == 0:
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))) * t.element_size()


class Planner:
    """Assigns aligned offsets in an arena to the tensors of a data tree."""

    def __init__(self):
        self.size = 0

    def tensor(self, t) -> dict:
        offset = self.size
        self.size += -(-max(_span_bytes(t), 1) // ALIGN) * ALIGN
        return {"tensor": {"offset": offset, "shape": list(t.shape), "stride": list(t.stride()),
                           "dtype": str(t.dtype).removeprefix("torch.")}}

    def tree(self, data) -> dict:
        import torch

        if isinstance(data, torch.Tensor):
            return self.tensor(data)
        if isinstance(data, tuple):
            return {"tuple": [self.tree(d) for d in data]}
        if isinstance(data, list):
            return {"list": [self.tree(d) for d in data]}
        if isinstance(data, dict):
            return {"dict": [[str(k), self.tree(v)] for k, v in data.items()]}
        if data is None or isinstance(data, (bool, int, float, str)):
            return {"value": data}
        fields = plain_fields(data)
        if fields is not None:
            # A configuration object beside the tensors (GPU MODE's mla-decode gives one): its
            # fields travel, and the runner hands the kernel an object with the same attributes.
            return {"object": {"name": type(data).__name__, "fields": [[k, self.tree(v)] for k, v in fields.items()]}}
        raise TypeError(f"generate_input returned a {type(data).__name__}; the harness shares tensors, tuples, "
                        "lists, dicts, plain numbers or strings, and objects whose attributes are those")


def view(torch, arena, node: dict):
    """The data tree a layout node describes, as views into `arena` (a flat uint8 tensor)."""
    if "tensor" in node:
        spec = node["tensor"]
        dtype = _dtype(torch, spec["dtype"])
        shape, stride, offset = list(spec["shape"]), list(spec["stride"]), int(spec["offset"])
        size = dtype.itemsize
        count = 0 if 0 in shape else 1 + sum((s - 1) * st for s, st in zip(shape, stride))
        flat = arena[offset:offset + max(count, 1) * size].view(dtype)
        return flat.as_strided(shape, stride)
    if "tuple" in node:
        return tuple(view(torch, arena, n) for n in node["tuple"])
    if "list" in node:
        return [view(torch, arena, n) for n in node["list"]]
    if "dict" in node:
        return {k: view(torch, arena, n) for k, n in node["dict"]}
    if "object" in node:
        spec = node["object"]
        return _named(str(spec["name"]))(**{str(k): view(torch, arena, n) for k, n in spec["fields"]})
    return node["value"]


def widens(torch, narrow, wide) -> bool:
    """Whether every value of dtype `narrow` is exactly a value of dtype `wide`."""
    if narrow.is_floating_point and wide.is_floating_point:
        a, b = torch.finfo(narrow), torch.finfo(wide)
        return b.bits > a.bits and b.eps <= a.eps and b.max >= a.max
    if not narrow.is_floating_point and not wide.is_floating_point and narrow != torch.bool and wide != torch.bool:
        a, b = torch.iinfo(narrow), torch.iinfo(wide)
        return b.min <= a.min and b.max >= a.max
    return False


def plain_fields(data) -> dict | None:
    """The attributes of an instance of an ordinary class (a dataclass, a config object), or None."""
    import types

    if isinstance(data, (type, types.ModuleType, types.FunctionType, types.MethodType)) or not hasattr(data, "__dict__"):
        return None
    fields = vars(data)
    return fields if all(isinstance(k, str) for k in fields) else None


_NAMED: dict = {}


def _named(name: str):
    """A namespace class called `name`: the runner's stand-in for the judge's configuration object."""
    import types

    if name not in _NAMED:
        _NAMED[name] = type(name if name.isidentifier() else "Config", (types.SimpleNamespace,), {})
    return _NAMED[name]


def tensors(data) -> list:
    import torch

    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, (tuple, list)):
        return [t for d in data for t in tensors(d)]
    if isinstance(data, dict):
        return [t for d in data.values() for t in tensors(d)]
    fields = plain_fields(data)
    return tensors(list(fields.values())) if fields else []


def same_layout(a, b) -> bool:
    """Whether two data trees have the same structure, shapes, strides and dtypes."""
    import torch

    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.stride() == b.stride()
                and a.dtype == b.dtype)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same_layout(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same_layout(a[k], b[k]) for k in a)
    fields = plain_fields(a)
    if fields is not None:
        return type(a) is type(b) and same_layout(fields, plain_fields(b) or {})
    return a == b


# ---- the arena itself ---------------------------------------------------------------

class HostArena:
    """A memfd mapped here; its descriptor is what the runner maps."""

    def __init__(self, torch, nbytes: int):
        self.nbytes = max(int(nbytes), ALIGN)
        self.fd = os.memfd_create("kgit-arena", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.nbytes)
        self.map = mmap.mmap(self.fd, self.nbytes)
        self.tensor = torch.frombuffer(self.map, dtype=torch.uint8)

    def describe(self) -> tuple[dict, list[int]]:
        return {"kind": "host", "nbytes": self.nbytes}, [self.fd]

    def close(self):
        self.tensor = None
        try:
            self.map.close()
        except BufferError:
            pass  # a view is still alive somewhere; the mapping goes with the process
        os.close(self.fd)


class DeviceArena:
    """One device buffer, exported through CUDA/HIP IPC."""

    def __init__(self, torch, nbytes: int):
        self.nbytes = max(int(nbytes), ALIGN)
        self.tensor = torch.zeros(self.nbytes, dtype=torch.uint8, device="cuda")

    def describe(self) -> tuple[dict, list[int]]:
        handle = self.tensor.untyped_storage()._share_cuda_()
        return {"kind": "cuda", "nbytes": self.nbytes, "handle": [_b64(v) for v in handle]}, []

    def close(self):
        self.tensor = None


def new_arena(torch, nbytes: int, on_gpu: bool):
    return DeviceArena(torch, nbytes) if on_gpu else HostArena(torch, nbytes)


def attach(torch, desc: dict, fds: list[int]):
    """The runner's side: the arena as a flat uint8 tensor, and what keeps it alive."""
    if desc.get("kind") == "host":
        (fd,) = fds
        mapping = mmap.mmap(fd, int(desc["nbytes"]))
        os.close(fd)
        return torch.frombuffer(mapping, dtype=torch.uint8), mapping
    if desc.get("kind") == "cuda":
        args = [_unb64(v) for v in desc["handle"]]
        torch.cuda.init()  # the storage constructor needs an initialised context
        storage = torch.UntypedStorage._new_shared_cuda(*args)
        arena = torch.empty(0, dtype=torch.uint8, device=f"cuda:{args[0]}").set_(storage)
        return arena[: int(desc["nbytes"])], storage
    raise ValueError(f"unknown arena kind {desc.get('kind')!r}")


def _b64(value):
    return {"b64": base64.b64encode(value).decode()} if isinstance(value, bytes) else value


def _unb64(value):
    return base64.b64decode(value["b64"]) if isinstance(value, dict) else value
