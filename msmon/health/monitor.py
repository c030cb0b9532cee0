"""The health listener: runs the detectors on every record and turns signals into alerts and actions."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from msmon.health.alert import Alert, Signal
from msmon.health.detectors import build_detectors
from msmon.health.detectors.base import Detector
from msmon.health.detectors.learning_rate import LearningRateDetector
from msmon.health.detectors.stall import StallDetector
from msmon.health.settings import HealthSettings

logger = logging.getLogger("msmon")


class Sink(Protocol):
    """Where alerts go. ``quiet`` sinks also receive the alerts of detectors whose action is ``log``."""

    quiet: bool

    def handle(self, alert: Alert) -> None: ...

    def close(self) -> None: ...


class HealthMonitor:
    """One instance per run: the same object and code path live (a session listener) and in replay.

    Thread-safe: the writer thread calls ``on_record``, the watchdog thread ``check_stall``.
    """

    def __init__(
        self,
        settings: HealthSettings,
        config: Mapping[str, Any] | None = None,
        *,
        sinks: Sequence[Sink] = (),
        request_stop: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.detectors: list[Detector] = build_detectors(settings, config)
        self.sinks = list(sinks)
        self.request_stop = request_stop
        self.alerts: list[Alert] = []
        self.suppressed = 0
        self.stop_reason: str | None = None
        self._last: dict[str, tuple[float | None, str]] = {}
        self._lock = threading.Lock()

    @property
    def alert_count(self) -> int:
        return len(self.alerts)

    @property
    def stall(self) -> StallDetector | None:
        return next((d for d in self.detectors if isinstance(d, StallDetector)), None)

    def set_total_steps(self, total: int | None) -> None:
        """Tell the LR checks the run's total steps when the config left it to the dataset (-1)."""
        with self._lock:
            for det in self.detectors:
                if isinstance(det, LearningRateDetector) and total and not det.schedule.total_steps:
                    det.schedule.total_steps = int(total)

    def on_record(self, record: dict[str, Any]) -> None:
        """Listener entry point (the session's writer thread)."""
        self.observe(record)

    def observe(self, record: dict[str, Any]) -> list[Alert]:
        """Run every detector on one record; return the alerts raised (after rate limiting)."""
        raised: list[Alert] = []
        with self._lock:
            for det in list(self.detectors):
                try:
                    signal = det.observe(record)
                except Exception as exc:  # noqa: BLE001 - a broken detector must not stop the others
                    logger.warning("health detector %s failed (%s: %s); it is disabled", det.name,
                                   type(exc).__name__, exc)
                    self.detectors.remove(det)
                    continue
                if signal is not None:
                    alert = self._raise(det.name, signal, record.get("step"), record.get("time"))
                    if alert is not None:
                        raised.append(alert)
        return raised

    def check_stall(
        self, idle_s: float, last_step: int | None, last_end_wall: float | None, step_seconds: Sequence[float],
        now: float,
    ) -> Alert | None:
        """The watchdog's entry point: a stall alert when no step has ended for the timeout."""
        with self._lock:
            stall = self.stall
            signal = stall.check(idle_s, last_step, last_end_wall, step_seconds) if stall else None
            return self._raise("stall", signal, last_step or 0, now) if signal else None

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001
                logger.warning("alert sink %s failed to close: %s", type(sink).__name__, exc)

    def _raise(self, detector: str, signal: Signal, step: Any, time: Any) -> Alert | None:
        when = float(time) if isinstance(time, int | float) and not isinstance(time, bool) else None
        if not self._allowed(detector, signal.severity, when):
            self.suppressed += 1
            return None
        action = getattr(self.settings, detector).action
        alert = Alert(when, step if isinstance(step, int) else -1, detector, signal.severity, signal.message,
                      signal.values, action)
        self.alerts.append(alert)
        for sink in self.sinks:
            if action == "log" and not sink.quiet:
                continue
            try:
                sink.handle(alert)
            except Exception as exc:  # noqa: BLE001 - an alert sink must never break training
                logger.warning("alert sink %s failed: %s", type(sink).__name__, exc)
        if action == "stop" and self.stop_reason is None:
            self.stop_reason = f"{detector} at step {alert.step}: {signal.message}"
            if self.request_stop is not None:
                self.request_stop(self.stop_reason)
        return alert

    def _allowed(self, detector: str, severity: str, when: float | None) -> bool:
        """Per detector at most one alert per rate_limit_s; a critical one is never held back by a warning."""
        last = self._last.get(detector)
        limit = self.settings.alerts.rate_limit_s
        if last is not None and when is not None and last[0] is not None and when - last[0] < limit:
            if not (severity == "critical" and last[1] == "warning"):
                return False
        self._last[detector] = (when, severity)
        return True
