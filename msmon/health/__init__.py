"""Training health: detectors, the stall watchdog, alerts and actions.

``attach(session, settings, run_dir, config)`` wires it into a MonitorSession; ``replay`` runs the
same HealthMonitor over a recorded run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msmon.health.monitor import HealthMonitor, Sink
from msmon.health.sinks import AlertFile, BackendSink, CommandSink, ConsoleSink, WebhookSink
from msmon.health.watchdog import Watchdog

__all__ = ["HealthHandle", "HealthMonitor", "attach"]


class HealthHandle:
    """What ``attach`` returns: the alert count and an idempotent ``close``."""

    def __init__(self, monitor: HealthMonitor | None, watchdog: Watchdog | None) -> None:
        self.monitor = monitor
        self.watchdog = watchdog
        self._closed = False

    @property
    def alert_count(self) -> int:
        return self.monitor.alert_count if self.monitor is not None else 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.monitor is not None:
            self.monitor.close()


class _Listener:
    """The session listener: hands records to the monitor (writer thread) and closes the handle."""

    def __init__(self, handle: HealthHandle, progress: Any) -> None:
        self.handle = handle
        self.progress = progress

    def on_record(self, record: dict[str, Any]) -> None:
        monitor = self.handle.monitor
        if monitor is not None:
            monitor.set_total_steps(getattr(self.progress, "total_steps", None))
            monitor.on_record(record)

    def close(self) -> None:
        self.handle.close()


def make_sinks(settings: Any, run_dir: Path, session: Any) -> list[Sink]:
    """alerts.jsonl, the console, the backends, and the optional webhook and command hook."""
    alerts = settings.health.alerts
    sinks: list[Sink] = [AlertFile(Path(run_dir) / "alerts.jsonl"), ConsoleSink()]
    if hasattr(session, "emit_alert"):
        sinks.append(BackendSink(session.emit_alert))
    if alerts.webhook_url:
        sinks.append(WebhookSink(alerts.webhook_url, alerts.webhook_timeout_s, alerts.queue_size))
    if alerts.command:
        sinks.append(CommandSink(alerts.command, alerts.command_timeout_s, alerts.queue_size))
    return sinks


def attach(session: Any, settings: Any, run_dir: str | Path, config: Mapping[str, Any] | None = None) -> HealthHandle:
    """Add the health listener to ``session`` and start the stall watchdog (``settings``: MonitorSettings)."""
    health = settings.health
    if not health.enabled:
        return HealthHandle(None, None)
    monitor = HealthMonitor(health, config, sinks=make_sinks(settings, Path(run_dir), session),
                            request_stop=getattr(session, "request_stop", None))
    progress = session.progress
    watchdog = None
    if health.stall.enabled:
        watchdog = Watchdog(monitor, progress, poll_s=health.stall.poll_s, log_interval=settings.log_interval)
    handle = HealthHandle(monitor, watchdog)
    session.add_listener(_Listener(handle, progress))
    if watchdog is not None:
        watchdog.start()
    return handle
