"""One executing ``msmon run``: the run directory, the training child, the board beside it, signals, run.json."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msmon import layout
from msmon.anomaly import StopRequest
from msmon.config.loader import is_quickstart
from msmon.errors import describe
from msmon.ops.backup import backup_config
from msmon.run_record import recorded, write_run_record
from msmon.runner import results, rundir, runinfo, stacks
from msmon.runner.attempts import AttemptLoop
from msmon.runner.board_beside import BoardBeside
from msmon.runner.lifecycle import Lifecycle
from msmon.runner.plan import RunPlan
from msmon.runner.protocol import RankSpec, ViewOptions
from msmon.runner.rank_watch import RankWatcher
from msmon.status import Attempt, RunStatus
from msmon.util import internal_errors, logs
from msmon.util.files import SpaceReserve
from msmon.util.mapping import dotted_get

logger = logging.getLogger("msmon")

HARD_DEADLINE_S = 30.0  # after a second signal msmon run ends within this, whatever hangs


@dataclass
class Outcome:
    """How a run ended (the CLI turns it into the last lines and the exit code)."""

    status: RunStatus
    exit_code: int
    run_dir: Path
    error: str | None = None
    last_step: int | None = None
    note: str | None = None  # a completed run that ended before its last step: why (its data exhausted)


class Run:
    """One executing run: owns the run directory, the training child, the board and the signals."""

    def __init__(self, plan: RunPlan, say: Callable[[str], None], view: ViewOptions) -> None:
        self.plan = plan
        self.say = say
        self.board = BoardBeside(plan, say)
        spec = RankSpec(
            run_dir=plan.run_dir, settings=plan.settings, attempt=Attempt(1), world_size=plan.request.worker_num or 1,
            writer_rank=plan.writer_rank, node_rank=plan.request.node_rank, view=view,
            config_path=plan.config_file,
        )
        self.monitor_stop: results.RunResult | None = None  # the rank watcher's stop
        self.watcher = RankWatcher(
            plan.run_dir, plan.settings, plan.training, pipeline=plan.pipeline, writer_rank=plan.writer_rank,
            node_rank=plan.request.node_rank, local_ranks=self._local_ranks, request_stop=self._stop_by_monitor,
        )
        self.lifecycle = Lifecycle(plan.request.max_restarts, plan.settings.health.rollback.max_rollbacks)
        self.attempts = AttemptLoop(plan, self.lifecycle, spec, react=self._react, restarted=self.restarted,
                                    monitor_stop=lambda: self.monitor_stop)
        self.reserve: SpaceReserve | None = None
        self._signals: list[int] = []
        self._handled = 0
        self._forced = threading.Event()
        self._log_handler: logging.Handler | None = None
        self._done = False
        self._previous: dict[int, Any] = {}

    # -- setup ----------------------------------------------------------------------------------
    def create(self) -> None:
        """Run directory, logs, snapshot, backup, run.json ``running``."""
        plan, run_dir = self.plan, self.plan.run_dir
        new = rundir.create_run_dir(run_dir, resume=plan.request.resume or plan.request.joins_run)
        self.reserve = SpaceReserve(run_dir / layout.RESERVE)
        logs.tolerate_unwritable_log_files()
        self._log_handler = logs.attach(logs.file_handler(run_dir / layout.MSMON_LOG))
        previous = None if new or plan.request.joins_run else recorded(run_dir)
        rundir.write_snapshot(
            run_dir, plan.loaded.text or "", plan.result.monitor_config(), plan.loaded.section("monitor_config")
        )
        self._backup()
        record = runinfo.started(
            config_path=str(plan.config_file),
            project_name=plan.settings.project_name, run_name=str(plan.settings.run_name), run_dir=run_dir,
            command=plan.request.command,
            device_target=str(dotted_get(plan.training, "context.device_target", "Ascend")),
            device_count=plan.request.worker_num or 1, total_steps=plan.result.total_steps, cwd=plan.cwd,
            pid=os.getpid(),
        )
        self.attempts.open(dataclasses.replace(
            record, launch="command" if plan.request.launch else "msmon",  # command: msmon run CONFIG -- COMMAND
            request=plan.request.resume_record().to_json()), previous)  # what msmon resume replays
        write_run_record(run_dir, self.attempts.record, plan.request.run_json)
        logger.info("msmon: run %s started in %s", plan.settings.run_name, run_dir)

    def _backup(self) -> None:
        snapshot = (self.plan.run_dir / layout.CONFIG_SNAPSHOT).resolve()
        if self.plan.config_file.resolve() == snapshot or is_quickstart(self.plan.config_file):
            return  # the run's own snapshot (msmon resume), or a quickstart shipped inside msmon
        try:
            copy = backup_config(self.plan.config_file, note=f"msmon run {self.plan.settings.run_name}")
        except Exception as exc:  # a backup failure never blocks the run
            logger.warning("msmon: config backup failed: %s", exc)
        else:
            logger.info("msmon: config backed up: %s", copy)

    # -- signals --------------------------------------------------------------------------------
    def install_signals(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore_signals(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        """Flags only (a handler that logs or waits can deadlock the process): the supervising loop reacts,
        and a second signal starts the hard deadline."""
        self._signals.append(signum)
        if len(self._signals) == 2:
            self._forced.set()

    def _stop_by_monitor(self, request: StopRequest) -> None:
        """A rank watcher alert with ``action: stop`` (or ``rollback``): every rank stops at its next step end."""
        if self.monitor_stop is None:
            self.monitor_stop = results.RunResult(RunStatus.STOPPED_BY_MONITOR, request.reason, stop=request)
            logger.warning("msmon: stopping the run: %s", request.reason)
            self.attempts.training.request_stop()

    def _local_ranks(self) -> dict[int, Any]:
        """The ranks of the current attempt's training process (each attempt has its own)."""
        return self.attempts.training.ranks()

    def restarted(self) -> None:
        """A new attempt begins: the rank watcher starts again and a stop it requested is spent."""
        self.monitor_stop = None
        self.watcher.restart(forget_heartbeats=not self.plan.request.joins_run)

    def _watch(self) -> None:
        """The rank watcher, which must never take the supervising loop down (its first failure is logged)."""
        try:
            self.watcher.poll()
        except Exception as exc:
            internal_errors.report("the rank watcher", exc)

    def _react(self) -> None:
        """The supervising loop (main thread, every poll): act on new signals, watch the ranks, notice a board
        that died."""
        while self._handled < len(self._signals):
            signum = self._signals[self._handled]
            self._handled += 1
            name = signal.Signals(signum).name
            count = self.lifecycle.signalled(signum, name)
            if count == 1:
                logger.warning("msmon: %s received: stopping at the end of the current step (again to force)", name)
                self.attempts.training.request_stop()
            elif count == 2:
                logger.warning("msmon: second %s: the training flushes and exits now", name)
                self.attempts.training.force_stop()
        if self.lifecycle.signal is None:
            self._watch()
        self.board.check()

    def _hard_deadline(self) -> None:
        """After a second signal, the process ends within HARD_DEADLINE_S whatever hangs (never with 0)."""
        self._forced.wait()
        time.sleep(HARD_DEADLINE_S)
        logger.error("msmon: still not finished %.0f s after the second signal: exiting now", HARD_DEADLINE_S)
        os._exit(self.exit_code(RunStatus.INTERRUPTED))

    # -- training -------------------------------------------------------------------------------
    def execute(self) -> Outcome:
        """Train in the child (one worker, or the ranks through msrun) and account for the end of the run."""
        if self.plan.request.board:
            self.board.start()
        threading.Thread(target=self._hard_deadline, name="msmon-hard-deadline", daemon=True).start()
        self.install_signals()
        try:
            self.attempts.run_all()
            ending = self.lifecycle.ending()
            return self.finish(ending.status, error=ending.error, killed_by=ending.killed_by, note=ending.note)
        finally:
            self.restore_signals()

    # -- the end --------------------------------------------------------------------------------
    def exit_code(self, status: RunStatus) -> int:
        return int(self.lifecycle.exit_code(status))

    def finish(self, status: RunStatus, error: str | None = None, killed_by: int | None = None,
               note: str | None = None) -> Outcome:
        """Stop the board, write the final run.json (once; the space reserved at the start is released first,
        so a full disk cannot stop it)."""
        code = self.exit_code(status)
        if self._done:
            return Outcome(status, code, self.plan.run_dir, error)
        self._done = True
        ranks = results.RankResults.read(self.plan.run_dir)
        self.watcher.close()
        stacks.remove_unused(self.plan.run_dir, sorted(ranks.by_rank))
        self.board.stop()
        record = self.attempts.record = runinfo.finished(
            self.attempts.record, ranks, status=status, exit_code=code, watcher_alerts=self.watcher.alert_count,
            error=error, internal=internal_errors.seen(), attempt_last_step=self.attempts.last_step, note=note)
        if self.reserve is not None:
            self.reserve.release()
        try:
            write_run_record(self.plan.run_dir, record, self.plan.request.run_json)
        except OSError as exc:
            logger.error("msmon: cannot write %s: %s", self.plan.run_dir / self.plan.request.run_json, describe(exc))
        logger.info("msmon: run ended: %s (exit %d, last step %s)", status, code, record.last_step)
        self._tell_the_chat(status, int(code), error, killed_by)
        if self._log_handler is not None:
            logs.detach(self._log_handler)
            self._log_handler = None
        return Outcome(status, code, self.plan.run_dir, error, record.last_step, note)


    def _tell_the_chat(self, status: RunStatus, code: int, error: str | None, killed_by: int | None) -> None:
        """The run-ended message to every chat robot (node 0 only), from this process, which outlives the
        training: a training killed by SIGKILL or the OOM killer is reported too."""
        alerts = self.plan.settings.health.alerts
        if not alerts.chat or self.plan.request.joins_run:
            return
        from msmon.health.chat.sink import ended_message, send_ended

        record = self.attempts.record
        message = ended_message(self.plan.run_dir, status, code, record.last_step, record.total_steps,
                                record.alert_count or 0, error, killed_by)
        send_ended(alerts.chat, self.plan.run_dir, message, alerts.webhook_timeout_s)


def run(plan: RunPlan, say: Callable[[str], None], view: ViewOptions) -> Outcome:
    """Create the run directory and execute the plan (``view``: how the writing rank shows progress); always ends
    with a final run.json."""
    current = Run(plan, say, view)
    current.create()
    say(f"run directory: {plan.run_dir}")
    return current.execute()
