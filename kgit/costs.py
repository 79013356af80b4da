"""How model costs are shown to people: priced calls in dollars, and calls without a
price (a model litellm's table lacks, the manual model) said to be unpriced, never $0.
"""

from __future__ import annotations


def cost_text(cost: float | None, unpriced: int = 0, digits: int = 4, unit: str = "call") -> str:
    """`cost` of the priced calls (or attempts, `unit`) and how many had no price."""
    if not unpriced:
        return f"${cost or 0:.{digits}f}"
    many = f"{unpriced} {unit}{'' if unpriced == 1 else 's'}"
    if not cost:
        return f"unpriced ({many} without a price)"
    return f"${cost:.{digits}f} + {many} unpriced"


def unpriced(attempt) -> bool:
    """The attempt's model calls had no price (`Kgit-Cost-USD: unknown`)."""
    return attempt.trailers.get("Kgit-Cost-USD", [""])[-1] == "unknown"
