"""Training health: detectors, alerts and actions (the live stall judgement: ``msmon.runner.rank_watch``).

``attach(session, settings, run_dir, config)`` wires it into a MonitorSession; ``replay`` runs the
same HealthMonitor over a recorded run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from msmon import layout
from msmon.compat.parallel import global_batch_size
from msmon.config.schema import MonitorSettings
from msmon.foreign import ConfigValue
from msmon.health.monitor import HealthMonitor, Sink
from msmon.health.probe_trigger import DistributionsOnAlert
from msmon.health.probed_steps import TIMING_DETECTORS, ProbedSteps
from msmon.health.profile_action import ProfileAction, profile_action_on
from msmon.health.sinks import AlertFile, BackendSink, CommandSink, ConsoleSink, WebhookSink
from msmon.listener import Listener
from msmon.reference.band import reference_band
from msmon.util.jsonfiles import JsonObject

__all__ = ["HealthHandle", "HealthMonitor", "attach"]


class HealthHandle:
    """What ``attach`` returns: the alert count and an idempotent ``close``."""

    def __init__(self, monitor: HealthMonitor | None) -> None:
        self.monitor = monitor
        self._closed = False

    @property
    def alert_count(self) -> int:
        return self.monitor.alert_count if self.monitor is not None else 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.monitor is not None:
            self.monitor.close()


class StepsKnown(Protocol):
    """How far the data lets the run go (the session's step progress)."""

    total_steps: int | None


class FollowedSession(Protocol):
    """What health needs of the session it follows (msmon.engine.session.MonitorSession: health does not import the
    engine); ``attach`` reads its optional parts (flight recorder, world size, attempt, stop request) when present."""

    @property
    def progress(self) -> StepsKnown: ...

    def add_listener(self, listener: Listener) -> None: ...


class _Listener(Listener):
    """The session listener: hands records to the monitor (writer thread) and closes the handle."""

    def __init__(self, handle: HealthHandle, progress: StepsKnown) -> None:
        self.handle = handle
        self.progress = progress

    def on_record(self, record: JsonObject) -> None:
        monitor = self.handle.monitor
        if monitor is not None:
            monitor.set_total_steps(getattr(self.progress, "total_steps", None))
            monitor.on_record(record)

    def close(self) -> None:
        self.handle.close()


def make_sinks(settings: MonitorSettings, run_dir: Path, session: FollowedSession | None) -> list[Sink]:
    """alerts.jsonl, the console, the backends, the histograms after an alert, and the optional webhook, command hook
    and chat robots."""
    alerts = settings.health.alerts
    sinks: list[Sink] = [AlertFile(Path(run_dir) / layout.ALERTS), ConsoleSink()]
    if session is not None and hasattr(session, "emit_alert"):
        sinks.append(BackendSink(session.emit_alert))
    if alerts.webhook_url:
        sinks.append(WebhookSink(alerts.webhook_url, alerts.webhook_timeout_s, alerts.queue_size))
    if alerts.command:
        sinks.append(CommandSink(alerts.command, alerts.command_timeout_s, alerts.queue_size))
    probes = getattr(getattr(session, "probes", None), "run_dir", None)  # where the ranks take probe requests
    if alerts.distributions_logs and probes is not None:
        sinks.append(DistributionsOnAlert(Path(probes), alerts.distributions_logs, getattr(session, "world_size", 1)))
    if alerts.chat:
        from msmon.health.chat.sink import ChatSink

        sinks.extend(ChatSink(target, Path(run_dir), alerts.webhook_timeout_s, alerts.queue_size)
                     for target in alerts.chat)
    return sinks


def attach(session: FollowedSession, settings: MonitorSettings, run_dir: str | Path,
           config: Mapping[str, ConfigValue] | None = None, *,
           stall: bool = True) -> HealthHandle:
    """Add the health listener to ``session`` (``settings``: MonitorSettings).

    A hang is judged from outside the hung process: under ``msmon run`` its parent reads every rank's heartbeat and
    owns the stall alert (``stall`` false here, so the gap check between records raises no second one). Used as a
    library (``stall`` true), the stall detector finds a hang as a time gap between two records, as replay does."""
    health = settings.health
    if not health.enabled:
        return HealthHandle(None)
    recorder = getattr(session, "flight_recorder", None)  # the window before each alert, written to context/
    reference = settings.reference  # loaded in the writing rank before its first step
    batch = global_batch_size(config, getattr(session, "world_size", 1)) if config else None
    # action profile: this rank's detectors of slow steps, and the baseline profile (docs/probe.md)
    profiles = ProfileAction(Path(run_dir), health, TIMING_DETECTORS, baseline=True,
                             min_free_mb=settings.disk.min_free_mb) if profile_action_on(health) else None
    monitor = HealthMonitor(health, config, sinks=make_sinks(settings, Path(run_dir), session),
                            request_stop=getattr(session, "request_stop", None),
                            context=recorder.dump if recorder is not None else None, stall=stall,
                            reference=reference_band(reference.runs, reference.tags, health.reference_drift, batch),
                            profiles=profiles, probed=ProbedSteps(Path(run_dir), live=True))
    attempt = getattr(session, "attempt", None)  # a resumed attempt: the detectors start warm
    if attempt is not None and attempt.resumed_from_step:  # a resumed run: the detectors start warm
        from msmon.health.replay import history

        monitor.warm(history(Path(run_dir), attempt.resumed_from_step))
    progress = session.progress
    handle = HealthHandle(monitor)
    session.add_listener(_Listener(handle, progress))
    return handle
