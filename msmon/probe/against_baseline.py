"""One rank's profile against the run's baseline profile: the operator types whose time a step grew, and by how
much (the alert after an ``action: profile`` and the report's operator table, docs/probe.md)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from msmon.probe.summary import ProfileSummary

#: An operator type's growth below this many ms a step is noise, whatever its ratio.
MIN_GROWTH_MS = 0.01
#: Slower operator types an alert names.
NAMED = 5


@dataclass(frozen=True)
class OpChange:
    """One operator type's time a step (ms) in the baseline and in the profile (0 when it did not run there)."""

    op_type: str
    baseline_ms: float
    ms: float

    @property
    def ratio(self) -> float:
        return self.ms / self.baseline_ms if self.baseline_ms > 0 else float("inf")

    @property
    def ratio_text(self) -> str:
        return f"{self.ratio:.1f}x" if self.baseline_ms > 0 else "new"

    @property
    def growth_ms(self) -> float:
        return self.ms - self.baseline_ms


@dataclass(frozen=True)
class Comparison:
    """``profile`` against ``baseline`` (one rank): every operator type's change, the most time first, and the
    slower ones (above ``slower_ratio`` x the baseline), the largest growth first."""

    baseline: ProfileSummary
    profile: ProfileSummary
    changes: list[OpChange]
    slower: list[OpChange]
    slower_ratio: float

    def text(self) -> str:
        """One sentence: the window and its step time against the baseline's, then the slower operator types."""
        p, b = self.profile, self.baseline
        head = (f"rank {p.rank}, steps {p.first_step}-{p.last_step} against the baseline (steps {b.first_step}-"
                f"{b.last_step}): {_ms(step_ms(p))} ms a step against {_ms(step_ms(b))} ms")
        if not p.op_types or not b.op_types:
            return f"{head}; no operator times to compare (the profile holds no CPU operator tables)"
        if not self.slower:
            return (f"{head}; no operator type is {self.slower_ratio:g}x slower than in the baseline: the time went "
                    f"outside the operators (data, host work, other processes between them)")
        named = ", ".join(f"{c.op_type} {c.ratio_text} ({_ms(c.baseline_ms)} -> {_ms(c.ms)} ms a step)"
                          for c in self.slower[:NAMED])
        more = f" and {len(self.slower) - NAMED} more" if len(self.slower) > NAMED else ""
        return f"{head}; slower than in the baseline: {named}{more}"


def step_ms(summary: ProfileSummary) -> float:
    """The median wall time of the profiled steps (0 without steps)."""
    return statistics.median(s.wall_ms for s in summary.steps) if summary.steps else 0.0


def per_step(summary: ProfileSummary) -> dict[str, float]:
    """Each operator type's time a profiled step (ms)."""
    steps = max(len(summary.steps), 1)
    return {t.op_type: t.total_ms / steps for t in summary.op_types}


def compare(baseline: ProfileSummary, profile: ProfileSummary, slower_ratio: float) -> Comparison:
    before, after = per_step(baseline), per_step(profile)
    changes = [OpChange(name, before.get(name, 0.0), after.get(name, 0.0)) for name in {**after, **before}]
    changes.sort(key=lambda c: -c.ms)
    slower = [c for c in changes if c.growth_ms >= MIN_GROWTH_MS and c.ms > slower_ratio * c.baseline_ms]
    slower.sort(key=lambda c: -c.growth_ms)
    return Comparison(baseline, profile, changes, slower, slower_ratio)


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"
