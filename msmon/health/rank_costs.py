"""Every rank's step costs judged together: the memory-growth detector per rank and the slow-rank detector across
ranks, the same object live (``msmon run``'s rank watcher, from the heartbeats) and in ``msmon replay`` (from
``heartbeats/rank_N.jsonl``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from msmon.config.health import HealthSettings
from msmon.health.alert import Signal
from msmon.health.detectors.memory_growth import MemoryGrowthDetector
from msmon.health.detectors.slow_rank import SlowRankDetector
from msmon.step_cost import StepCost

PENDING_STEPS = 64  # logged steps waiting for the ranks that have not reported them yet


@dataclass(frozen=True)
class RankReport:
    """What one rank reported: its latest step costs, its host and the host memory left (MiB) when known."""

    costs: tuple[StepCost, ...]
    host: str | None = None
    host_left_mb: float | None = None


@dataclass(frozen=True)
class CostAlert:
    """A signal of a cost detector, and the step and time it belongs to."""

    detector: str
    signal: Signal
    step: int
    time: float


class RankCosts:
    """``observe({rank: RankReport})`` with what the ranks reported; the alerts they raise come back."""

    def __init__(self, settings: HealthSettings) -> None:
        self.settings = settings
        self._memory: dict[int, MemoryGrowthDetector] = {}
        self._slow = SlowRankDetector(settings.slow_rank) if settings.slow_rank.enabled else None
        self._last: dict[int, int] = {}  # rank -> the last step fed
        self._hosts: dict[int, str | None] = {}
        self._pending: dict[int, dict[int, StepCost]] = {}  # step -> rank -> its cost

    def resumed(self) -> None:
        """A new attempt: every rank's process starts again (and compiles again)."""
        for detector in self._memory.values():
            detector.resumed()
        if self._slow is not None:
            self._slow.resumed()
        self._last.clear()
        self._hosts.clear()
        self._pending.clear()

    def observe(self, reports: Mapping[int, RankReport]) -> list[CostAlert]:
        """The new costs of every rank (older ones are skipped), then each step all ranks have reported."""
        alerts: list[CostAlert] = []
        for rank, report in sorted(reports.items()):
            self._hosts[rank] = report.host
            for cost in sorted(report.costs, key=lambda c: c.step):
                if cost.step <= self._last.get(rank, -1):
                    continue
                self._last[rank] = cost.step
                alerts.extend(self._memory_growth(rank, cost, report.host, report.host_left_mb))
                if self._slow is not None:
                    self._pending.setdefault(cost.step, {})[rank] = cost
        return alerts + self._judge_steps()

    def _memory_growth(self, rank: int, cost: StepCost, host: str | None, left: float | None) -> list[CostAlert]:
        if not self.settings.memory_growth.enabled:
            return []
        detector = self._memory.get(rank)
        if detector is None:
            detector = self._memory[rank] = MemoryGrowthDetector(self.settings.memory_growth, rank, host)
        signal = detector.observe(cost, left)
        return [CostAlert(detector.name, signal, cost.step, cost.time)] if signal is not None else []

    def _judge_steps(self) -> list[CostAlert]:
        """Each step every rank has reported, in order. A rank reports its steps in order, so an older step that
        some rank skipped (its heartbeat moved on between two reads) can never be completed: it is dropped."""
        if self._slow is None:
            return []
        alerts = []
        ranks = set(self._last)
        complete = [step for step, costs in sorted(self._pending.items()) if set(costs) == ranks]
        for step in complete:
            costs = self._pending.pop(step)
            signal = self._slow.observe(step, costs, self._hosts)
            if signal is not None:
                alerts.append(CostAlert(self._slow.name, signal, step, max(c.time for c in costs.values())))
        waiting = sorted(step for step in self._pending if not complete or step > complete[-1])
        self._pending = {step: self._pending[step] for step in waiting[-PENDING_STEPS:]}
        return alerts
