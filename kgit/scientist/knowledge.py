"""Which knowledge documents, and which of their sections, the designer reads for a problem.

A document's title line and each of its `## ` sections may end with a comment that names the
traits it is for: `<!-- kgit: matmul -->`, or `<!-- kgit: fp8 matmul -->` for material that
needs both. With `evolve.knowledge: auto` (the default) a document goes in when the problem has
its title's traits, and of it every untagged section and each tagged one whose traits the
problem has; the comments never reach the model. A list of names shows those documents whole.

The traits are read from the problem itself, so an imported problem needs no declaration:
its operations (`matmul`: the reference, the task text or the forbidden calls name a matrix
product), its data types (`fp8`), its build targets and the GPUs that time it (`hopper`,
`cdna3`), and where candidates run (`interpreter`: no GPU).
"""

from __future__ import annotations

import re
from pathlib import Path

AUTO = "auto"
# The built-in documents `auto` considers, in the order they are shown.
BUILTIN = ("triton", "hopper", "cdna3", "fp8_gemm")
TRAITS = {
    "matmul": "the problem multiplies matrices (GEMM, batched or scaled matmul, tl.dot)",
    "fp8": "its tensors are 8-bit floats",
    "hopper": "it is built for or timed on NVIDIA Hopper (sm_90, H100/H200)",
    "cdna3": "it is built for or timed on AMD CDNA3 (gfx942, MI300X)",
    "interpreter": "its candidates run in Triton's interpreter on the CPU (no GPU here)",
}
_TAG = re.compile(r"[ \t]*<!--\s*kgit:\s*(?P<traits>[^>]*?)\s*-->[ \t]*$", re.M)
_MATMUL = re.compile(r"\b(?:matmul|bmm|addmm|baddbmm|mm|einsum|linear|_scaled_mm|scaled_mm|gemm|tl\.dot)\b"
                     r"|[\w)\]] @ [\w(]|[)\]]@[\w(]", re.I)  # a@b in an address is no product
_FP8 = re.compile(r"float8|\bfp8\b|e4m3|e5m2", re.I)
_HOPPER = re.compile(r"\bsm_?90a?\b|\bG?H(?:100|200|800|20)\b", re.I)
_CDNA3 = re.compile(r"\bgfx94[0-2]\b|\bMI3[0-2]\d[A-Z]?\b", re.I)  # MI300X, MI308X, MI325X (MI350: CDNA4)


def traits(task, problem_dir: Path | None, environment, targets: list | None = None) -> set[str]:
    """The traits of a problem in this evaluation environment (see TRAITS)."""
    reference = ""
    if problem_dir is not None and (Path(problem_dir) / "reference.py").exists():
        reference = (Path(problem_dir) / "reference.py").read_text(encoding="utf-8", errors="replace")
    words = "\n".join([reference, getattr(task, "summary", ""), getattr(task, "description", ""),
                       " ".join(getattr(task, "forbidden", None) or [])])
    found = set()
    if _MATMUL.search(words):
        found.add("matmul")
    if _FP8.search(words):
        found.add("fp8")
    machines = " ".join([*(targets if targets is not None else getattr(task, "targets", None) or []),
                         getattr(environment, "device", "") or "", getattr(environment, "ranked_on", "") or ""])
    if _HOPPER.search(machines):
        found.add("hopper")
    if _CDNA3.search(machines):
        found.add("cdna3")
    if environment is not None and not environment.on_gpu:
        found.add("interpreter")
    return found


def _wanted(tag: re.Match | None, have: set[str] | None) -> bool:
    return tag is None or have is None or set(tag.group("traits").split()) <= have


def select(text: str, have: set[str] | None) -> str | None:
    """The document for a problem with traits `have`: None when its title's traits are missing,
    else the text without the sections it lacks the traits for and without the comments.
    `have` None keeps every section."""
    lines = text.strip().splitlines()
    if not lines:
        return None
    if not _wanted(_TAG.search(lines[0]), have):
        return None
    out, keep = [], True
    for line in lines:
        if line.startswith("## "):
            keep = _wanted(_TAG.search(line), have)
        if keep:
            out.append(_TAG.sub("", line))
    return "\n".join(out).strip()


def describe(have: set[str]) -> str:
    """The traits in words, for `kgit evolve --dry-run` and the docs."""
    return "; ".join(f"{name}: {TRAITS[name]}" for name in TRAITS if name in have) or "none"
