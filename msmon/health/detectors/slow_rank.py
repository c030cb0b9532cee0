"""The slow rank: one rank whose time outside the step (its host work between two train steps: the callbacks, a
checkpoint save, the next batch), or whose whole step time where ranks do not wait for each other, stays above its
peers' median at every logged step for a window of steps. In a synchronous data-parallel run the others wait for it
inside their step (at the collective), so their step time says nothing: the time outside the step names it. A slow
rank is not a hung one (the stall check's job): its steps still end.

Fed in the ``msmon run`` parent with the step costs every rank reports for one logged step (their heartbeats), and
by ``msmon replay`` from ``heartbeats/rank_N.jsonl``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from msmon.config.health import SlowRankSettings
from msmon.health.alert import Signal
from msmon.step_cost import StepCost
from msmon.util.numbers import fmt_number

#: the figures judged: (StepCost attribute, what it is in a message)
FIGURES = (("outside_ms", "time outside the step (host work: data, callbacks, saving)"),
           ("step_ms", "step time"))


class SlowRankDetector:
    """``observe(step, costs, hosts)`` once per logged step that every rank has reported."""

    name = "slow_rank"

    def __init__(self, settings: SlowRankSettings) -> None:
        self.settings = settings
        self._first: int | None = None
        self._since: dict[int, int] = {}  # rank -> the first step of its slow streak
        self._active: set[int] = set()

    def resumed(self) -> None:
        """A new attempt: its first steps compile again."""
        self._first = None
        self._since.clear()
        self._active.clear()

    def observe(self, step: int, costs: Mapping[int, StepCost], hosts: Mapping[int, str | None]) -> Signal | None:
        s = self.settings
        if len(costs) < 2:
            return None
        if self._first is None:
            self._first = step
        if step - self._first < s.skip_steps:
            return None
        found = None
        for rank in sorted(costs):
            slow = self._slow(rank, costs)
            if slow is None:
                self._since.pop(rank, None)
                self._active.discard(rank)
                continue
            since = self._since.setdefault(rank, step - costs[rank].steps)
            if rank in self._active or step - since < s.window_steps or found is not None:
                continue
            self._active.add(rank)
            found = self._signal(rank, step - since, since, slow, hosts.get(rank))
        return found

    def _slow(self, rank: int, costs: Mapping[int, StepCost]) -> tuple[str, float, float] | None:
        """(figure, the rank's ms, the others' median ms) of the first figure that is slow, else None."""
        s = self.settings
        for attribute, _ in FIGURES:
            own = getattr(costs[rank], attribute)
            others = statistics.median(getattr(cost, attribute) for peer, cost in costs.items() if peer != rank)
            if own > s.ratio * others and own - others >= s.min_excess_ms:
                return attribute, own, others
        return None

    def _signal(self, rank: int, steps: int, since: int, slow: tuple[str, float, float], host: str | None) -> Signal:
        attribute, own, others = slow
        what = dict(FIGURES)[attribute]
        ratio = own / others if others > 0 else float("inf")
        where = f"rank {rank}" + (f" on {host}" if host else "")
        ratio_text = f"{ratio:.1f}x" if others > 0 else "far above"
        message = (f"{where}: {ratio_text} the other ranks' {what} for {steps} steps since step {since} "
                   f"({fmt_number(own)} ms a step against {fmt_number(others)} ms): it holds every rank back")
        values = {"rank": rank, "host": host, "figure": attribute, "ms": own, "others_ms": others,
                  "ratio": ratio if others > 0 else None, "since_step": since, "steps": steps}
        return Signal("warning", message, values)
