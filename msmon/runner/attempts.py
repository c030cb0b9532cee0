"""The pieces of the attempts of ``msmon run`` the supervisor (runner/supervise.py) puts together: each attempt's
files prepared from its checkpoint, the restart back-off, a rollback's message, the restart and rollback alerts.

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

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from msmon import layout
from msmon.anomaly import Anomaly, Rollback, data_position
from msmon.compat.parallel import data_steps
from msmon.config.health import RollbackSettings
from msmon.health import make_sinks
from msmon.health.alert import Alert
from msmon.ops.ranks import read_heartbeats
from msmon.run_record import AttemptReason, RunRecord
from msmon.runner import rundir
from msmon.runner.attempt_entries import begin
from msmon.runner.checkpoints import ResumePoint
from msmon.runner.plan import RunPlan
from msmon.runner.results import RankResults
from msmon.runner.resume import resume_overrides
from msmon.status import Attempt
from msmon.util.jsonfiles import JsonObject, read_jsonl_tail

logger = logging.getLogger("msmon")

BACKOFF_CAP_S = 300.0
ALERT_CLOSE_S = 5.0  # a webhook or command hook gets this long for a restart alert
RESTART_DETECTOR = "restart"
ROLLBACK_DETECTOR = "rollback"


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 0
    backoff_s: float = 10.0

    def delay(self, restart: int) -> float:
        """Seconds to wait before restart number ``restart`` (1-based): doubling, capped."""
        return min(self.backoff_s * 2 ** max(restart - 1, 0), max(self.backoff_s, BACKOFF_CAP_S))


def last_step_seen(run_dir: Path, ranks: RankResults, since: float) -> int | None:
    """The last step an attempt started at ``since`` (unix s) ended: its ranks' results, else their heartbeats and
    the records it logged (a killed process leaves no result, and its heartbeat may be up to a second old)."""
    steps = [r.last_step for r in ranks.by_rank.values() if r.last_step is not None]
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


def prepare_attempt(plan: RunPlan, record: RunRecord, point: ResumePoint | None, reason: AttemptReason, *,
                    supersede: bool) -> tuple[RunRecord, Attempt]:
    """A new attempt from ``point`` (None: from the start): the records after its resume step kept aside
    (``supersede``; node 0 owns the metrics of a multi-machine run), its entry added to ``record``, its
    ``mindformers.yaml`` (resuming, with the data the run's rollbacks skipped skipped); the new record and the
    attempt the ranks are told."""
    step = point.step if point else None
    if supersede and not plan.request.joins_run:
        moved = rundir.supersede(plan.run_dir, step or 0, len(record.attempts))
        if moved:
            logger.info("msmon: %d records after step %s kept aside (superseded)", moved, step or 0)
    record = begin(record, point, reason)
    position = data_position(record.rollbacks, point.step) if point is not None else None
    resuming = resume_overrides(point, plan.run_dir, plan.training, position) if point is not None else []
    rundir.write_mindformers_yaml(plan.run_dir, plan.loaded, resuming)
    # a restart without a checkpoint trains from step 0 again: the backends still continue from there
    return record, Attempt(record.attempts[-1].attempt, step if step is not None or not supersede else 0,
                           reason is AttemptReason.ROLLBACK)


def data_end(plan: RunPlan) -> int | None:
    """The data's batches over every epoch: as MindSpore counted them in the ranks (their heartbeats), else as the
    config states them."""
    counted = [beat["data_batches"] for beat in read_heartbeats(plan.run_dir).values()
               if isinstance(beat.get("data_batches"), int) and not isinstance(beat.get("data_batches"), bool)]
    return max(counted) if counted else data_steps(plan.training)


def rollback_message(anomaly: Anomaly, point: ResumePoint, made: Rollback, earlier: tuple[Rollback, ...],
                     settings: RollbackSettings, end: int | None, counted: tuple[int, int]) -> str:
    """The rollback alert's message (``counted``: this rollback's number and the most there may be)."""
    samples = f", {made.skipped_samples} samples" if made.skipped_samples is not None else ""
    margin = made.skip_to - data_position(earlier, anomaly.alert_step)
    shortened = "" if margin >= settings.skip_steps else (
        f"; the margin past the bad window shortened to {margin} of health.rollback.skip_steps "
        f"{settings.skip_steps}: the data ends at batch {end}")
    return (f"{anomaly.detector} from step {anomaly.onset_step} (alert at step {anomaly.alert_step}): rolling "
            f"back to step {point.step} ({point.path}) and skipping the data of {made.skipped_steps} steps "
            f"(batches {made.skip_from + 1}-{made.skip_to}{samples}){shortened}; rollback {counted[0]} of "
            f"{counted[1]}")


def restart_alert(cause: str, point: ResumePoint | None, delay: float, last: int | None, *, attempt: int,
                  restart: int, max_restarts: int) -> tuple[int, str, JsonObject]:
    """The restart alert's step, message and values (``attempt``: the number of the attempt it starts)."""
    step = point.step if point else 0
    where = f"step {step} ({point.path})" if point else "the start (no complete checkpoint)"
    message = (f"the training {cause}; restarting from {where} in {delay:g} s "
               f"(restart {restart} of {max_restarts})")
    values = {"attempt": attempt, "restart": restart, "max_restarts": max_restarts, "resumed_from_step": step,
              "checkpoint": str(point.path) if point else None, "last_step": last, "delay_s": delay}
    return step, message, values


def announce(plan: RunPlan, detector: str, step: int, message: str, values: JsonObject) -> None:
    """One alert of the attempt loop (a restart, a rollback): alerts.jsonl, the console, and the webhook /
    command hook / chat when configured."""
    alert = Alert(time.time(), step, detector, "warning", message, values, detector)
    deadline = time.monotonic() + ALERT_CLOSE_S
    for sink in make_sinks(plan.settings, plan.run_dir, None):
        try:
            sink.handle(alert)
            sink.close(deadline)
        except Exception as exc:  # noqa: BLE001 - an alert sink never stops the restart
            logger.warning("msmon: %s alert not delivered to %s: %s", detector, type(sink).__name__, exc)
