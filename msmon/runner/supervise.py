"""One executing ``msmon run``: the ``Supervisor`` in the parent process, which owns the run directory, run.json, the
attempt loop, the user's signals, each attempt's training process, the rank watcher and the board beside them.

It asks the run's ``Lifecycle`` (runner/lifecycle.py, pure) what to do at every turn (a signal, an attempt's end, a
due restart or rollback) and does it; calls go one way, down: the training process, the watcher and the lifecycle
never call back. Each attempt's rank results are read once, when its training process ended (``RankResults``), and
handed on: to the attempt's status, its run.json entry and, for the last attempt, the run's end.
"""

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
from types import FrameType

from msmon import layout
from msmon.anomaly import Anomaly
from msmon.config.loader import is_quickstart
from msmon.errors import describe
from msmon.ops.backup import backup_config
from msmon.run_record import AttemptReason, RunRecord, recorded, write_run_record
from msmon.runner import attempts, rollback, rundir, runinfo, stacks
from msmon.runner.attempt_entries import carried_over, replace_last
from msmon.runner.board_beside import BoardBeside
from msmon.runner.checkpoints import ResumePoint, latest_checkpoint
from msmon.runner.lifecycle import Lifecycle, SignalAction
from msmon.runner.machine_beats import MachineBeats
from msmon.runner.plan import RunPlan
from msmon.runner.protocol import RankSpec, ViewOptions
from msmon.runner.rank_watch import RankWatcher
from msmon.runner.results import RankResults, RunResult
from msmon.runner.resume import training_layout
from msmon.runner.training_process import TrainingProcess
from msmon.status import Attempt, RunStatus
from msmon.util import internal_errors, logs
from msmon.util.files import SpaceReserve
from msmon.util.jsonfiles import JsonObject
from msmon.util.mapping import dotted_get

logger = logging.getLogger("msmon")

HARD_DEADLINE_S = 30.0  # after a second signal msmon run ends within this, whatever hangs
POLL_S = 0.2


@dataclass
class Outcome:
    """How a run ended (the CLI turns it into the last lines and the exit code)."""

    status: RunStatus
    exit_code: int
    run_dir: Path
    error: str | None = None
    note: str | None = None  # a completed run that ended before its last step: why (its data exhausted)


class SignalInbox:
    """The user's SIGINT / SIGTERM as they arrive. The handler only appends (a handler that logs or waits can
    deadlock the process); the supervisor takes each once, in order; the second received starts the hard deadline
    at once, whatever the supervising loop is doing."""

    def __init__(self) -> None:
        self._received: list[int] = []
        self._taken = 0
        self.forced = threading.Event()
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._received.append(signum)
        if len(self._received) == 2:
            self.forced.set()

    def take(self) -> list[int]:
        """The signals received since the last call."""
        new = self._received[self._taken:]
        self._taken += len(new)
        return new


class Supervisor:
    """The parent of one run: creates the run directory and run.json, runs the attempts as the lifecycle decides,
    reacts to signals and to the rank watcher, and writes the final run.json."""

    def __init__(self, plan: RunPlan, say: Callable[[str], None], view: ViewOptions) -> None:
        self.plan = plan
        self.say = say
        self.record = RunRecord()
        self.board = BoardBeside(plan, say)
        launch = plan.request.launch_layout
        local = layout.local_heartbeats(plan.run_dir, launch.node_rank or 0) if launch.spans_machines else None
        self.machine_beats = MachineBeats(plan.run_dir, launch.node_rank or 0, local) if local else None
        self.base_spec = RankSpec(
            run_dir=plan.run_dir, settings=plan.settings, attempt=Attempt(1), world_size=launch.world_size,
            writer_rank=plan.writer_rank, node_rank=launch.node_rank, view=view,
            config_path=plan.config_file, heartbeat_dir=local,
        )
        self.watcher = RankWatcher(plan.run_dir, plan.settings, plan.training, pipeline=plan.pipeline,
                                   writer_rank=plan.writer_rank, node_rank=launch.node_rank)
        self.lifecycle = Lifecycle(plan.request.max_restarts, plan.settings.health.rollback.max_rollbacks)
        self.policy = attempts.RestartPolicy(plan.request.max_restarts, plan.request.restart_backoff_s)
        self.signals = SignalInbox()
        self._training: TrainingProcess | None = None  # the current attempt's, from create on
        self.monitor_stop: RunResult | None = None  # the stop the rank watcher asked of the current attempt
        self.attempt_started = time.time()
        self.attempt_last_step: int | None = None
        self._watcher_alerts_counted = 0  # the rank watcher's alerts already in a closed attempt's count
        self.reserve: SpaceReserve | None = None
        self._log_handler: logging.Handler | None = None
        self._done = False

    # -- setup ----------------------------------------------------------------------------------
    def create(self) -> None:
        """Run directory, logs, snapshot, backup, run.json ``running`` with the first attempt of this ``msmon run``
        (after the attempts and rollbacks an earlier run.json of the directory lists; from ``plan.resume_point``
        with --resume)."""
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
            device_count=plan.request.launch_layout.world_size, total_steps=plan.result.total_steps, cwd=plan.cwd,
            pid=os.getpid(),
        )
        earlier = carried_over(previous)
        self.record = dataclasses.replace(
            record, launch="command" if plan.request.launch else "msmon",  # command: msmon run CONFIG -- COMMAND
            request=plan.request.resume_record().to_json(),  # what msmon resume replays
            layout=training_layout(plan.training, plan.request.launch_layout.world_size),
            attempts=earlier, rollbacks=previous.rollbacks if previous is not None else (),
            start_time=(previous.start_time if earlier and previous is not None else None) or record.start_time)
        point = plan.resume_point
        self._begin(point, AttemptReason.RESUME if point else AttemptReason.START, supersede=point is not None)
        write_run_record(run_dir, self.record, plan.request.run_json)
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

    def _begin(self, point: ResumePoint | None, reason: AttemptReason, *, supersede: bool) -> None:
        """A new attempt: its files and run.json entry, its training process; after an earlier attempt
        (``supersede``) the rank watcher starts again and a stop it asked is spent."""
        if supersede:
            self.monitor_stop = None
            if self.machine_beats is not None:
                self.machine_beats.clear()
            self.watcher.restart(forget_heartbeats=not self.plan.request.joins_run)
        self.record, attempt = attempts.prepare_attempt(self.plan, self.record, point, reason, supersede=supersede)
        self._training = TrainingProcess(self.plan.request, dataclasses.replace(self.base_spec, attempt=attempt))
        self.attempt_started = time.time()

    @property
    def training(self) -> TrainingProcess:
        """The current attempt's training process."""
        if self._training is None:
            raise RuntimeError("no attempt has begun (create the run first)")
        return self._training

    def _write(self) -> None:
        try:
            write_run_record(self.plan.run_dir, self.record, self.plan.request.run_json)
        except OSError as exc:
            logger.warning("msmon: cannot update %s: %s", layout.RUN_JSON, exc)

    # -- the supervising loop -------------------------------------------------------------------
    def _react(self) -> None:
        """Every poll (main thread): act on new signals as the lifecycle says, watch the ranks, notice a board that
        died."""
        for signum in self.signals.take():
            name = signal.Signals(signum).name
            action = self.lifecycle.signalled(signum, name)
            if action is SignalAction.STOP:
                logger.warning("msmon: %s received: stopping at the end of the current step (again to force)", name)
                self.training.request_stop()
            elif action is SignalAction.FORCE:
                logger.warning("msmon: second %s: the training flushes and exits now", name)
                self.training.force_stop()
        if self.machine_beats is not None:
            self.machine_beats.gather()
        if self.lifecycle.signal is None:
            self._watch()
        self.board.check()

    def _watch(self) -> None:
        """The rank watcher, which must never take the supervising loop down (its first failure is logged); an alert
        with ``action: stop`` (or ``rollback``) stops every rank at its next step end."""
        try:
            stop = self.watcher.poll(self.training.ranks()) if self.watcher.due else self.watcher.stop
        except Exception as exc:
            internal_errors.report("the rank watcher", exc)
            return
        if stop is not None and self.monitor_stop is None:
            self.monitor_stop = RunResult(RunStatus.STOPPED_BY_MONITOR, stop.reason, stop=stop)
            logger.warning("msmon: stopping the run: %s", stop.reason)
            self.training.request_stop()

    def _hard_deadline(self) -> None:
        """After a second signal, the process ends within HARD_DEADLINE_S whatever hangs (never with 0)."""
        self.signals.forced.wait()
        time.sleep(HARD_DEADLINE_S)
        logger.error("msmon: still not finished %.0f s after the second signal: exiting now", HARD_DEADLINE_S)
        os._exit(self.lifecycle.exit_code(RunStatus.INTERRUPTED))

    def execute(self) -> Outcome:
        """Train in the child (one worker, or the ranks through msrun), attempt after attempt, and account for the
        end of the run."""
        if self.plan.request.board:
            self.board.start()
        threading.Thread(target=self._hard_deadline, name="msmon-hard-deadline", daemon=True).start()
        self.signals.install()
        try:
            ranks = self._attempts()
            ending = self.lifecycle.ending()
            return self.finish(ending.status, ranks, error=ending.error, killed_by=ending.killed_by,
                               note=ending.note)
        finally:
            self.signals.restore()

    def _attempts(self) -> RankResults:
        """Train, and restart or roll back while the lifecycle says one is due; the last attempt's rank results (its
        run.json entry is closed by ``finish``)."""
        while True:
            self.lifecycle.begin_attempt()
            ranks, result = self._train()
            last = self.attempt_last_step = attempts.last_step_seen(self.plan.run_dir, ranks, self.attempt_started)
            self._account_rollback()
            start = self.record.attempts[-1].resumed_from_step or 0
            due = self.lifecycle.attempt_ended(result, monitor_stop=self.monitor_stop,
                                               progressed=last is not None and last > start)
            if due is None:
                if self.lifecycle.unrestarted is not None and self.policy.max_restarts:
                    logger.warning("msmon: the training %s; no restart left (%d used)", self.lifecycle.unrestarted,
                                   self.lifecycle.restarts)
                return ranks
            self._close_attempt(self.lifecycle.judged, ranks, last)
            if due.anomaly is not None:
                point = self._roll_back(due.cause, due.anomaly)
                if point is None:
                    return ranks
                self._begin(point, AttemptReason.ROLLBACK, supersede=True)
            else:
                point = latest_checkpoint(self.plan.run_dir)
                delay = self.policy.delay(self.lifecycle.restarts)
                self._announce(attempts.RESTART_DETECTOR, *attempts.restart_alert(
                    due.cause, point, delay, last, attempt=len(self.record.attempts) + 1,
                    restart=self.lifecycle.restarts, max_restarts=self.policy.max_restarts))
                self._write()
                if not self._back_off(delay):
                    self.lifecycle.backoff_interrupted()
                    return ranks
                self._begin(point, AttemptReason.RESTART, supersede=True)
            self._write()

    def _train(self) -> tuple[RankResults, RunResult]:
        """One attempt's training process, from its start to its end (nothing of it left running), reacting on
        every poll; its ranks' results, read once, and its status decided from them."""
        training = self.training
        failed = training.start()
        try:
            while failed is None and training.waiting():
                self._react()
                time.sleep(POLL_S)
        finally:
            training.close()
        self._react()
        ranks = RankResults.read(self.plan.run_dir)
        return ranks, failed or training.decide(ranks)

    def _back_off(self, delay: float) -> bool:
        """The back-off before a restart; False when a signal arrived meanwhile (then there is no restart)."""
        end = time.monotonic() + delay
        while time.monotonic() < end:
            self._react()
            if self.lifecycle.signal is not None:
                return False
            time.sleep(min(POLL_S, max(end - time.monotonic(), 0.0)))
        return True

    def _close_attempt(self, result: RunResult, ranks: RankResults, last: int | None) -> None:
        """The attempt's run.json entry closed with its judged result, its ranks' totals and the rank watcher's alerts
        during it."""
        summed = ranks.totals
        closed = self.record.attempts[-1].ended(
            status=result.status, exit_code=int(self.lifecycle.exit_code(result.status)), last_step=last,
            error=result.error, counts={
                "alert_count": summed.alert_count + self._new_watcher_alerts(),
                "dropped_records": summed.dropped_records, "internal_errors": summed.internal_errors.count,
                "framework_warnings": summed.framework_warnings, "framework_errors": summed.framework_errors,
                "records_lost": ranks.accounting.records_lost or 0})
        self.record = replace_last(self.record, closed)

    def _new_watcher_alerts(self) -> int:
        """The rank watcher's alerts since the last attempt closed (the watcher counts over the whole run)."""
        new = self.watcher.alert_count - self._watcher_alerts_counted
        self._watcher_alerts_counted = self.watcher.alert_count
        return new

    def _announce(self, detector: str, step: int, message: str, values: JsonObject) -> None:
        """An alert of the attempt loop (a restart, a rollback), counted in the attempt whose end it announces:
        also when a signal then cancels the restart or rollback."""
        attempts.announce(self.plan, detector, step, message, values)
        ended = self.record.attempts[-1]
        self.record = replace_last(self.record, dataclasses.replace(ended, alert_count=(ended.alert_count or 0) + 1))

    def _roll_back(self, cause: str, anomaly: Anomaly) -> ResumePoint | None:
        """The checkpoint before the anomaly the next attempt starts from, the data after it skipped (listed in
        run.json, announced); None when there is none (the run ends stopped or, its data exhausted, completed) or a
        signal came."""
        number = self.record.attempts[-1].attempt
        earlier = self.record.rollbacks
        settings = self.plan.settings.health.rollback
        end = attempts.data_end(self.plan)
        try:
            point, made = rollback.choose(self.plan.run_dir, anomaly, settings, earlier, self.plan.training,
                                          number + 1, end)
        except rollback.NoCheckpoint as exc:
            self.lifecycle.rollback_impossible(str(exc))
            logger.warning("msmon: the training %s; not rolled back: %s", cause, exc)
            return None
        except rollback.DataExhausted as exc:
            self.lifecycle.data_exhausted(str(exc))
            logger.warning("msmon: the training %s; the run ends: %s", cause, exc)
            return None
        moved = rollback.set_aside_checkpoints(self.plan.run_dir, point.step, number)
        if moved:
            logger.info("msmon: %d checkpoint files after step %d kept aside (%s)", moved, point.step,
                        layout.superseded_checkpoints(self.plan.run_dir, number))
        self.record = dataclasses.replace(self.record, rollbacks=(*earlier, made))
        counted = (self.lifecycle.rollbacks, self.lifecycle.max_rollbacks)
        message = attempts.rollback_message(anomaly, point, made, earlier, settings, end, counted)
        self._announce(attempts.ROLLBACK_DETECTOR, point.step, message,
                       {**made.to_json(), "rollback": counted[0], "max_rollbacks": counted[1]})
        self._react()
        if self.lifecycle.signal is not None:
            self.lifecycle.backoff_interrupted()
            self._write()
            return None
        return point

    def _account_rollback(self) -> None:
        """The time the rollback that started this attempt cost, once the attempt logged a step."""
        made = self.record.rollbacks[-1] if self.record.rollbacks else None
        if made is None or made.attempt != self.record.attempts[-1].attempt or made.time_lost_s is not None:
            return
        lost = rollback.time_lost(self.plan.run_dir, made, self.attempt_started)
        self.record = dataclasses.replace(
            self.record, rollbacks=(*self.record.rollbacks[:-1], dataclasses.replace(made, time_lost_s=lost)))

    # -- the end --------------------------------------------------------------------------------
    def finish(self, status: RunStatus, ranks: RankResults, *, error: str | None = None, killed_by: int | None = None,
               note: str | None = None) -> Outcome:
        """Stop the watcher and the board, write the final run.json from the last attempt's ``ranks`` (once; the
        space reserved at the start is released first, so a full disk cannot stop it), tell the chat."""
        code = int(self.lifecycle.exit_code(status))
        if self._done:
            return Outcome(status, code, self.plan.run_dir, error)
        self._done = True
        if self.machine_beats is not None:
            self.machine_beats.close()
        self.watcher.close()
        stacks.remove_unused(self.plan.run_dir, sorted(ranks.by_rank))
        self.board.stop()
        self.record = runinfo.finished(
            self.record, ranks, status=status, exit_code=code, watcher_alerts=self._new_watcher_alerts(), error=error,
            internal=internal_errors.seen(), attempt_last_step=self.attempt_last_step, note=note)
        if self.reserve is not None:
            self.reserve.release()
        try:
            write_run_record(self.plan.run_dir, self.record, self.plan.request.run_json)
        except OSError as exc:
            logger.error("msmon: cannot write %s: %s", self.plan.run_dir / self.plan.request.run_json, describe(exc))
        logger.info("msmon: run ended: %s (exit %d, last step %s)", status, code, self.record.last_step)
        self._tell_the_chat(status, code, error, killed_by)
        if self._log_handler is not None:
            logs.detach(self._log_handler)
            self._log_handler = None
        return Outcome(status, code, self.plan.run_dir, error, note)

    def _tell_the_chat(self, status: RunStatus, code: int, error: str | None, killed_by: int | None) -> None:
        """The run-ended message to every chat robot (node 0 only), from this process, which outlives the
        training: a training killed by SIGKILL or the OOM killer is reported too."""
        alerts = self.plan.settings.health.alerts
        if not alerts.chat or self.plan.request.joins_run:
            return
        from msmon.health.chat.sink import ended_message, send_ended

        record = self.record
        message = ended_message(self.plan.run_dir, status, code, record.last_step, record.total_steps,
                                record.alert_count or 0, error, killed_by)
        send_ended(alerts.chat, self.plan.run_dir, message, alerts.webhook_timeout_s)


def run(plan: RunPlan, say: Callable[[str], None], view: ViewOptions) -> Outcome:
    """Create the run directory and execute the plan (``view``: how the writing rank shows progress); always ends
    with a final run.json."""
    supervisor = Supervisor(plan, say, view)
    supervisor.create()
    say(f"run directory: {plan.run_dir}")
    return supervisor.execute()
