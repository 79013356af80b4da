"""Where a shape's GPU time goes: the device kernels one call of the candidate ran.

After every benchmark shape has been timed (and the judge holds all its figures), the
runner calls the candidate once more per shape under torch.profiler, CUDA activity only,
and reports the device kernels that ran: a short name, how many launches, and their total
device microseconds. The judge validates the rows (`clean`) and keeps them in the shape's
entry of the result as candidate-reported: the runner could forge them, so they explain a
time (the GEMM against torch's input copies) and never rank anything. Nothing here runs in
the CPU interpreter, where there are no device kernels to split.
"""

from __future__ import annotations

import math
import re

SOURCE = "candidate-reported"  # the label every split carries: the runner made it
MAX_ROWS = 12  # kernels kept per shape; the rest are summed into one OTHER row
NAME_CHARS = 80
OTHER = "(other kernels)"
MAX_COUNT = 1_000_000
MAX_US = 1e9

# Functor and template names that say how ATen ran an op, not which op it was.
_GENERIC_FUNCTORS = {"binary", "unary", "aunary", "bunary", "compare", "func_wrapper", "reduce"}
# Template names that wrap the real kernel, whose first template argument names it (cutlass::Kernel2<...>).
_WRAPPER = re.compile(r"(device_)?kernel\d*", re.I)


def short_name(raw: str) -> str:
    """A kernel name a reader can use: Triton's as they are, ATen's as `aten copy (elementwise)`."""
    name = " ".join(str(raw).split())
    if name.startswith("Memcpy"):
        words = name.split()
        return "memcpy " + words[1] if len(words) > 1 else "memcpy"
    if name.startswith("Memset"):
        return "memset"
    if "at::native::" in name:
        return _aten(name)
    if not re.search(r"[\s<>(),:]", name):
        return name[:NAME_CHARS]  # a Triton kernel, a cuBLAS one: already its own short name
    body = name[5:] if name.startswith("void ") else name
    head = re.split(r"[<(]", body, maxsplit=1)[0].strip()
    last = head.split("::")[-1]
    if _WRAPPER.fullmatch(last) and "<" in body:
        inner = re.match(r"\s*([\w:]+)", body.partition("<")[2])
        if inner:
            return inner.group(1).split("::")[-1][:NAME_CHARS]
    return (head or name)[:NAME_CHARS]


def _aten(name: str) -> str:
    template = re.search(r"at::native::(?:\(anonymous namespace\)::)?(\w+)", name)
    template = template.group(1) if template else ""
    kind = "elementwise" if "elementwise" in template else "reduce" if "reduce" in template else None
    op = None
    found = re.search(r"([A-Za-z0-9]\w*?)_kernel_cuda", name)
    if found:
        op = found.group(1)
    else:
        for candidate in re.findall(r"(?:CUDAFunctor_|Functor_)(\w+?)\b|(\w+?)_?[Ff]unctor\b", name):
            word = (candidate[0] or candidate[1]).split("::")[-1].lower()
            if word and word not in _GENERIC_FUNCTORS:
                op = word
                break
    if op:
        op = op.lower().removeprefix("direct_")
        return f"aten {op} ({kind})" if kind else f"aten {op}"
    if kind:
        return f"aten {kind}"
    if "CatArray" in template:
        return "aten cat"
    return f"aten {template.removesuffix('_kernel') or 'kernel'}"[:NAME_CHARS]


def summarize(events) -> list[dict]:
    """(raw name, device us) pairs -> rows {name, count, us} by short name, longest first.

    At most MAX_ROWS rows: the shortest kernels beyond that are summed into one OTHER row.
    """
    by_name: dict[str, list] = {}
    for raw, us in events:
        slot = by_name.setdefault(short_name(raw), [0, 0.0])
        slot[0] += 1
        slot[1] += max(float(us), 0.0)
    rows = [{"name": n, "count": c, "us": round(us, 3)} for n, (c, us) in by_name.items()]
    rows.sort(key=lambda r: (-r["us"], r["name"]))
    if len(rows) > MAX_ROWS:
        rest = rows[MAX_ROWS - 1:]
        rows = rows[:MAX_ROWS - 1] + [{"name": OTHER, "count": sum(r["count"] for r in rest),
                                       "us": round(sum(r["us"] for r in rest), 3)}]
    return rows


def device_events(torch, prof) -> list[tuple[str, float]]:
    """The device-side events (kernels, memcpy, memset) of a finished torch.profiler run."""
    device_types = {getattr(torch.autograd.DeviceType, n) for n in ("CUDA", "HIP")
                    if hasattr(torch.autograd.DeviceType, n)}
    return [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type in device_types]


def profile_call(torch, call, synchronize, activities=None) -> tuple[list[dict] | None, str | None]:
    """Run `call()` once under torch.profiler (CUDA activity); (rows, None), or (None, why not).

    The profiler starts and stops outside `call` (the runner's guarded region), so its own
    set-up is never taken for the candidate's. A failure of `call` itself propagates.
    `activities` other than CUDA's only for tests on a machine without a GPU.
    """
    from torch.profiler import ProfilerActivity, profile

    synchronize()
    try:
        prof = profile(activities=activities or [ProfilerActivity.CUDA])
        prof.__enter__()
    except Exception as e:  # noqa: BLE001 - no profiler here is a missing figure, not a failed kernel
        return None, f"torch.profiler did not start: {type(e).__name__}: {e}"[:300]
    try:
        call()
        synchronize()
    finally:
        try:
            prof.__exit__(None, None, None)
            stopped = None
        except Exception as e:  # noqa: BLE001
            stopped = f"torch.profiler did not stop: {type(e).__name__}: {e}"[:300]
    if stopped:
        return None, stopped
    rows = summarize(device_events(torch, prof))
    return (rows, None) if rows else (None, "torch.profiler recorded no device kernels")


def line(rows, top: int = 3) -> str:
    """A shape's split in one line, `_gemm 479.6 us + aten copy (elementwise) x2 440.0 us + other
    13.0 us`: the `top` longest kernels, the rest summed. Rows are [name, count, us] (as notes
    keep them) or the result's {name, count, us}."""
    rows = [(r["name"], r["count"], r["us"]) if isinstance(r, dict) else tuple(r) for r in rows]
    rows.sort(key=lambda r: -r[2])
    named = [r for r in rows if r[0] != OTHER][:top]
    rest = [r for r in rows if r not in named]
    parts = [f"{name}{f' x{count}' if count > 1 else ''} {us:.1f} us" for name, count, us in named]
    if rest:
        parts.append(f"other {sum(r[2] for r in rest):.1f} us")
    return " + ".join(parts)


def clean(rows) -> list[dict]:
    """The runner's rows as the judge keeps them; ValueError when they are malformed.

    Names are cut to NAME_CHARS printable characters; counts and times must be plain,
    finite, non-negative numbers; at most MAX_ROWS rows.
    """
    if not isinstance(rows, list) or not rows:
        raise ValueError("expected a non-empty list of kernel rows")
    if len(rows) > MAX_ROWS:
        raise ValueError(f"{len(rows)} kernel rows, more than {MAX_ROWS}")
    out = []
    for row in rows:
        if not isinstance(row, dict) or set(row) != {"name", "count", "us"}:
            raise ValueError("each kernel row needs exactly name, count and us")
        name, count, us = row["name"], row["count"], row["us"]
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a kernel row's name must be a non-empty string")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise ValueError(f"a kernel row's count must be an integer from 1 to {MAX_COUNT}, not {count!r}")
        if isinstance(us, bool) or not isinstance(us, (int, float)) or not math.isfinite(us) or not 0 <= us <= MAX_US:
            raise ValueError(f"a kernel row's us must be a finite number from 0 to {MAX_US:g}, not {us!r}")
        printable = "".join(ch if ch.isprintable() else "?" for ch in " ".join(name.split()))
        out.append({"name": printable[:NAME_CHARS], "count": count, "us": float(us)})
    return out


def entry(rows: list[dict] | None, why: str | None = None) -> dict:
    """What the judge puts under a shape's `kernels`: the rows, labelled, or why there are none."""
    out = {"source": SOURCE, "calls": 1, "rows": rows or []}
    if why:
        out["why"] = why[:300]
    return out


def check_entry(value) -> None:
    """A shape's `kernels` as the result document must hold it; ValueError otherwise."""
    if not isinstance(value, dict) or value.get("source") != SOURCE:
        raise ValueError(f"a shape's 'kernels' must be an object with source {SOURCE!r}")
    if value.get("rows"):
        clean(value["rows"])
    elif not isinstance(value.get("why"), str):
        raise ValueError("a shape's 'kernels' without rows must say why in 'why'")
