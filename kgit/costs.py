"""How model costs are shown to people: priced calls in dollars, and calls without a
price (a model litellm's table lacks, the manual model) said to be unpriced, never $0.

Amounts keep at least two significant digits, so a run that cost a fraction of a cent
reads $0.0046, not $0.00.
"""

from __future__ import annotations

import math

MOST_DECIMALS = 6  # a millionth of a dollar: below any single priced call


def amount(value: float | None, digits: int = 4) -> str:
    """`value` in dollars without the sign: at least `digits` decimals, more until two significant
    digits show (at most MOST_DECIMALS)."""
    value = value or 0.0
    decimals = digits
    if 0 < abs(value) < 1:
        decimals = max(digits, min(MOST_DECIMALS, 1 - math.floor(math.log10(abs(value)))))
    return f"{value:.{decimals}f}"


def usd(value: float | None, digits: int = 4) -> str:
    return f"${amount(value, digits)}"


def cost_text(cost: float | None, unpriced: int = 0, digits: int = 4, unit: str = "call") -> str:
    """`cost` of the priced calls (or attempts, `unit`) and how many had no price."""
    if not unpriced:
        return usd(cost, digits)
    many = f"{unpriced} {unit}{'' if unpriced == 1 else 's'}"
    if not cost:
        return f"unpriced ({many} without a price)"
    return f"{usd(cost, digits)} + {many} unpriced"


def unpriced(attempt) -> bool:
    """The attempt's model calls had no price (`Kgit-Cost-USD: unknown`)."""
    return attempt.trailers.get("Kgit-Cost-USD", [""])[-1] == "unknown"
