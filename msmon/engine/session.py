"""MonitorSession: wires the callback -> writer -> backends + listeners, heartbeat and disk guard."""

from __future__ import annotations

import atexit
import errno
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from msmon.anomaly import StopRequest
from msmon.config.schema import MonitorSettings
from msmon.engine.backend_runner import BackendRunner
from msmon.engine.backend_thread import backend_threads
from msmon.engine.backends import backend_class
from msmon.engine.backends.base import Backend
from msmon.engine.callback import StepObserver, make_callback
from msmon.engine.diskguard import DiskGuard
from msmon.engine.flight import FlightRecorder
from msmon.engine.probe.runner import ProbeRunner
from msmon.engine.rank_heartbeat import RankHeartbeat
from msmon.engine.record import ConsoleLines, StepProgress, canonical_metrics
from msmon.engine.writer import Writer
from msmon.errors import describe
from msmon.foreign import Callback, ConfigValue
from msmon.listener import Listener, SessionStatus
from msmon.status import Attempt, RunStatus
from msmon.util.jsonfiles import JsonObject

logger = logging.getLogger("msmon")


@dataclass
class SessionSummary:
    """What the monitor did during the run (the runner copies ``dropped_records`` into run.json)."""

    dropped_records: int = 0
    records_written: int = 0
    last_step: int = 0
    last_record: JsonObject | None = None
    records_lost: int | None = None  # records metrics.jsonl (the file backend) did not keep; None without it
    backends: dict[str, JsonObject] = field(default_factory=dict)
    backends_failed_to_close: list[str] = field(default_factory=list)
    disk_guard: str | None = None


class MonitorSession:
    """One run's monitor: ``start()``, hand ``callback()`` to training, ``close(status)`` at the end."""

    def __init__(
        self,
        settings: MonitorSettings,
        run_dir: str | Path,
        *,
        config: Mapping[str, ConfigValue] | None = None,
        rank: int = 0,
        world_size: int = 1,
        writer_rank: int = 0,
        listeners: Iterable[Listener] = (),
        attempt: Attempt | None = None,
        heartbeat_dir: Path | None = None,
    ) -> None:
        self.settings = settings
        self.attempt = attempt  # the run's attempt (msmon run's spec); None: the first, from the start
        self.rank = rank
        self.world_size = world_size
        self.config = config
        per_rank = settings.writer.per_rank
        # one rank writes the metrics (``writer_rank``: 0, or the first rank holding the loss under pipeline stages)
        self.writes = settings.enable_monitor and (rank == writer_rank or per_rank)
        self.run_dir = Path(run_dir) / f"rank_{rank}" if per_rank and rank else Path(run_dir)
        self.progress = StepProgress()
        self.stop: StopRequest | None = None
        self._metrics = canonical_metrics(settings.track_metrics)
        self.rank_heartbeat = RankHeartbeat(Path(run_dir), self.progress, rank, log_interval=settings.log_interval,
                                           directory=heartbeat_dir)
        self.disk_guard = DiskGuard(self.run_dir, settings.disk, on_trip=self._stop_heavy_outputs)
        self._callback: Callback = None
        self._observer: StepObserver | None = None
        # every rank takes probe requests (msmon probe) from the run directory itself (docs/probe.md)
        self.probes = ProbeRunner(Path(run_dir), rank, config, settings.log_interval) if settings.enable_monitor \
            else None
        # flight recorder (issue 13): filled by the callback, dumped by health on an alert (msmon.health.attach)
        steps = settings.flight_recorder.steps
        self.flight_recorder = FlightRecorder(self.run_dir, settings.flight_recorder) if self.writes and steps else None
        self._summary: SessionSummary | None = None
        self._close_lock = threading.Lock()
        self._started = False
        threads = backend_threads(self._make_backends(), settings.writer.queue_size) if self.writes else []
        own: list[Listener] = [ConsoleLines()] if settings.verbose else []
        own += [self.disk_guard] if self.writes else []
        self.writer = Writer(threads, [*own, self.rank_heartbeat, *listeners], settings.writer.queue_size,
                             status=self.status)
        for runner in self.writer.runners:
            runner.on_failure = self._on_backend_failure

    def _make_backends(self) -> list[Backend]:
        backends = []
        for name in dict.fromkeys(self.settings.monitor_type):
            try:
                backend = backend_class(name)(self.run_dir, self.settings, dict(self.config or {}))
                backend.attempt = self.attempt
                backends.append(backend)
            except Exception as exc:  # a monitor never breaks training
                logger.warning("msmon: backend '%s' is not used: %s", name, describe(exc))
        return backends

    @property
    def backend_names(self) -> list[str]:
        return [runner.backend.name for runner in self.writer.runners]

    def start(self) -> MonitorSession:
        """Start the writer thread and the backends' worker threads (they open the backends)."""
        if not self._started:
            self._started = True
            if self.writes:
                try:
                    self.run_dir.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    logger.warning("msmon: cannot create %s: %s (training continues)", self.run_dir, describe(exc))
            for runner in self.writer.runners:
                runner.prepare()
            self.writer.start()
            self.rank_heartbeat.start()
            atexit.register(self._close_at_exit)
        return self

    def callback(self) -> Callback:
        """The MindSpore Callback for this session (the same object on every call)."""
        if self._callback is None:
            self._observer = observer = StepObserver(
                self.settings, self.progress, self.writer.put if self.settings.enable_monitor else None, self,
                rank=self.rank, world_size=self.world_size, config=self.config, reduced=not self.writes,
                flight=self.flight_recorder, probes=self.probes,
            )
            self._callback = make_callback(observer)
            if self.settings.verbose:
                logger.info(
                    "msmon: Monitor callback registered successfully: backends=%s metrics=%s log_interval=%d "
                    "run_dir=%s",
                    ",".join(self.backend_names) or "none", ",".join(self._metrics), self.settings.log_interval,
                    self.run_dir,
                )
        return self._callback

    def add_listener(self, listener: Listener) -> None:
        """A consumer of the record stream, called on the writer thread (msmon.listener)."""
        self.writer.add_listener(listener)

    def emit_alert(self, alert: JsonObject) -> None:
        """Show an alert in the backends that can show text and hand it to the listeners."""
        self.writer.emit_alert(alert)

    @property
    def dropped_records(self) -> int:
        """Records dropped so far: the callback's queue and every backend's."""
        return self.writer.queue.dropped + sum(runner.dropped for runner in self.writer.runners)

    def status(self) -> SessionStatus:
        """Where the run is, for listeners (called on the writer thread)."""
        progress = self.progress
        return SessionStatus(progress.last_step, progress.last_end_wall, progress.total_steps, self.dropped_records)

    def request_stop(self, request: StopRequest) -> None:
        """Ask training to stop gracefully at the next step end (the first request is kept)."""
        if self.stop is None:
            self.stop = request

    def close(self, status: str = RunStatus.COMPLETED, budget_cap_s: float | None = None) -> SessionSummary:
        """Flush everything, close the backends (each within its own budget, ``budget_cap_s`` shortening them)
        and the listeners; safe to call more than once. ``status``: the run's final status (a RunStatus value;
        ValueError otherwise)."""
        status = RunStatus(status)
        with self._close_lock:
            if self._summary is not None:
                return self._summary
            atexit.unregister(self._close_at_exit)
            if self._observer is not None:  # the training raised: no train end cut its probe window short
                self._observer.end()
            late = self.writer.close(status, budget_cap_s) if self._started else []
            if self._started:
                self.rank_heartbeat.stop(status)
            self._summary = self._make_summary(late)
            return self._summary

    def _close_at_exit(self) -> None:
        self.close(RunStatus.INTERRUPTED)

    def _make_summary(self, late: list[str]) -> SessionSummary:
        stats = [runner.stats for runner in self.writer.runners]
        return SessionSummary(
            dropped_records=self.dropped_records,
            records_written=max((s.written for s in stats), default=0),
            last_step=self.progress.last_step,
            last_record=self.writer.last_record,
            records_lost=next((s.lost + s.dropped for s in stats if s.name == "file"), None),
            backends={s.name: s.summary() for s in stats},
            backends_failed_to_close=late,
            disk_guard=self.disk_guard.reason,
        )

    # -- writer thread --------------------------------------------------------------------------
    def _on_backend_failure(self, runner: BackendRunner, exc: BaseException) -> None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            self.disk_guard.trip(f"backend '{runner.backend.name}' hit ENOSPC (no space left on device)")

    def _stop_heavy_outputs(self, reason: str) -> None:
        """The disk guard tripped: the heavy backends stop, metrics.jsonl goes on."""
        heavy = [runner for runner in self.writer.runners if runner.backend.heavy and runner.active]
        for runner in heavy:
            runner.suspend(reason)
        if self.probes is not None:  # profiles are heavy outputs too
            self.probes.disk_guard_tripped(reason)
        stopped = ", ".join(runner.backend.name for runner in heavy) or "nothing (no heavy backend in use)"
        logger.warning(
            "msmon: disk guard: %s; stopped writing %s; metrics.jsonl and training continue "
            "(free space, or change monitor_config.disk)",
            reason, stopped,
        )
