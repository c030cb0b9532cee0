"""The training process of ``msmon run`` (one per rank): train with msmon's callback, leave a result file.

Started by the parent ``msmon run`` (directly, or through msrun for ``--worker-num``) as
``python -m msmon.runner.worker`` with ``MSMON_WORKER_SPEC`` in the environment.
SIGTERM/SIGINT: stop at the next step end; a second one (or the parent's request, ``layout.rank_force_request``):
the shutdown thread closes the session with short budgets, leaves the result and exits (130/143), at the latest
after ``FORCED_EXIT_S``. The signal handler itself only sets flags and wakes that thread: it may run on the
training thread at any point, even while it holds a lock of the monitor.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TextIO, cast

import psutil
import yaml

from msmon import layout
from msmon.anomaly import StopRequest
from msmon.config.schema import MonitorSettings
from msmon.errors import ExitCode, describe
from msmon.foreign import Callback, ConfigValue
from msmon.runner import stacks
from msmon.runner.console import Console, capture_console, show_progress
from msmon.runner.protocol import BackendAccounting, RankResult, RankSpec, SpecError, write_result
from msmon.status import RunStatus, exit_code, rank_exit_code
from msmon.util import internal_errors, logs
from msmon.util.files import SpaceReserve
from msmon.util.procs import exit_now
from msmon.view.progress import PlainView

if TYPE_CHECKING:  # imported where the session starts, after the framework
    from msmon.engine.session import MonitorSession
    from msmon.health import HealthHandle

CHILD_GRACE_S = 5.0  # this process's children (MindSpore's summary writer pool) get this long to exit
EXIT_GUARD_S = 10.0  # MindSpore's exit handlers get this long before the process ends anyway
FORCED_BUDGET_S = 2.0  # after a second signal every backend gets at most this long to close
FORCED_EXIT_S = 8.0  # after a second signal the process ends within this, whatever hangs
FORCE_POLL_S = 1.0  # how often the shutdown thread looks for the parent's request to flush and exit now

logger = logging.getLogger("msmon")


class Worker:
    """One training process: session, health, live view, the Trainer, and its result file."""

    def __init__(self, spec: RankSpec, *, own_process: bool = True) -> None:
        self.spec = spec
        # False in a user's process (msmon run CONFIG -- COMMAND): its children are its own, never reaped here
        self.own_process = own_process
        # a launch msmon did not write (msmon run CONFIG -- COMMAND) may start ranks msmon could not count
        self.world_size = spec.world_size if spec.world_size > 1 else int(os.environ.get("MS_WORKER_NUM") or 1)
        # msrun exports RANK_ID; a single process is rank 0 whatever the environment says
        self.rank = int(os.environ.get("RANK_ID", "0")) if self.world_size > 1 else 0
        # msrun's scheduler runs the same command; MindSpore serves the cluster inside init(): no monitoring there
        self.scheduler = os.environ.get("MS_ROLE") == "MS_SCHED"
        self.writer_rank = spec.writer_rank
        self.run_dir = spec.run_dir
        self.session: MonitorSession | None = None
        self.health: HealthHandle | None = None
        self.console: Console | None = None
        self.reserve: SpaceReserve | None = None
        self.signalled: str | None = None
        self.forced_by: str | None = None
        self._force = threading.Event()
        self._force_request: Path | None = None  # layout.rank_force_request, looked for by the shutdown thread
        self._finishing = threading.Lock()
        self._written = False
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}
        self.training: dict[str, ConfigValue] = {}  # mindformers.yaml, once monitor() read it

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Flags only (and one wake-up): a first signal asks the training to stop at the next step end, a
        second one wakes the shutdown thread."""
        name = signal.Signals(signum).name
        if self.signalled is None:
            self.signalled = name
            if self.session is not None:
                self.session.request_stop(StopRequest(f"signal {name}"))
                return
            raise KeyboardInterrupt  # nothing to flush yet: leave model building at once
        self.forced_by = name
        self._force.set()

    def _shutdown_when_forced(self) -> None:
        """The shutdown thread: after a second signal, or the parent's request (this rank waits in a step's
        collective for a rank that ended: its training thread runs no signal handler there), account for the run
        with short budgets and exit."""
        request = self._force_request
        while not self._force.wait(FORCE_POLL_S):
            if request is not None and request.exists():
                break
        if self.forced_by is not None:
            why, name = f"a second {self.forced_by}", self.forced_by
        else:  # the parent's request follows the SIGTERM of its stop
            why, name = "msmon run: a rank that ended never takes part in the step this rank began", "SIGTERM"
        code = int(exit_code(RunStatus.INTERRUPTED, signal.Signals[name]))
        deadline = threading.Timer(FORCED_EXIT_S, os._exit, args=(code,))
        deadline.daemon = True
        deadline.start()
        logger.warning("forced by %s: closing the monitor now and exiting", why)
        self.finish(RunStatus.INTERRUPTED, f"forced by {why}", FORCED_BUDGET_S)
        os._exit(code)

    def begin(self) -> None:
        """Before the training: this rank's log, the writing rank's output captured (msmon's own process: before
        the framework writes a line), stacks on request, the reserved space, the signal handlers."""
        self._logging()
        if self.own_process and not self.scheduler and self.rank == self.writer_rank:
            self._capture()
        if not self.scheduler:
            stacks.register(self.run_dir, self.rank)
        self.reserve = SpaceReserve(self.run_dir / layout.LOGS / f".reserve.rank_{self.rank}")
        if not self.scheduler:
            self._force_request = layout.rank_force_request(self.run_dir, self.rank)
            self._force_request.unlink(missing_ok=True)  # an earlier attempt's, where no parent cleared logs/
        threading.Thread(target=self._shutdown_when_forced, name="msmon-shutdown", daemon=True).start()
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._on_signal)

    def monitor(self) -> list[Callback]:
        """Open this rank's session (and health, on the writing rank): the callbacks to hand the Trainer."""
        settings = self.spec.settings
        self.stderr.setLevel(logging.INFO if settings.verbose else logging.WARNING)
        self.training = yaml.safe_load(self.spec.mindformers_yaml.read_text(encoding="utf-8"))
        self._open_session(settings, self.training)
        return [self.session.callback()] if self.session is not None else []

    def end(self, exc: BaseException | None) -> RunStatus:
        """After the training (``exc``: what it raised): this rank's status, its result, the signals given back."""
        status, error = RunStatus.COMPLETED, None
        if isinstance(exc, KeyboardInterrupt) or (exc is not None and self.signalled is not None):
            status = RunStatus.INTERRUPTED
        elif exc is not None:
            status, error = RunStatus.FAILED, describe(exc)
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            logger.error("training failed on rank %d:\n%s", self.rank, text, extra={"file_only": True})
        elif self.signalled is not None:
            status = RunStatus.INTERRUPTED
        elif self.session is not None and self.session.stop is not None:
            status, error = RunStatus.STOPPED_BY_MONITOR, self.session.stop.reason
        self.finish(status, error)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        return status

    def run(self) -> int:
        """The native form: train from ``mindformers.yaml`` as run_mindformer.py does."""
        from msmon.runner.trainer import import_framework, serve_cluster, train

        log_dir = self.run_dir / layout.LOGS
        self.begin()
        failure: BaseException | None = None
        try:
            if self.scheduler:
                serve_cluster()
            else:
                import_framework(log_dir)
                train(self.spec.mindformers_yaml, self.monitor(), log_dir)
        except (KeyboardInterrupt, Exception) as exc:
            failure = exc
        return int(rank_exit_code(self.end(failure)))

    def _logging(self) -> None:
        logs.tolerate_unwritable_log_files()
        prefix = f"[rank {self.rank}] " if self.world_size > 1 else ""
        self.stderr = logs.attach(logs.console_handler(logging.WARNING, prefix))
        if self.scheduler:  # msrun's scheduler: its own log (a second node's scheduler on the same host fails)
            path, prefix = layout.scheduler_log(self.run_dir, self.spec.node_rank), "[scheduler] "
        else:
            path, prefix = layout.rank_log(self.run_dir, self.rank), f"[rank {self.rank}] "
        logs.attach(logs.file_handler(path, prefix))

    def _capture(self) -> None:
        """The writing rank's output captured (msmon.runner.console); msmon's own lines go to the screen."""
        self.console = capture_console(self.spec.view, self.run_dir / layout.CONSOLE_LOG)
        self.stderr.setStream(cast(TextIO, self.console.screen))

    def _add_view(self, verbose: bool) -> None:
        """The writing rank's progress (msmon.runner.console.show_progress); in a user's own launch its output is
        captured from here, and only on a terminal (its process, its output)."""
        if self.rank != self.writer_rank or self.session is None:
            return
        if self.console is None and (sys.stdout.isatty() or sys.stderr.isatty()):
            self._capture()
        if self.console is None:
            self.session.add_listener(PlainView(self.spec.view.total_steps, verbose=verbose))
            return
        self.session.add_listener(show_progress(self.spec.view, self.console, verbose=verbose))

    def _open_session(self, settings: MonitorSettings, training: dict[str, ConfigValue]) -> None:
        if self.scheduler or not (settings.enable_monitor and settings.use_callback):
            return
        from msmon.engine.session import MonitorSession

        self.session = MonitorSession(
            settings, self.run_dir, config=training, rank=self.rank, world_size=self.world_size,
            writer_rank=self.writer_rank, attempt=self.spec.attempt, heartbeat_dir=self.spec.heartbeat_dir,
        ).start()
        self._add_view(settings.verbose)
        if self.rank != self.writer_rank:
            return
        from msmon.health import attach

        # the stall is watched by the parent `msmon run` over every rank's heartbeat (msmon.runner.rank_watch)
        self.health = attach(self.session, settings, self.run_dir, training, stall=False)

    def finish(self, status: RunStatus, error: str | None, budget_cap_s: float | None = None) -> None:
        """Close the monitor and leave this rank's result (once). The space reserved at the start is released
        first, so a full disk cannot stop the result file."""
        if self.scheduler:
            return
        forced = budget_cap_s is not None
        result = RankResult(self.rank, status, error, pid=os.getpid())
        if not self._finishing.acquire(timeout=budget_cap_s if budget_cap_s is not None else -1):
            self._write_result(result)  # the normal end is stuck: account without it
            return
        try:
            if self._written:
                return
            if self.session is not None:
                summary = self.session.close(status, budget_cap_s)
                accounting = BackendAccounting(summary.backends, summary.records_lost,
                                               tuple(summary.backends_failed_to_close))
                result = dataclasses.replace(result, last_step=summary.last_step,
                                             dropped_records=summary.dropped_records, accounting=accounting)
            if self.health is not None:
                self.health.close()
                result = dataclasses.replace(result, alert_count=self.health.alert_count)
                if status in (RunStatus.STOPPED_BY_MONITOR, RunStatus.COMPLETED) and self.health.monitor is not None:
                    result = dataclasses.replace(result, stop=self.health.monitor.stop)  # at the last step too
            if self.console is not None:  # the panel is closed: the terminal gets its descriptors back
                self.console.capture.stop()
                self.stderr.setStream(sys.stderr)
                counts = self.console.capture.counts
                result = dataclasses.replace(result, framework_warnings=counts.warnings,
                                             framework_errors=counts.errors)
            self._write_result(result)
            self._written = True
        finally:
            self._finishing.release()
        if not forced and self.own_process:
            reap_children(CHILD_GRACE_S)

    def _write_result(self, result: RankResult) -> None:
        if self.reserve is not None:
            self.reserve.release()
        result = dataclasses.replace(result, internal_errors=internal_errors.seen())
        try:
            write_result(self.run_dir, result)
        except OSError as exc:
            logger.error("cannot write this rank's result %s: %s", layout.rank_result(self.run_dir, self.rank),
                         describe(exc))


def reap_children(grace_s: float) -> None:
    """Wait a little for this process's children (MindSpore's summary writer pool), then kill what is left."""
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for proc in alive:
        logger.warning("child process %d did not exit within %.0f s: killed", proc.pid, grace_s)
        try:
            proc.kill()
        except psutil.Error:
            continue


def main() -> int:
    try:
        spec = RankSpec.from_env(os.environ)
    except SpecError as exc:
        print(f"msmon worker: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    code = Worker(spec).run()
    # exit_now runs MindSpore's exit handlers (its cluster and its resources left cleanly); if they hang, end anyway.
    guard = threading.Timer(EXIT_GUARD_S, os._exit, args=(code,))
    guard.daemon = True
    guard.start()
    return code


if __name__ == "__main__":
    exit_now(main())
