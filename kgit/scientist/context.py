"""What the scientist is told about where and how its code is judged: the evaluation
environment, the correctness check as it is really applied, and errors without kgit's
own frames.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kgit.archive import figures
from kgit.archive.notes import KernelsNote, Measurement

# Sentences that send the model to files it cannot open.
_DOC_POINTER = re.compile(r"[^.]*\bdocs/[\w./-]+[^.]*\.?")


@dataclass
class Environment:
    """Where candidates run: device, compiled or interpreted, versions, and the evaluator."""

    device: str
    on_gpu: bool
    timing: str
    versions: dict = field(default_factory=dict)
    target: str = "this host (evaluator.backend: local)"
    # The GPU whose timings rank the attempts (kgit remeasure notes), when it is not this
    # evaluation's device, and the software its notes recorded.
    ranked_on: str | None = None
    ranked_versions: dict = field(default_factory=dict)
    build_targets: str = ""  # where the target facts come from and what a failed build means (targets_text)
    protocol: str = "kgit-adaptive"  # how the benchmark shapes are timed (harness/protocols.py)

    def text(self) -> str:
        if self.on_gpu:
            how = (f"compiled for the GPU and timed with {self.timing or 'device'} timing; a timing "
                   "counts as faster or slower only beyond its measured noise")
        else:
            how = ("no GPU: the kernel runs in Triton's interpreter on the CPU (TRITON_INTERPRET=1). Only "
                   "correctness is checked; interpreter timings say nothing about GPU speed and are not "
                   "shown as performance. Compile-time options (num_warps, num_stages, ...) have no effect here. "
                   "Tensors are CPU tensors, so code that only a GPU takes (a branch on `is_cuda` or the device "
                   "type, torch.cuda calls such as graph capture or streams, a fallback on Triton's "
                   "OutOfResources) does not run here: it runs first where the kernel is timed on a GPU")
        lines = [f"- device: {self.device}", f"- execution: {how}"]
        if self.ranked_on:
            lines += [f"- software here: {_versions_text(self.versions)}",
                      f"- ranking timings: from {self.ranked_on} (re-measured there with `kgit remeasure`), whose "
                      f"software was {_versions_text(self.ranked_versions)}; the code must work with both",
                      f"- when timings arrive: {self.timings_arrive()}"]
        else:
            lines.append(f"- software: {_versions_text(self.versions)}")
        if self.on_gpu or self.ranked_on or self.protocol != "kgit-adaptive":
            lines.append(protocol_text(self.protocol, gpu=bool(self.on_gpu or self.ranked_on)))
        lines.append(f"- evaluator: {self.target}")
        if self.build_targets:
            lines.append(f"- build targets: {self.build_targets}")
        return "\n".join(lines)

    def timings_arrive(self) -> str:
        """When this run's attempts get a figure on the ranking GPU: only after a `kgit remeasure`
        there, which no step of this run makes: said, since the designer cannot tell it otherwise."""
        here = ("are checked for correctness only, in the interpreter" if not self.on_gpu else
                f"are timed on {self.device}, which does not rank")
        return (f"this run's attempts {here}, and get no {self.ranked_on} timing until someone runs `kgit remeasure` "
                f"on {self.ranked_on}, after this run ends: within the run every new attempt reads \"not measured on "
                f"{self.ranked_on}\", so later iterations build on untimed attempts, and only the attempts timed "
                f"before the run started carry {self.ranked_on} figures")


def protocol_text(name: str, gpu: bool) -> str:
    """The timing protocol in a sentence or two, with what each shape's figures are."""
    from kgit_harness import protocols

    protocol = protocols.get(name)
    if protocol.name == protocols.DEFAULT:
        head = GPU_TIMING if gpu else f"- timing protocol: {protocol.name}: {protocol.sentence}"
    else:
        head = (f"- timing protocol: {protocol.name}, as {protocol.follows} times a submission: "
                f"{protocol.sentence}. A kernel that keeps results, plans or CUDA graphs per input tuple gains "
                "nothing here" + (" (every timed call gets tensors it has never seen)" if protocol.fresh else ""))
    return head + ("; beside each shape's ranked figure the harness shows the kernel's device time (device events "
                   "after an L2 flush) and the host time a call, so a launch-bound shape (host time above device "
                   "time) shows as such" if gpu else "")


GPU_TIMING = ("- GPU timing: each call is timed with device events after an L2 flush (the kernel's GPU time, "
              "launch excluded); the harness also times back-to-back calls on its own clock, and where the host "
              "cannot issue the calls as fast as the GPU runs them (a launch-bound shape) that clock, host work "
              "of the Python wrapper included, is the shape's figure: over 3 to 10 back-to-back samples, the "
              "first included, by the problem's ranking statistic (the mean unless task.yml's `ranking` says "
              "median or min), as the event figure is over the timed repetitions after the warm-up calls. Each "
              "sample calls the kernel on the same input tuples (up to 64: as many as make about 2 ms of kernel "
              "time and fit in memory; the same tensor objects every sample, refilled with new values, every "
              "output checked)")


def targets_text(names, required: bool, on_gpu: bool, gpu_shapes: bool = False) -> str:
    """The build-target policy as .kgit.yaml sets it, and which launches the facts are compiled
    from (harness/targets.py: the launches of the judge's correctness checks, and with
    `targets_gpu_shapes` a dry run of the GPU shapes)."""
    from kgit.archive.buildfacts import HARDWARE
    from kgit_harness.targets import MAX_VARIANTS

    if not names:
        return ""
    dry = not on_gpu and gpu_shapes
    shapes = ("the GPU test shapes" if on_gpu else
              "the CPU test shapes above, in the interpreter, and, after timing, of a dry run of the GPU benchmark "
              "and test shapes: the kernel is called on inputs laid out like theirs, without values, and each "
              "launch is recorded, not run" if dry else "the CPU test shapes above, in the interpreter")
    policy = ("a kernel that does not build for one of them fails (require_targets: true)" if required else
              "not building for one of them is reported beside the result, not a failing status "
              "(require_targets: false); the kernel is still judged on correctness and speed")
    return (f"{', '.join(f'{n} ({HARDWARE.get(n, n)})' for n in names)}. Each candidate is cross-compiled for "
            f"them from the Triton launches of its correctness checks ({shapes}): every distinct kernel "
            f"configuration those launches used, up to {MAX_VARIANTS} per kernel, and the figures shown are the "
            "worst over them; " + ("a GPU shape whose inputs exceed 512 MiB is left out" if dry else
                                   "a configuration chosen only for other shapes (the GPU benchmark set) is not "
                                   "compiled")
            + f". {policy[0].upper() + policy[1:]}.")


VERSION_KEYS = ("torch", "triton", "arch", "cuda", "hip")


def _versions_text(versions: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items()) if v) or "versions unknown"


def _note_versions(attempts, device: str, harness: str | None = None) -> dict:
    """The software the latest note measured on `device` (and `harness`, when given) recorded."""
    found, when = {}, None
    for a in attempts:
        for note in a.notes.measurements:
            if note.device != device or not note.versions:
                continue
            if harness is not None and note.harness != harness:
                continue
            if when is None or note.when >= when:
                found, when = {k: v for k, v in note.versions.items() if k in VERSION_KEYS}, note.when
    return found


def _local_versions() -> dict:
    out = {}
    for name, dists in (("torch", ("torch",)), ("triton", ("triton", "pytorch-triton-rocm", "pytorch-triton"))):
        for dist in dists:
            try:
                out[name] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def _target(config) -> str:
    from kgit.scientist.llm import redact

    ev = config.evaluator
    if ev.backend == "command":
        return redact(f"a remote command (evaluator.backend: command): {ev.command}")
    if ev.backend == "ray":
        return f"a Ray cluster (evaluator.backend: ray, address {ev.address})"
    return "this host (evaluator.backend: local)"


class Machine(Protocol):
    """The GPUs of the host kgit runs on, as the loop found them (kgit/evaluation/gpus.py
    discovers them; the scientist is handed them, never looks)."""

    @property
    def vendor(self) -> str | None:  # "nvidia", "amd", or None without a GPU
        ...

    @property
    def ids(self) -> tuple[str, ...]:  # the visible GPUs
        ...


def environment(config, attempts, host: Machine | None, task=None) -> Environment:
    """The environment this run's evaluator measures in.

    For the local evaluator the host's GPUs decide (`host`: what the loop discovered; None
    only for a remote evaluator, which never reads it); for a remote one, the latest timing
    in the archive (the evaluator last used) does. Versions come from the latest note
    that recorded them on that device, else (local only) from this installation.
    """
    # Every record that names a device and how it timed: commits' own, re-measurements, and
    # the kernel splits kept beside commits.
    measured: list[Measurement | KernelsNote] = [
        m for a in attempts for m in ([a.measurement()] if a.device else []) + list(a.notes.measurements)
        + list(a.notes.kernels) if m.device]
    latest = max(measured, key=lambda m: m.when) if measured else None
    device = (latest.device if latest else None) or "unknown"
    timing = (latest.timing if latest else None) or ""
    if config.evaluator.backend == "local":
        if host is None:  # a programming error: the loop passes what it discovered
            raise ValueError("the local evaluator's environment needs the host's GPUs (kgit.evaluation.gpus.discover)")
        if not host.ids:
            device, timing = "cpu", figures.INTERPRETER
        elif figures.is_interpreter(timing, device):
            device, timing = f"{host.vendor} GPU", "events"
    on_gpu = not figures.is_interpreter(timing, device)
    versions = _note_versions(attempts, device)
    if not versions and config.evaluator.backend == "local":
        versions = _local_versions()
    group = figures.gpu_group(attempts)
    ranked_on = group.device if group is not None and group.device != device else None
    ranked_versions = _note_versions(attempts, group.device, group.harness) if ranked_on else {}
    declared = config.targets if config.targets is not None else list(getattr(task, "targets", None) or [])
    timing_config = getattr(config, "timing", None)
    protocol = getattr(timing_config, "protocol", None) or getattr(task, "protocol", None) or "kgit-adaptive"
    return Environment(device, on_gpu, timing, versions, _target(config), ranked_on, ranked_versions,
                       targets_text(declared, config.require_targets, on_gpu, config.targets_gpu_shapes), protocol)


def check_text(task, problem_dir: Path) -> str:
    """The correctness check as the harness applies it: the problem's own check_implementation
    (its source, from reference.py) when it has one, else allclose with task.yml's tolerance."""
    why = _DOC_POINTER.sub("", task.tolerance_why or "").strip()
    source = _function_source(Path(problem_dir) / "reference.py", "check_implementation")
    if source:
        return ("Correctness check: the problem's own check_implementation(data, output) decides (task.yml's "
                "rtol/atol are not used). " + (f"{why}\n" if why else "\n") + f"```python\n{source}\n```")
    return (f"Correctness check: torch.allclose(output, ref_kernel(data), rtol={task.rtol:g}, atol={task.atol:g})"
            + (f". {why}" if why else "."))


def _function_source(path: Path, name: str) -> str:
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError):
        return ""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(text, node) or ""
    return ""


def candidate_error(text: str) -> str:
    """An error as the writer should see it: the traceback frames of kgit, its harness and Python's
    import machinery removed."""
    from kgit.excerpts import without_own_frames

    return without_own_frames(text)[0]
