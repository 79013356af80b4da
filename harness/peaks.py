"""Peak FLOP/s and memory bandwidth per device, for the speed-of-light guard.

A timing below max(flops / peak_flops, bytes / peak_bandwidth) cannot be honest: the
work escaped the timing events or was never done. Every figure here is the vendor's
datasheet peak, and where a name covers several variants the fastest one is used, so
the guard can only be too lenient, never reject honest work.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

TB = 1e12

# A timing is rejected only below MARGIN x the speed of light. The margin absorbs what
# lets an honest kernel beat a naive bytes/bandwidth bound: writes that finish in L2
# before the end event (a third of vector_add's traffic), boost clocks above the
# datasheet, and FLOP counts in task.yml that round up. A cheat that skips the work or
# moves it off the timed stream lands at a few percent of the bound, far below this.
MARGIN = 0.5


@dataclass(frozen=True)
class Peak:
    name: str
    bytes_per_s: float | None
    flops_per_s: float | None  # the fastest dense rate of any precision (FP8 or INT8)
    source: str  # "datasheet", "measured" or "override"

    def to_dict(self) -> dict:
        return asdict(self)


# (substring of torch.cuda.get_device_name(), Peak); the first match wins, so specific
# variants come before the family name. Sources: NVIDIA H100/H200/A100 and AMD
# MI300X/MI325X product datasheets (dense, without sparsity).
TABLE = [
    ("H100 PCIe", Peak("NVIDIA H100 PCIe", 2.0 * TB, 1513 * TB, "datasheet")),
    ("H100 NVL", Peak("NVIDIA H100 NVL", 3.9 * TB, 1671 * TB, "datasheet")),
    ("H100", Peak("NVIDIA H100 (SXM, or an unrecognised variant at NVL bandwidth)", 3.9 * TB, 1979 * TB, "datasheet")),
    ("H200", Peak("NVIDIA H200", 4.8 * TB, 1979 * TB, "datasheet")),
    ("A100-SXM4-40GB", Peak("NVIDIA A100 SXM 40GB", 1.555 * TB, 624 * TB, "datasheet")),
    ("A100-PCIE-40GB", Peak("NVIDIA A100 PCIe 40GB", 1.555 * TB, 624 * TB, "datasheet")),
    ("A100", Peak("NVIDIA A100 80GB", 2.039 * TB, 624 * TB, "datasheet")),
    ("MI300X", Peak("AMD Instinct MI300X", 5.3 * TB, 2614.9 * TB, "datasheet")),
    ("MI325X", Peak("AMD Instinct MI325X", 6.0 * TB, 2614.9 * TB, "datasheet")),
]


def lookup(device_name: str) -> Peak | None:
    for needle, peak in TABLE:
        if needle.lower() in (device_name or "").lower():
            return peak
    return None


def from_override(override: dict) -> Peak:
    """A Peak from a spec's `device_peaks` mapping: {bytes_per_s, flops_per_s, name}."""
    unknown = set(override) - {"bytes_per_s", "flops_per_s", "name"}
    if unknown:
        raise ValueError(f"device_peaks: unknown keys {sorted(unknown)}")
    bw, fl = override.get("bytes_per_s"), override.get("flops_per_s")
    return Peak(str(override.get("name", "override")), float(bw) if bw else None,
                float(fl) if fl else None, "override")


def measure(torch, megabytes: int = 1024) -> Peak:
    """Measure device-to-device copy bandwidth on the current GPU.

    Used for devices the table does not know. A copy reaches 80-90% of the datasheet
    peak, and MARGIN covers the rest. No FLOP/s figure: a matmul measurement would
    undershoot an FP8 or sparse peak by more than the margin.
    """
    n = megabytes * 1024 * 1024 // 4
    src = torch.empty(n, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return Peak(torch.cuda.get_device_name(), 2 * src.numel() * 4 / best, None, "measured")


def speed_of_light_us(flops: float | None, nbytes: float | None, peak: Peak) -> float | None:
    """The shortest time the work could take on this device, microseconds; None if unknown."""
    bounds = []
    if flops and peak.flops_per_s:
        bounds.append(flops / peak.flops_per_s)
    if nbytes and peak.bytes_per_s:
        bounds.append(nbytes / peak.bytes_per_s)
    return max(bounds) * 1e6 if bounds else None


def judge(task, shapes: list[dict], peak: Peak) -> str | None:
    """Annotate each timed shape with `sol_us`; return why one is impossibly fast, else None.

    The fastest single repetition is compared, not the mean: one sample below the
    physical limit is already proof that the events missed work.
    """
    verdict = None
    for entry in shapes:
        flops, nbytes = task.work(entry["shape"])
        sol = speed_of_light_us(flops, nbytes, peak)
        entry["sol_us"] = sol
        if verdict is None and sol and entry["min_us"] < MARGIN * sol:
            verdict = (f"{entry['key']}: {entry['min_us']:.2f} us, but moving {nbytes or 0:.3g} bytes and "
                       f"{flops or 0:.3g} FLOPs takes at least {sol:.2f} us on {peak.name} "
                       f"({peak.source} peaks; rejected below {MARGIN:g}x that)")
    return verdict
