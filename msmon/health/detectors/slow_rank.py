"""The slow rank: one rank whose time outside the step (its host work between two train steps: the callbacks, a
checkpoint save, the next batch), or whose whole step time where ranks do not wait for each other, stays above its
peers' median at every logged step for a window of steps. In a synchronous data-parallel run the others wait for it
inside their step (at the collective), so their step time says nothing: the time outside the step names it. A slow
rank is not a hung one (the stall check's job): its steps still end.

The slow machine: where the ranks name their machines (two or more), a machine whose median rank is slow against the
ranks of the other machines, by the same rule and window, is named once, with its ranks (a slow disk, a throttled
CPU, a bad NIC: all its ranks slow together), instead of its ranks one by one.

Fed in the ``msmon run`` parent with the step costs every rank reports for one logged step (their heartbeats), and
by ``msmon replay`` from ``heartbeats/rank_N.jsonl``.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Mapping

from msmon.config.health import SlowRankSettings
from msmon.health.alert import Signal
from msmon.step_cost import StepCost
from msmon.util.numbers import fmt_number
from msmon.util.ranks import ranks_text

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
        self._host_since: dict[str, int] = {}  # machine -> the first step of its slow streak
        self._host_active: set[str] = set()

    def resumed(self) -> None:
        """A new attempt: its first steps compile again."""
        self._first = None
        self._since.clear()
        self._active.clear()
        self._host_since.clear()
        self._host_active.clear()

    def observe(self, step: int, costs: Mapping[int, StepCost], hosts: Mapping[int, str | None]) -> Signal | None:
        s = self.settings
        if len(costs) < 2:
            return None
        if self._first is None:
            self._first = step
        if step - self._first < s.skip_steps:
            return None
        figures = {attribute: Figure([getattr(cost, attribute) for cost in costs.values()]) for attribute, _ in FIGURES}
        slow = {}
        for rank in sorted(costs):
            found = self._slow({attribute: figure.against_the_rest(getattr(costs[rank], attribute))
                                for attribute, figure in figures.items()})
            if found is None:
                self._since.pop(rank, None)
                self._active.discard(rank)
            else:
                slow[rank] = found
                self._since.setdefault(rank, step - costs[rank].steps)
        machine = self._slow_machine(step, costs, hosts)
        if machine is not None:
            return machine
        for rank, found in slow.items():
            since = self._since[rank]
            if rank not in self._active and step - since >= s.window_steps:
                self._active.add(rank)
                return self._signal(rank, step - since, since, found, hosts.get(rank))
        return None

    def _slow_machine(self, step: int, costs: Mapping[int, StepCost], hosts: Mapping[int, str | None]) -> Signal | None:
        """The first machine whose median rank has been slow against the other machines' ranks for the window."""
        machines: dict[str, list[int]] = {}
        for rank in sorted(costs):
            host = hosts.get(rank)
            if host:
                machines.setdefault(host, []).append(rank)
        if len(machines) < 2:
            return None
        found = None
        for host, ranks in sorted(machines.items()):
            slow = self._slow(_machine_medians(ranks, costs)) if len(ranks) > 1 else None
            if slow is None:
                self._host_since.pop(host, None)
                self._host_active.discard(host)
                continue
            since = self._host_since.setdefault(host, step - costs[ranks[0]].steps)
            if host in self._host_active or step - since < self.settings.window_steps or found is not None:
                continue
            self._host_active.add(host)
            self._active.update(ranks)
            found = self._machine_signal(host, ranks, step - since, since, slow)
        return found

    def _slow(self, medians: Mapping[str, tuple[float, float]]) -> tuple[str, float, float] | None:
        """(figure, own ms, the others' median ms) of the first figure that is slow (``medians``: each figure's own
        and the others' median ms), else None."""
        s = self.settings
        for attribute, _ in FIGURES:
            own, others = medians[attribute]
            if own > s.ratio * others and own - others >= s.min_excess_ms:
                return attribute, own, others
        return None

    def _machine_signal(self, host: str, ranks: list[int], steps: int, since: int,
                        slow: tuple[str, float, float]) -> Signal:
        attribute, own, others = slow
        ratio = own / others if others > 0 else float("inf")
        ratio_text = f"{ratio:.1f}x" if others > 0 else "far above"
        message = (f"machine {host} ({ranks_text(ranks)}, all {len(ranks)} of its ranks): {ratio_text} the other "
                   f"machines' {dict(FIGURES)[attribute]} for {steps} steps since step {since} ({fmt_number(own)} ms "
                   f"a step against {fmt_number(others)} ms): it holds every rank back")
        values = {"rank": ranks[0], "ranks": ranks, "host": host, "machine": host, "figure": attribute, "ms": own,
                  "others_ms": others, "ratio": ratio if others > 0 else None, "since_step": since, "steps": steps}
        return Signal("warning", message, values)

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



def _machine_medians(ranks: list[int], costs: Mapping[int, StepCost]) -> dict[str, tuple[float, float]]:
    """Each figure's median over ``ranks`` (one machine's) and over the other ranks."""
    own = set(ranks)
    return {attribute: (statistics.median(getattr(costs[rank], attribute) for rank in ranks),
                        statistics.median(getattr(cost, attribute) for rank, cost in costs.items() if rank not in own))
            for attribute, _ in FIGURES}


class Figure:
    """One figure of every rank, sorted once: the median of the others, for each rank, in O(log n)."""

    def __init__(self, values: list[float]) -> None:
        self._sorted = sorted(values)

    def against_the_rest(self, own: float) -> tuple[float, float]:
        """(``own``, the median of the values without one occurrence of ``own``)."""
        values = self._sorted
        gone = bisect.bisect_left(values, own)
        left = len(values) - 1

        def at(index: int) -> float:  # the index-th value of the rest
            return values[index if index < gone else index + 1]

        middle = left // 2
        median = at(middle) if left % 2 else (at(middle - 1) + at(middle)) / 2
        return own, median
