"""Inputs and correctness: fresh seeded inputs, clones, poisoned outputs, comparison."""

from __future__ import annotations

import hashlib
import secrets

from kgit_harness import problem, shared

# Keys the global RNG's seed for each generated input (see make_input); drawn per
# process and never shown to the candidate.
_RNG_KEY = secrets.token_bytes(16)


def mix_seed(seed: int, secret: int, salt: int = 0) -> int:
    """A seed the candidate cannot predict from the published one."""
    return (int(seed) * 1_000_003 + secret * 7919 + salt * 104_729) % (2**31 - 1)


class InputFailed(Exception):
    """The problem's own generate_input raised for a shape: the problem's failure, not a kernel's.

    The needs check runs generate_input on the first test shape only; a later shape can
    still fail (linalg/qr_py at one upstream commit lists a test case `mixed` that its
    reference's generate_input does not know). The cause is chained.
    """

    def __init__(self, shape: dict):
        super().__init__(f"generate_input failed for the shape {problem.shape_key(shape)}")
        self.shape = shape


def make_input(reference, shape: dict, seed: int | None = None):
    args = dict(shape)
    if seed is not None:
        args["seed"] = seed
    seed_global_rng(args.get("seed"))
    try:
        return reference.generate_input(**args)
    except Exception as e:  # noqa: BLE001 - whatever it is, it is the problem's; the judge words it
        raise InputFailed(shape) from e


def seed_global_rng(seed) -> None:
    """Seed torch's global RNG from an input's seed, so generating it twice gives equal inputs.

    Some references draw part of their inputs from the global RNG (GPU MODE's trimul
    makes its weights with plain torch.randn); unseeded, the re-check after timing
    regenerates different weights than the kernel saw and calls a correct kernel wrong.
    The global seed is a keyed hash of the input's seed: a kernel that reads it back
    (torch.initial_seed) learns nothing about the secret the input seeds derive from.
    """
    import torch

    digest = hashlib.blake2b(str(seed).encode(), key=_RNG_KEY, digest_size=7).digest()
    value = int.from_bytes(digest, "little")
    # The generators torch.manual_seed seeds that a reference here can draw from (ROCm's
    # are torch.cuda's). torch.manual_seed itself also queues a seeding of each device kind
    # not initialised (XPU, MTIA) with a formatted stack trace: about 0.5 ms a call on the
    # H200 host, over the thousand inputs an evaluation makes.
    torch.default_generator.manual_seed(value)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(value)


def clone(data):
    import torch

    if isinstance(data, torch.Tensor):
        return data.clone()
    if isinstance(data, tuple):
        return tuple(clone(d) for d in data)
    if isinstance(data, list):
        return [clone(d) for d in data]
    if isinstance(data, dict):
        return {k: clone(v) for k, v in data.items()}
    fields = shared.plain_fields(data)
    if fields is not None and shared.tensors(data):
        import copy

        twin = copy.copy(data)
        vars(twin).update({k: clone(v) for k, v in fields.items()})
        return twin
    return data


def poison(data, index):
    """Fill the preallocated output with garbage, so leftovers can never pass a check."""
    import torch

    for i in problem.output_indices(index):
        out = data[i]
        if out.is_floating_point():
            out.fill_(float("nan"))
        else:
            out.fill_(torch.iinfo(out.dtype).max if out.dtype != torch.bool else True)


def inputs_unchanged(pristine, data, output_index) -> tuple[bool, str]:
    """Whether the kernel left its inputs (all but the preallocated output) bit for bit as given."""
    import torch

    def flat(d):
        if isinstance(d, dict):
            return list(d.values())
        return list(d) if isinstance(d, (tuple, list)) else [d]

    for i, (before, after) in enumerate(zip(flat(pristine), flat(data))):
        if i in problem.output_indices(output_index) or not isinstance(before, torch.Tensor):
            continue
        same = isinstance(after, torch.Tensor) and same_values(torch, before, after)
        if not same:
            where = f"input {i}" if isinstance(pristine, (tuple, list)) else "the input"
            return False, f"the kernel modified {where}; inputs are read-only"
    return True, ""


def same_values(torch, a, b) -> bool:
    """Whether two tensors of one shape and dtype hold the same values, NaN where the other has
    NaN (an infinity only where the other has the same one)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    same = a == b
    if a.is_floating_point() or a.is_complex():
        same |= a.isnan() & b.isnan()
    return bool(same.all())


def sync(torch):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def same_output(torch, a, b) -> bool:
    """Whether two outputs (a tensor, or tuples, lists and dicts of them) are the same bit for bit
    (same_values); any other leaf is never the same, so its output is checked in full."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and same_values(torch, a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same_output(torch, x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_output(torch, a[k], b[k]) for k in a)
    return False


def compare(task, reference, pristine, out) -> tuple[bool, str]:
    """Compare a candidate output with the reference computed on an untouched clone.

    The expected output is computed only now, after the candidate ran, so there is
    nothing for it to find in memory while it runs.
    """

    custom = getattr(reference, "check_implementation", None)
    if custom is not None:
        return _custom_verdict(custom(pristine, out))
    expected = reference.ref_kernel(clone(pristine))
    if task.output is not None:
        out = unit_dims_as(out, expected)
    ok, message = allclose(out, expected, task.rtol, task.atol)
    if ok and getattr(task, "relative", None):
        ok, message = relative_close(out, expected, task.relative)
    return ok, message


def unit_dims_as(out, expected):
    """A filled output buffer viewed in the reference's shape where the two differ only by
    dimensions of size 1 (a (1,) buffer for a 0-d sum); anything else unchanged."""
    import torch

    if isinstance(out, (tuple, list)) and isinstance(expected, (tuple, list)) and len(out) == len(expected):
        return type(out)(unit_dims_as(o, e) for o, e in zip(out, expected))
    if (isinstance(out, torch.Tensor) and isinstance(expected, torch.Tensor) and out.shape != expected.shape
            and problem.same_but_unit_dims(out.shape, expected.shape)):
        return out.reshape(expected.shape)
    return out


def relative_close(out, expected, limit: float) -> tuple[bool, str]:
    """The error measured against the output's own scale: RMS(out - ref) <= limit * RMS(ref).

    An elementwise atol passes anything near zero where the reference's outputs are
    small themselves (KernelBench softmaxes of ~1e-4 against atol 1e-2, so an all-zeros
    kernel passes); relative to the output's RMS, zeros are off by 100%. Run after
    allclose, which has already checked shapes, dtypes and finiteness. A reference that
    is all zeros has no scale; atol alone decides there.
    """
    if isinstance(expected, (tuple, list)):
        for i, (o, e) in enumerate(zip(out, expected)):
            ok, message = relative_close(o, e, limit)
            if not ok:
                return False, f"output {i}: {message}"
        return True, ""
    o = out.detach().double()
    e = expected.detach().double().to(o.device)
    scale = float(e.square().mean().sqrt()) if e.numel() else 0.0
    if scale == 0.0:
        return True, ""
    error = float((o - e).square().mean().sqrt())
    if error > limit * scale:
        return False, (f"the error's RMS is {error / scale:.3g} of the reference output's RMS ({scale:.3g}), "
                       f"over the task's relative limit {limit:g}: the output does not follow the reference's "
                       "values, however small they are")
    return True, ""


def _custom_verdict(answer) -> tuple[bool, str]:
    if isinstance(answer, tuple):
        ok, message = answer[0], (answer[1] if len(answer) > 1 else "")
        return bool(ok), str(message or "")
    if isinstance(answer, str):
        return (not answer), answer
    return bool(answer), ""


def allclose(out, expected, rtol: float, atol: float) -> tuple[bool, str]:
    import torch

    if isinstance(expected, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(expected):
            return False, f"expected a sequence of {len(expected)} outputs, got {type(out).__name__}"
        for i, (o, e) in enumerate(zip(out, expected)):
            ok, message = allclose(o, e, rtol, atol)
            if not ok:
                return False, f"output {i}: {message}"
        return True, ""
    if not isinstance(out, torch.Tensor):
        return False, f"expected a tensor, got {type(out).__name__}"
    if type(out) is not torch.Tensor:
        # A subclass can compute its values when they are read, after timing ended.
        return False, f"returned a {type(out).__name__}, a torch.Tensor subclass; return a plain tensor"
    if out.shape != expected.shape:
        return False, f"shape {tuple(out.shape)} != expected {tuple(expected.shape)}"
    if out.dtype != expected.dtype:
        return False, f"dtype {out.dtype} != expected {expected.dtype}"
    o = out.detach().double()
    e = expected.detach().double().to(o.device)
    finite = torch.isfinite(o)
    diff = (o - e).abs()
    limit = atol + rtol * e.abs()
    # One device sync when all is well (every timed output is checked); the details only
    # on failure. Where the reference itself is NaN, diff is NaN and no bound is exceeded.
    if bool((finite & ~(diff > limit)).all()):
        return True, ""
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return False, f"{bad} of {o.numel()} outputs are NaN or Inf"
    over = diff > limit
    if bool(over.any()):
        n = int(over.sum())
        idx = int(torch.argmax((diff - limit).flatten()))
        where = tuple(int(i) for i in _unravel(idx, o.shape))
        return False, (f"{n} of {o.numel()} elements differ beyond rtol={rtol:g}, atol={atol:g}; "
                       f"worst at {where}: got {float(o.flatten()[idx]):.6g}, expected {float(e.flatten()[idx]):.6g}")
    return True, ""


def _unravel(index, shape):
    coords = []
    for dim in reversed(shape):
        coords.append(index % dim if dim else 0)
        index = index // dim if dim else 0
    return reversed(coords)
