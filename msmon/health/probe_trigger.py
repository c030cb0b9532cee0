"""Histograms around an alert: a ``grad_explosion``, ``loss_spike`` or ``nonfinite`` alert leaves a distributions probe
request (docs/probe.md) for the next ``health.alerts.distributions_logs`` logging steps of every rank, unless a request
is still waiting for a rank; the ranks take it at their next logging step, as one from ``msmon probe``."""

from __future__ import annotations

import logging
from pathlib import Path

from msmon.errors import describe
from msmon.health.alert import Alert
from msmon.health.groups import EXPLAINED
from msmon.probe import ProbeKind, new_request, pending_ranks, read_marks, read_request, write_request

logger = logging.getLogger("msmon")


class DistributionsOnAlert:
    """A sink that asks for the distributions probe after the alerts a layer group can explain."""

    quiet = True  # a detector whose action is ``log`` still gets its histograms

    def __init__(self, run_dir: Path, logs: int, world_size: int) -> None:
        self._run_dir, self._logs, self._world = run_dir, logs, max(1, world_size)

    def handle(self, alert: Alert) -> None:
        if alert.detector not in EXPLAINED:
            return
        try:
            current = read_request(self._run_dir)
        except ValueError:  # a malformed request file: replaced by this one
            current = None
        try:
            if current is not None and pending_ranks(current, read_marks(self._run_dir, current.id), self._world):
                logger.info("msmon: no histograms for the %s alert at step %d: probe request %s is not taken yet",
                            alert.detector, alert.step, current.id)
                return
            request = new_request(ProbeKind.DISTRIBUTIONS, self._logs, None)
            write_request(self._run_dir, request)
        except OSError as exc:
            logger.warning("msmon: cannot ask for histograms after the %s alert: %s", alert.detector, describe(exc))
            return
        logger.info("msmon: %s alert at step %d: histograms of the next %d logging step(s) (probe request %s)",
                    alert.detector, alert.step, self._logs, request.id)

    def close(self, deadline: float | None = None) -> None:
        return None
