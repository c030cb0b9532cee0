"""Where a run parts from its references (``msmon.health.agreement`` finds it; the compare page draws it)."""

from __future__ import annotations

from dataclasses import dataclass

from msmon.reference.band import ReferenceBand
from msmon.util.numbers import fmt_number


@dataclass(frozen=True)
class Parting:
    """The first step where a run leaves its reference: which metric, its value, the reference's (and the band's
    edges when judged against a band)."""

    metric: str
    step: int
    value: float
    expected: float
    low: float | None = None
    high: float | None = None

    def describe(self) -> str:
        band = f" (band {fmt_number(self.low, 6)}-{fmt_number(self.high, 6)})" if self.low is not None else ""
        return (f"{self.metric} parts at step {self.step}: {fmt_number(self.value, 8)} against "
                f"{fmt_number(self.expected, 8)}{band}")


@dataclass(frozen=True)
class Verdict:
    """``msmon compare --assert``'s answer: where the run first parts from its references (None: they agree), the
    band it was judged against (None with ``exact``), and the one line that says so."""

    parting: Parting | None
    band: ReferenceBand | None
    line: str
