"""Where a shape's GPU time goes: the device kernels one call of the candidate ran.

After every benchmark shape has been timed (and the judge holds all its figures), the
runner calls the candidate once more per shape under torch.profiler, CUDA activity only,
all shapes in one profiler session (`Session`: torch tears CUPTI down after a session,
pytorch/pytorch#146604, so each start pays its set-up again), and reports the device
kernels that ran: a short name, how many launches, and their total
device microseconds. The judge validates the rows (`clean`) and keeps them in the shape's
entry of the result as candidate-reported: the runner could forge them, so they explain a
time (the GEMM against torch's input copies) and never rank anything. Nothing here runs in
the CPU interpreter, where there are no device kernels to split.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys

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
    found_template = re.search(r"at::native::(?:\(anonymous namespace\)::)?(\w+)", name)
    template = found_template.group(1) if found_template else ""
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


def device_events(torch, prof) -> list[tuple[str, float, float]]:
    """The device-side events (kernels, memcpy, memset) of a finished torch.profiler run:
    (name, start us, device us), in the order they started."""
    device_types = {getattr(torch.autograd.DeviceType, n) for n in ("CUDA", "HIP")
                    if hasattr(torch.autograd.DeviceType, n)}
    found = [(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in prof.events()
             if e.device_type in device_types]
    return sorted(found, key=lambda e: e[1])


# The marker between two calls of a session: torch's one-thread spin kernel
# (`torch.cuda._sleep`, CUDA and ROCm alike), which the harness launches itself.
MARKER_KERNEL = "spin_kernel"
AMBIGUOUS = ("the calls could not be told apart: the candidate launches torch's spin kernel "
             "(torch.cuda._sleep) itself")
# Markers launched as a session starts, before the first call's: torch's profiler can drop
# the device events at the start of a session (pytorch/pytorch#192021), and a lost marker
# would leave the calls unaligned. The calls are read from the last markers.
LEAD_MARKERS = 3
NO_KERNELS = "torch.profiler recorded no device kernels"


def segments(events, calls: int, marked: bool) -> list[tuple[list[dict] | None, str | None]]:
    """Each call's (rows, why) from one session's device events in start order.

    `marked`: LEAD_MARKERS markers ran as the session started, then one before each call
    and one after the last, with a device synchronize on either side, so every call's
    kernels lie between two of the last calls + 1 markers. Fewer markers than that, or
    more than all of them, means events were lost or the candidate ran the marker kernel.
    """
    if not marked:
        if calls != 1:
            raise ValueError("an unmarked session holds exactly one call")
        rows = summarize((name, us) for name, _, us in events)
        one: tuple[list[dict] | None, str | None] = (rows, None) if rows else (None, NO_KERNELS)
        return [one]
    at = [i for i, (name, _, _) in enumerate(events) if MARKER_KERNEL in name]
    if not calls + 1 <= len(at) <= calls + 1 + LEAD_MARKERS:
        return [(None, AMBIGUOUS)] * calls
    at = at[len(at) - calls - 1:]
    out: list[tuple[list[dict] | None, str | None]] = []
    for a, b in zip(at, at[1:]):
        rows = summarize((name, us) for name, _, us in events[a + 1:b])
        out.append((rows, None) if rows else (None, NO_KERNELS))
    return out


def warm_up(torch):
    """One profiler session around a host op: the profiler's libraries loaded and initialised
    before any candidate exists. Failing, it leaves the split to find that later.

    CPU activity only: a session with CUDA activity leaves CUPTI's callbacks on every later
    launch, the timed ones included (H200, two runs: a vector_add of 1 to 16M elements read
    2-5 us more by events and 5-7 us more on the host after it). The CPU session loaded what
    cost (3.8 s; the split's CUDA session after it took 0.00 s, 4.3 s without it), and in
    the one run of benchmarks/profiler_warmup.py's way of doing it the vector_add read 24.5 us
    by events and 32.3 on the host after it, against 27.6 and 35.7 after the CUDA session.
    Most of those seconds were torch importing inductor for the profiler's start, which
    `inductor_left_alone` now spares both sessions."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with inductor_left_alone(torch), profile(activities=[ProfilerActivity.CPU]):
            # A host op: the warm-up runs before the runner has a device context (runner.main).
            torch.zeros(1).add_(1)
    except Exception:  # noqa: BLE001 - a profiler that will not start is the split's to report
        pass


@contextlib.contextmanager
def inductor_left_alone(torch):
    """While a profiler starts: `hasattr(torch, "_inductor")` is false where nothing imported it.

    torch.profiler's start asks that question to learn whether inductor's CUDA graphs are
    on, and torch answers it by importing inductor, dynamo and sympy: 3.5-5.2 s of a CPU
    session's 5.2 s on the development machine, and what made a warm pair's "profiler
    loaded" 5.4-6.2 s on the H200 host. Without inductor imported, nothing uses its CUDA
    graphs, and the profiler's own default (none) is the answer; with it imported, torch
    answers as before."""
    lazy = torch.__dict__.get("__getattr__")
    if "torch._inductor" in sys.modules or lazy is None:
        yield
        return

    def answer(name):
        if name == "_inductor":
            raise AttributeError(name)
        return lazy(name)

    torch.__getattr__ = answer
    try:
        yield
    finally:
        torch.__getattr__ = lazy


class Session:
    """Several calls under one torch.profiler session; each call's device kernels (`stop`).

    `marker()` launches the marker kernel (see MARKER_KERNEL); without one, a session
    holds one call. The profiler starts and stops outside each `call` (the runner's
    guarded region), so its own set-up is never taken for the candidate's. A failure of
    a call propagates; that call's split is then reported as failed, the others are kept.
    `activities` other than CUDA's only for tests on a machine without a GPU.
    """

    def __init__(self, torch, synchronize, activities=None, marker=None):
        self.torch, self.synchronize, self.activities, self.marker = torch, synchronize, activities, marker
        self.prof, self.why, self.failed = None, None, []

    def start(self) -> Session:
        from torch.profiler import ProfilerActivity, profile

        self.synchronize()
        try:
            prof = profile(activities=self.activities or [ProfilerActivity.CUDA])
            with inductor_left_alone(self.torch):
                prof.__enter__()
        except Exception as e:  # noqa: BLE001 - no profiler here is a missing figure, not a failed kernel
            self.why = f"torch.profiler did not start: {type(e).__name__}: {e}"[:300]
        else:
            self.prof = prof
            if self.marker is not None:
                for _ in range(LEAD_MARKERS):
                    self.marker()
                self.synchronize()
        return self

    def call(self, fn):
        """One call of the session, unless the profiler did not start (then nothing runs)."""
        if self.marker is None and self.failed:
            raise ValueError("an unmarked session holds exactly one call")
        self.failed.append(True)
        if self.prof is None:
            return
        if self.marker is not None:
            self.marker()
        self.synchronize()
        fn()
        self.synchronize()
        self.failed[-1] = False

    def stop(self) -> list[tuple[list[dict] | None, str | None]]:
        calls = len(self.failed)
        if self.prof is None:
            return [(None, self.why)] * calls
        lost = None
        try:
            if self.marker is not None:
                self.marker()
                self.synchronize()
        except Exception as e:  # noqa: BLE001 - a call that failed can leave the device failing
            lost = f"the device failed after the profiled calls: {type(e).__name__}: {e}"[:300]
        try:
            self.prof.__exit__(None, None, None)
        except Exception as e:  # noqa: BLE001
            lost = lost or f"torch.profiler did not stop: {type(e).__name__}: {e}"[:300]
        found: list[tuple[list[dict] | None, str | None]]
        if lost:
            found = [(None, lost)] * calls
        else:
            found = segments(device_events(self.torch, self.prof), calls, self.marker is not None) if calls else []
        return [(None, "the call failed") if failed else split for failed, split in zip(self.failed, found)]


def profile_call(torch, call, synchronize, activities=None) -> tuple[list[dict] | None, str | None]:
    """Run `call()` once under torch.profiler (CUDA activity); (rows, None), or (None, why not).

    A failure of `call` itself propagates, with the profiler stopped.
    """
    session = Session(torch, synchronize, activities).start()
    try:
        session.call(call)
    except BaseException:
        session.stop()
        raise
    return session.stop()[0]


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
