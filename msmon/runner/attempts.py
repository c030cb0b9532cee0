"""The attempts of ``msmon run``: launch each one from its checkpoint, restart a training that died, and list every
attempt in run.json.

Every launch of the training for a run directory is an attempt: the first, each ``msmon run --resume`` /
``msmon resume``, each automatic restart. run.json lists them (``attempts``: number, start and end time, status,
the step and checkpoint it resumed from, why it started, its last step, alerts, exit code, error). Before an
attempt resumes from step S, the records an earlier attempt wrote after S are kept aside (``rundir.supersede``).

``--max-restarts N``: when the training process dies (an exception, a kill by the OOM killer, a rank that
exits) after it trained at least one step, or the monitor stopped it for a hang (the ``stall`` detector with
``action: stop``), msmon trains again from the latest complete checkpoint (from the start when there is none), after
a back-off (``--restart-backoff`` seconds, doubled at each restart, at most 5 minutes), up to N times. Each restart
is an attempt in run.json and one alert (``detector: restart``) in alerts.jsonl. Never after a failure before the
first step (a configuration error), a user's Ctrl-C or SIGTERM, or another detector's stop. Whether an attempt
ended for good or is restarted is the ``Lifecycle``'s decision (runner/lifecycle.py).

A rollback (a detector with ``action: rollback`` stopped the attempt) starts the next attempt at once from the
newest checkpoint before the anomaly, with the data after it skipped (runner/rollback.py); run.json lists it
(``rollbacks``) and alerts.jsonl has one alert (``detector: rollback``). Every attempt that starts from a
checkpoint skips the data the run's rollbacks skipped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msmon import layout
from msmon.anomaly import Anomaly, data_position
from msmon.compat.parallel import data_steps
from msmon.health import make_sinks
from msmon.health.alert import Alert
from msmon.ops.ranks import read_heartbeats
from msmon.run_record import AttemptReason, RunRecord, write_run_record
from msmon.runner import rollback, rundir
from msmon.runner.attempt_entries import begin, carried_over, replace_last
from msmon.runner.lifecycle import Lifecycle
from msmon.runner.plan import RunPlan
from msmon.runner.protocol import RankResult, RankSpec
from msmon.runner.results import RankResults, RunResult
from msmon.runner.resume import ResumePoint, latest_checkpoint, resume_overrides, training_layout
from msmon.runner.training_process import TrainingProcess
from msmon.status import Attempt
from msmon.util.jsonfiles import read_jsonl_tail

logger = logging.getLogger("msmon")

BACKOFF_CAP_S = 300.0
ALERT_CLOSE_S = 5.0  # a webhook or command hook gets this long for a restart alert
POLL_S = 0.2
RESTART_DETECTOR = "restart"
ROLLBACK_DETECTOR = "rollback"


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 0
    backoff_s: float = 10.0

    def delay(self, restart: int) -> float:
        """Seconds to wait before restart number ``restart`` (1-based): doubling, capped."""
        return min(self.backoff_s * 2 ** max(restart - 1, 0), max(self.backoff_s, BACKOFF_CAP_S))


def last_step_seen(run_dir: Path, ranks: dict[int, RankResult], since: float) -> int | None:
    """The last step an attempt started at ``since`` (unix s) ended: its ranks' results, else their heartbeats and
    the records it logged (a killed process leaves no result, and its heartbeat may be up to a second old)."""
    steps = [r.last_step for r in ranks.values() if r.last_step is not None]
    for beat in read_heartbeats(run_dir).values():
        ended_time = beat.get("ended_time")
        if isinstance(ended_time, int | float) and ended_time >= since and isinstance(beat.get("ended"), int):
            steps.append(beat["ended"])
    try:
        logged = read_jsonl_tail(run_dir / layout.METRICS).rows
    except OSError:
        logged = []
    steps += [row["step"] for row in logged if isinstance(row.get("step"), int)
              and isinstance(row.get("time"), int | float) and row["time"] >= since]
    return max(steps) if steps else None


class AttemptLoop:
    """Runs the attempts of one run as its ``Lifecycle`` decides: each attempt's run.json entry, its records kept
    aside, its ``mindformers.yaml`` and training process (``training``: the current attempt's), the back-off."""

    def __init__(self, plan: RunPlan, lifecycle: Lifecycle, spec: RankSpec, *, react: Callable[[], None],
                 restarted: Callable[[], None], monitor_stop: Callable[[], RunResult | None]) -> None:
        self.plan = plan
        self.lifecycle = lifecycle
        self.run_dir: Path = plan.run_dir
        self.policy = RestartPolicy(plan.request.max_restarts, plan.request.restart_backoff_s)
        self.base_spec = spec
        self.training = TrainingProcess(plan.request, spec)
        self.react = react  # the supervisor's poll: signals, the rank watcher, the board
        self.restarted = restarted  # the supervisor forgets the earlier attempt's ranks and monitor stop
        self.monitor_stop = monitor_stop
        self.record = RunRecord()
        self.last_step: int | None = None  # the current attempt's last step seen
        self.started = time.time()

    def open(self, record: RunRecord, previous: RunRecord | None) -> None:
        """At the creation of the run (``record``: its run.json, kept up to date here): the attempts and rollbacks
        an earlier run.json of this directory lists, the run's layout, and the first attempt of this ``msmon run``
        (from ``plan.resume_point`` with --resume)."""
        earlier = carried_over(previous)
        if earlier and previous is not None:
            record = dataclasses.replace(record, attempts=earlier,
                                         start_time=previous.start_time or record.start_time)
        self.record = dataclasses.replace(
            record, rollbacks=previous.rollbacks if previous is not None else (),
            layout=training_layout(self.plan.training, self.plan.request.worker_num or 1))
        point = self.plan.resume_point
        self._begin(point, AttemptReason.RESUME if point else AttemptReason.START, supersede=point is not None)

    def _begin(self, point: ResumePoint | None, reason: AttemptReason, *, supersede: bool) -> None:
        """Move the records after the resume step aside, add the attempt to run.json, prepare its process."""
        step = point.step if point else None
        if supersede and not self.plan.request.joins_run:  # node 0 owns the metrics of a multi-machine run
            moved = rundir.supersede(self.run_dir, step or 0, len(self.record.attempts))
            if moved:
                logger.info("msmon: %d records after step %s kept aside (superseded)", moved, step or 0)
        if supersede:
            self.restarted()  # the rank watcher forgets the earlier attempt's ranks
        self.record = begin(self.record, point, reason)
        position = data_position(self.record.rollbacks, point.step) if point is not None else None
        resuming = resume_overrides(point, self.run_dir, self.plan.training, position) if point is not None else []
        rundir.write_mindformers_yaml(self.run_dir, self.plan.loaded, resuming)
        # a restart without a checkpoint trains from step 0 again: the backends still continue from there
        attempt = Attempt(self.record.attempts[-1].attempt, step if step is not None or not supersede else 0,
                          reason is AttemptReason.ROLLBACK)
        self.training = TrainingProcess(self.plan.request, dataclasses.replace(self.base_spec, attempt=attempt))
        self.started = time.time()

    def _write(self) -> None:
        try:
            write_run_record(self.run_dir, self.record, self.plan.request.run_json)
        except OSError as exc:
            logger.warning("msmon: cannot update %s: %s", layout.RUN_JSON, exc)

    def run_all(self) -> None:
        """Train, and restart or roll back while the lifecycle says one is due (the last attempt's entry is closed by
        the supervisor's finish)."""
        while True:
            self.lifecycle.begin_attempt()
            result = self.training.run(on_poll=self.react)
            self.react()
            ranks = RankResults.read(self.run_dir)
            last = last_step_seen(self.run_dir, ranks.by_rank, self.started)
            self.last_step = last
            self._account_rollback()
            start = self.record.attempts[-1].resumed_from_step or 0
            due = self.lifecycle.attempt_ended(result, monitor_stop=self.monitor_stop(),
                                               progressed=last is not None and last > start)
            if due is None:
                if self.lifecycle.unrestarted is not None and self.policy.max_restarts:
                    logger.warning("msmon: the training %s; no restart left (%d used)", self.lifecycle.unrestarted,
                                   self.lifecycle.restarts)
                return
            self._end(self.lifecycle.judged, ranks, last)
            if due.anomaly is not None:
                if not self._roll_back(due.cause, due.anomaly):
                    return
                continue
            point = latest_checkpoint(self.run_dir)
            delay = self.policy.delay(self.lifecycle.restarts)
            self._alert_restart(due.cause, point, delay, last)
            self._write()
            if not self._wait(delay):
                self.lifecycle.backoff_interrupted()
                return
            self._begin(point, AttemptReason.RESTART, supersede=True)
            self._write()

    def _roll_back(self, cause: str, anomaly: Anomaly) -> bool:
        """The next attempt from the checkpoint before the anomaly, the data after it skipped; False when there is
        none (the run ends stopped) or a signal came."""
        number = self.record.attempts[-1].attempt
        earlier = self.record.rollbacks
        settings = self.plan.settings.health.rollback
        data_end = self._data_end()
        try:
            point, made = rollback.choose(self.run_dir, anomaly, settings, earlier, self.plan.training, number + 1,
                                          data_end)
        except rollback.NoCheckpoint as exc:
            self.lifecycle.rollback_impossible(str(exc))
            logger.warning("msmon: the training %s; not rolled back: %s", cause, exc)
            return False
        except rollback.DataExhausted as exc:
            self.lifecycle.data_exhausted(str(exc))
            logger.warning("msmon: the training %s; the run ends: %s", cause, exc)
            return False
        moved = rollback.set_aside_checkpoints(self.run_dir, point.step, number)
        if moved:
            logger.info("msmon: %d checkpoint files after step %d kept aside (%s)", moved, point.step,
                        layout.superseded_checkpoints(self.run_dir, number))
        self.record = dataclasses.replace(self.record, rollbacks=(*earlier, made))
        samples = f", {made.skipped_samples} samples" if made.skipped_samples is not None else ""
        margin = made.skip_to - data_position(earlier, anomaly.alert_step)
        shortened = "" if margin >= settings.skip_steps else (
            f"; the margin past the bad window shortened to {margin} of health.rollback.skip_steps "
            f"{settings.skip_steps}: the data ends at batch {data_end}")
        message = (f"{anomaly.detector} from step {anomaly.onset_step} (alert at step {anomaly.alert_step}): rolling "
                   f"back to step {point.step} ({point.path}) and skipping the data of {made.skipped_steps} steps "
                   f"(batches {made.skip_from + 1}-{made.skip_to}{samples}){shortened}; rollback "
                   f"{self.lifecycle.rollbacks} of {self.lifecycle.max_rollbacks}")
        self._announce(ROLLBACK_DETECTOR, point.step, message, {**made.to_json(), "rollback": self.lifecycle.rollbacks,
                                                                "max_rollbacks": self.lifecycle.max_rollbacks})
        self.react()
        if self.lifecycle.signal is not None:
            self.lifecycle.backoff_interrupted()
            self._write()
            return False
        self._begin(point, AttemptReason.ROLLBACK, supersede=True)
        self._write()
        return True

    def _data_end(self) -> int | None:
        """The data's batches over every epoch: as MindSpore counted them in the ranks (their heartbeats), else as
        the config states them."""
        counted = [beat["data_batches"] for beat in read_heartbeats(self.run_dir).values()
                   if isinstance(beat.get("data_batches"), int) and not isinstance(beat.get("data_batches"), bool)]
        return max(counted) if counted else data_steps(self.plan.training)

    def _account_rollback(self) -> None:
        """The time the rollback that started this attempt cost, once the attempt logged a step."""
        made = self.record.rollbacks[-1] if self.record.rollbacks else None
        if made is None or made.attempt != self.record.attempts[-1].attempt or made.time_lost_s is not None:
            return
        lost = rollback.time_lost(self.run_dir, made, self.started)
        self.record = dataclasses.replace(
            self.record, rollbacks=(*self.record.rollbacks[:-1], dataclasses.replace(made, time_lost_s=lost)))

    def _end(self, result: RunResult, ranks: RankResults, last: int | None) -> None:
        summed = ranks.totals
        closed = self.record.attempts[-1].ended(
            status=result.status, exit_code=int(self.lifecycle.exit_code(result.status)), last_step=last,
            error=result.error, counts={
                "alert_count": summed.alert_count, "dropped_records": summed.dropped_records,
                "internal_errors": summed.internal_errors.count, "framework_warnings": summed.framework_warnings,
                "framework_errors": summed.framework_errors, "records_lost": ranks.accounting.records_lost or 0})
        self.record = replace_last(self.record, closed)

    def _alert_restart(self, cause: str, point: ResumePoint | None, delay: float, last: int | None) -> None:
        step = point.step if point else 0
        where = f"step {step} ({point.path})" if point else "the start (no complete checkpoint)"
        message = (f"the training {cause}; restarting from {where} in {delay:g} s "
                   f"(restart {self.lifecycle.restarts} of {self.policy.max_restarts})")
        values = {"attempt": len(self.record.attempts) + 1, "restart": self.lifecycle.restarts,
                  "max_restarts": self.policy.max_restarts, "resumed_from_step": step,
                  "checkpoint": str(point.path) if point else None, "last_step": last, "delay_s": delay}
        self._announce(RESTART_DETECTOR, step, message, values)

    def _announce(self, detector: str, step: int, message: str, values: dict[str, Any]) -> None:
        """One alert of the attempt loop (a restart, a rollback): alerts.jsonl, the console, and the webhook /
        command hook / chat when configured."""
        alert = Alert(time.time(), step, detector, "warning", message, values, detector)
        deadline = time.monotonic() + ALERT_CLOSE_S
        for sink in make_sinks(self.plan.settings, self.run_dir, None):
            try:
                sink.handle(alert)
                sink.close(deadline)
            except Exception as exc:  # noqa: BLE001 - an alert sink never stops the restart
                logger.warning("msmon: %s alert not delivered to %s: %s", detector, type(sink).__name__, exc)

    def _wait(self, delay: float) -> bool:
        """The back-off; False when a signal arrived meanwhile (then there is no restart)."""
        end = time.monotonic() + delay
        while time.monotonic() < end:
            self.react()
            if self.lifecycle.signal is not None:
                return False
            time.sleep(min(POLL_S, max(end - time.monotonic(), 0.0)))
        return True
