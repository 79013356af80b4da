"""What a campaign's model calls cost, every call counted once.

The cost log (kgit/archive/costlog.py) holds every call of the `kgit evolve` runs that
kept one, commit or no commit; a commit of such a run names it (`Kgit-Run`). A total is
the log's calls plus the `Kgit-Cost-USD` of commits whose run the log does not hold (runs
from before the log, or a clone without the notes). What the log holds beyond its runs'
commits was spent on no attempt: designs of skipped iterations, answers that could not
be used, plans a stopped run kept for the next.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgit.archive import costlog
from kgit.costs import unpriced, usd


@dataclass
class Spending:
    cost: float = 0.0  # USD of every priced call
    calls: int = 0  # calls in the cost log
    unpriced_calls: int = 0  # of those, calls without a price
    unpriced_attempts: int = 0  # commits outside the log whose calls had no price
    tokens: int = 0
    off_attempts: float = 0.0  # USD of logged calls that no commit carries

    def short(self, digits: int = 2) -> str:
        """The total, with what had no price: `$0.0046`, `$0.012 + 2 calls unpriced`, `unpriced (...)`."""
        missing = [f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in ((self.unpriced_calls, "call"),
                                                                        (self.unpriced_attempts, "attempt")) if n]
        if not missing:
            return usd(self.cost, digits)
        if not self.cost:
            return f"unpriced ({' and '.join(missing)} without a price)"
        return f"{usd(self.cost, digits)} + {' and '.join(missing)} unpriced"

    def text(self, digits: int = 2) -> str:
        """`short()` and where the money went, for a report's summary line."""
        extras = []
        if self.calls and (self.cost or self.unpriced_calls < self.calls):
            extras.append(f"{self.calls} model call{'' if self.calls == 1 else 's'}")
        if self.off_attempts > 0:
            extras.append(f"{usd(self.off_attempts, digits)} of it on no attempt: designs of skipped iterations, "
                          "answers that could not be used, plans kept for a later run")
        return self.short(digits) + (f" ({'; '.join(extras)})" if extras else "")

    def to_json(self) -> dict:
        return {"cost_usd": self.cost, "model_calls": self.calls, "unpriced_calls": self.unpriced_calls,
                "unpriced_attempts": self.unpriced_attempts, "tokens": self.tokens,
                "cost_on_no_attempt_usd": self.off_attempts}


def of(records: list[dict], attempts) -> Spending:
    """The spending of the cost log's `records` and the `attempts` of the archive."""
    runs = {r.get("run") for r in records}
    found = Spending(calls=len(records))
    logged = 0.0
    for r in records:
        if r.get("cost_usd") is None:
            found.unpriced_calls += 1
        else:
            logged += float(r["cost_usd"])
        found.tokens += int(r.get("tokens") or 0)
    on_logged_commits = 0.0
    outside = 0.0
    for a in attempts:
        if a.is_baseline:
            continue
        if a.run and a.run in runs:
            on_logged_commits += a.cost or 0.0
            continue
        outside += a.cost or 0.0
        found.unpriced_attempts += unpriced(a)
        found.tokens += int(a.tokens or 0)
    found.cost = logged + outside
    # Commits carry their cost rounded to a millionth: what is left below that is no spending.
    found.off_attempts = logged - on_logged_commits if logged - on_logged_commits > 5e-6 else 0.0
    return found


def load(repo, attempts) -> Spending:
    return of(costlog.read(repo), attempts)


def log_line(spent: Spending) -> str:
    """`kgit log`'s last line."""
    if not (spent.calls or spent.cost or spent.unpriced_attempts):
        return "LLM cost: none recorded"
    where = "" if spent.calls else " (from the commits' Kgit-Cost-USD: these runs kept no cost log)"
    return f"LLM cost: {spent.text(4)}{where}"
