"""The health listener: runs the detectors on every record and turns signals into alerts and actions."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Protocol

from msmon.anomaly import Anomaly, StopRequest
from msmon.config.health import HealthSettings
from msmon.config.schedule import Schedule
from msmon.foreign import ConfigValue
from msmon.health.alert import Alert, Signal
from msmon.health.detectors import build_detectors
from msmon.health.detectors.base import Detector
from msmon.health.detectors.stall import StallDetector
from msmon.health.first_mover import FirstMovers
from msmon.health.groups import EXPLAINED, GroupNorms
from msmon.health.probed_steps import TIMING_DETECTORS, ProbedSteps
from msmon.health.profile_action import ProfileAction
from msmon.reference.band import ReferenceBand
from msmon.util import internal_errors
from msmon.util.jsonfiles import JsonObject, JsonValue

logger = logging.getLogger("msmon")

SINKS_CLOSE_S = 8.0  # what is still being delivered when the run ends gets this long, then it is abandoned


class Sink(Protocol):
    """Where alerts go. ``quiet`` sinks also receive the alerts of detectors whose action is ``log``."""

    quiet: bool

    def handle(self, alert: Alert) -> None: ...

    def close(self, deadline: float | None = None) -> None: ...


class HealthMonitor:
    """One instance per run: the same object and code path live (a session listener) and in replay.

    Thread-safe: the writer thread calls ``on_record``, the watcher of ``msmon run`` ``check_stall`` (``stall``
    false: no stall detector, the stall is judged in another process). ``context(step, detector)``, when given,
    writes the flight recorder's window before an alert and returns its path (the alert's ``context_file``); the
    per-group gradient norms of the records name the group behind growth, spike and non-finite alerts
    (msmon.health.groups), and the layer summaries the group that left its baseline first (msmon.health.first_mover).
    """

    def __init__(
        self,
        settings: HealthSettings,
        config: Mapping[str, ConfigValue] | None = None,
        *,
        sinks: Sequence[Sink] = (),
        request_stop: Callable[[StopRequest], None] | None = None,
        context: Callable[[int, str], str | None] | None = None,
        stall: bool = True,
        reference: ReferenceBand | None = None,
        profiles: ProfileAction | None = None,
        probed: ProbedSteps | None = None,
    ) -> None:
        self.settings = settings
        detectors = build_detectors(settings, config, reference)
        # stall false: another process owns the stall judgement (the parent `msmon run`), which this monitor's gap
        # check between records would repeat for the same hang
        self.detectors: list[Detector] = [d for d in detectors if stall or not isinstance(d, StallDetector)]
        self.sinks = list(sinks)
        self.request_stop = request_stop
        self.context = context
        self.groups = GroupNorms()
        self.movers = FirstMovers()
        self._explains = self._explained()
        self.profiles = profiles  # action profile: the requests, the baseline, the comparisons (docs/probe.md)
        # the probes' steps, which the detectors of step times do not judge
        self.probed = profiles.steps if profiles is not None else probed
        self.alerts: list[Alert] = []
        self.suppressed = 0
        self.stop: StopRequest | None = None  # the first stop a detector's action asked for
        self._last: dict[str, tuple[float | None, str]] = {}
        self._lock = threading.Lock()

    def share(self, names: Collection[str]) -> None:
        """Run only the detectors named ``names`` from now on (a long replay runs its detectors in two processes,
        each its share: msmon.health.replay_share)."""
        with self._lock:
            self.detectors = [d for d in self.detectors if d.name in names]
            self._explains = self._explained()

    def _explained(self) -> bool:
        """Whether a detector's alerts name the group that moved: else the groups and first movers are not kept (a
        replay share without those detectors skips them)."""
        return any(d.name in EXPLAINED for d in self.detectors)

    @property
    def alert_count(self) -> int:
        return len(self.alerts)

    @property
    def stall(self) -> StallDetector | None:
        return next((d for d in self.detectors if isinstance(d, StallDetector)), None)

    def set_total_steps(self, total: int | None) -> None:
        """Tell the schedule the detectors share (LR checks, warm-up ends) the run's total steps when the config left
        it to the dataset (-1)."""
        with self._lock:
            for det in self.detectors:
                schedule = getattr(det, "schedule", None)
                if isinstance(schedule, Schedule) and total and not schedule.total_steps:
                    schedule.total_steps = int(total)

    def on_record(self, record: JsonObject) -> None:
        """Listener entry point (the session's writer thread)."""
        self.observe(record)

    def observe(self, record: JsonObject) -> list[Alert]:
        """Run every detector on one record; return the alerts raised (after rate limiting)."""
        raised: list[Alert] = []
        step = record.get("step")
        with self._lock:
            if self._explains:
                self.groups.observe(record)
                self.movers.observe(record)
            probed = self.probed is not None and isinstance(step, int) and self.probed.probed(step)
            for det in list(self.detectors):
                if probed and det.name in TIMING_DETECTORS:
                    continue  # a profiled step's time is the profiler's
                try:
                    signal = det.observe(record)
                except Exception as exc:  # noqa: BLE001 - a broken detector must not stop the others
                    internal_errors.report(f"health detector {det.name} (now disabled)", exc)
                    self.detectors.remove(det)
                    continue
                if signal is not None:
                    signal = self.movers.explain(det.name, self.groups.explain(det.name, signal, record), record)
                    alert = self._raise(det.name, signal, step, record.get("time"))
                    if alert is not None:
                        raised.append(alert)
            if self.profiles is not None and isinstance(step, int):
                raised.extend(self._profiled(step, record.get("time")))
        return raised

    def check_profiles(self, step: int, time: float) -> list[Alert]:
        """The profiles of alerts (action profile) that every rank has finished, compared with the baseline, as
        alerts (the watcher of ``msmon run``, which sees no records)."""
        with self._lock:
            return self._profiled(step, time)

    def _profiled(self, step: int, time: JsonValue) -> list[Alert]:
        if self.profiles is None:
            return []
        when = float(time) if isinstance(time, int | float) and not isinstance(time, bool) else None
        found = []
        for report in self.profiles.at_record(step):
            found.append(Alert(when, step, report.detector, "warning", report.message, report.values, "profile"))
            self._deliver(found[-1])
        return found

    def warm(self, records: Iterable[JsonObject]) -> int:
        """A resumed run: feed the detectors the records kept from its earlier attempts, raising nothing, then mark
        the restart (``resumed``): no blind warm-up and no false alarm at the first new record. Records fed."""
        fed = 0
        with self._lock:
            for record in records:
                fed += 1
                if self._explains:
                    self.groups.observe(record)
                    self.movers.observe(record)
                for det in self.detectors:
                    try:
                        det.observe(record)
                    except Exception as exc:  # noqa: BLE001 - counted; the live records judge it again
                        internal_errors.report(f"health detector {det.name} (the run's history)", exc)
        self.resumed()
        return fed

    def resumed(self) -> None:
        """The training restarted from a checkpoint: detectors that measure time between records or skip a
        compiling first step start that part again (their ``resumed()``); the new attempt's alerts and stop are its
        own (an earlier stop and the rate limit start again: a second hang must stop the run again)."""
        with self._lock:
            self.stop = None
            self._last.clear()
            for det in self.detectors:
                hook = getattr(det, "resumed", None)
                if hook is not None:
                    hook()

    def stall_due(self, idle_s: float, last_step: int | None, step_seconds: Sequence[float]) -> float | None:
        """The stall timeout when ``check_stall`` would raise now, else None (the watcher of ``msmon run``
        captures the ranks' stacks first)."""
        with self._lock:
            stall = self.stall
            return stall.due(idle_s, last_step, step_seconds) if stall else None

    def check_stall(
        self, idle_s: float, last_step: int | None, last_end_wall: float | None, step_seconds: Sequence[float],
        now: float, detail: str | None = None, values: JsonObject | None = None,
    ) -> Alert | None:
        """The live stall check (``msmon.runner.rank_watch``): a stall alert when no step has ended for the timeout
        (``detail`` and ``values``: where it hangs, from the watcher)."""
        with self._lock:
            stall = self.stall
            signal = stall.check(idle_s, last_step, last_end_wall, step_seconds, detail, values) if stall else None
            return self._raise("stall", signal, last_step or 0, now) if signal else None

    def report(self, detector: str, signal: Signal, step: JsonValue, time: JsonValue) -> Alert | None:
        """An alert judged outside this monitor's own detectors (another rank's values, by the watcher of
        ``msmon run``): the same record, rate limit, sinks and action."""
        with self._lock:
            return self._raise(detector, signal, step, time)

    def close(self) -> None:
        """Close every sink by one shared deadline (a hung webhook and a hung command hook cost
        SINKS_CLOSE_S together, not one after the other)."""
        deadline = time.monotonic() + SINKS_CLOSE_S
        for sink in self.sinks:
            try:
                sink.close(deadline)
            except Exception as exc:  # noqa: BLE001
                logger.warning("alert sink %s failed to close: %s", type(sink).__name__, exc)

    def _raise(self, detector: str, signal: Signal, step: JsonValue, time: JsonValue) -> Alert | None:
        when = float(time) if isinstance(time, int | float) and not isinstance(time, bool) else None
        if not self._allowed(detector, signal.severity, when):
            self.suppressed += 1
            return None
        action = getattr(self.settings, detector).action
        step = step if isinstance(step, int) else -1
        context = self.context(step, detector) if self.context is not None and step >= 0 else None
        message = signal.message
        if action == "profile" and self.profiles is not None:
            rank = signal.values.get("rank")
            message += "; " + self.profiles.on_alert(detector, step, (rank,) if isinstance(rank, int) else None)
        alert = Alert(when, step, detector, signal.severity, message, signal.values, action, context,
                      signal.onset_step)
        self._deliver(alert)
        if action in ("stop", "rollback") and self.stop is None:
            anomaly = None
            if action == "rollback":  # the parent rolls the run back (msmon.runner.lifecycle)
                onset = signal.onset_step if signal.onset_step is not None else alert.step
                anomaly = Anomaly(detector, min(onset, alert.step), alert.step, signal.message)
            self.stop = StopRequest(signal.message, detector, alert.step, anomaly)
            if self.request_stop is not None:
                self.request_stop(self.stop)
        return alert

    def _deliver(self, alert: Alert) -> None:
        """Record ``alert`` and hand it to the sinks (action ``log``: the quiet ones only)."""
        self.alerts.append(alert)
        for sink in self.sinks:
            if alert.action == "log" and not sink.quiet:
                continue
            try:
                sink.handle(alert)
            except Exception as exc:  # noqa: BLE001 - an alert sink must never break training
                logger.warning("alert sink %s failed: %s", type(sink).__name__, exc)

    def _allowed(self, detector: str, severity: str, when: float | None) -> bool:
        """Per detector at most one alert per rate_limit_s; a critical one is never held back by a warning."""
        last = self._last.get(detector)
        limit = self.settings.alerts.rate_limit_s
        if last is not None and when is not None and last[0] is not None and when - last[0] < limit:
            if not (severity == "critical" and last[1] == "warning"):
                return False
        self._last[detector] = (when, severity)
        return True
