"""The attempts of ``msmon run``: launch each one from its checkpoint, and restart a training that died.

``--max-restarts N``: when the training process dies (an exception, a kill by the OOM killer, a rank that
exits) after it trained at least one step, or the monitor stopped it for a hang (the ``stall`` detector with
``action: stop``), msmon trains again from the latest complete checkpoint (from the start when there is none), after
a back-off (``--restart-backoff`` seconds, doubled at each restart, at most 5 minutes), up to N times. Each restart
is an attempt in run.json and one alert (``detector: restart``) in alerts.jsonl. Never after a failure before the
first step (a configuration error), a user's Ctrl-C or SIGTERM, or another detector's stop.
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
from msmon.health import make_sinks
from msmon.health.alert import Alert
from msmon.ops.ranks import read_heartbeats
from msmon.runner import attempts, results, rundir, runinfo
from msmon.runner.checkpoints import ResumePoint, latest_checkpoint, resume_overrides, training_layout
from msmon.runner.lifecycle import Lifecycle
from msmon.runner.plan import RunPlan
from msmon.runner.protocol import RankResult, RankSpec, read_results
from msmon.runner.results import RunResult
from msmon.runner.training_process import TrainingProcess
from msmon.util.attempt import Attempt

logger = logging.getLogger("msmon")

BACKOFF_CAP_S = 300.0
ALERT_CLOSE_S = 5.0  # a webhook or command hook gets this long for a restart alert
POLL_S = 0.2
RESTART_DETECTOR = "restart"


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 0
    backoff_s: float = 10.0

    def delay(self, restart: int) -> float:
        """Seconds to wait before restart number ``restart`` (1-based): doubling, capped."""
        return min(self.backoff_s * 2 ** max(restart - 1, 0), max(self.backoff_s, BACKOFF_CAP_S))


def last_step_seen(run_dir: Path, ranks: dict[int, RankResult], since: float) -> int | None:
    """The last step an attempt started at ``since`` (unix s) ended: its ranks' results, else their heartbeats
    (a killed process leaves no result)."""
    steps = [r.last_step for r in ranks.values() if r.last_step is not None]
    for beat in read_heartbeats(run_dir).values():
        ended_time = beat.get("ended_time")
        if isinstance(ended_time, int | float) and ended_time >= since and isinstance(beat.get("ended"), int):
            steps.append(beat["ended"])
    return max(steps) if steps else None


class AttemptLoop:
    """Runs the attempts of one run as its ``Lifecycle`` decides: each attempt's run.json entry, its records kept
    aside, its ``mindformers.yaml`` and training process (``training``: the current attempt's), the back-off."""

    def __init__(self, plan: RunPlan, lifecycle: Lifecycle, spec: RankSpec, *, react: Callable[[], None],
                 restarted: Callable[[], None], monitor_stop: Callable[[], str | None]) -> None:
        self.plan = plan
        self.lifecycle = lifecycle
        self.run_dir: Path = plan.run_dir
        self.policy = RestartPolicy(plan.request.max_restarts, plan.request.restart_backoff_s)
        self.base_spec = spec
        self.training = TrainingProcess(plan.request, spec)
        self.react = react  # the supervisor's poll: signals, the rank watcher, the board
        self.restarted = restarted  # the supervisor forgets the earlier attempt's ranks and monitor stop
        self.monitor_stop = monitor_stop
        self.info: dict[str, Any] = {}
        self.entry: dict[str, Any] = {}
        self.started = time.time()

    def open(self, info: dict[str, Any], previous: dict[str, Any] | None) -> None:
        """At the creation of the run (``info``: its run.json, kept up to date here): the attempts an earlier
        run.json of this directory lists, the run's layout, and the first attempt of this ``msmon run`` (from
        ``plan.resume_point`` with --resume)."""
        self.info = info
        earlier = attempts.carried_over(previous)
        if earlier and previous:
            info.update(attempts=earlier, start_time=previous.get("start_time") or info["start_time"])
        info["layout"] = training_layout(self.plan.training, self.plan.request.worker_num or 1)
        point = self.plan.resume_point
        self._begin(point, attempts.RESUME if point else attempts.START, supersede=point is not None)

    def _begin(self, point: ResumePoint | None, reason: str, *, supersede: bool) -> None:
        """Move the records after the resume step aside, add the attempt to run.json, prepare its process."""
        step = point.step if point else None
        if supersede and not self.plan.request.joins_run:  # node 0 owns the metrics of a multi-machine run
            moved = attempts.supersede(self.run_dir, step or 0, len(self.info.get("attempts") or []))
            if moved:
                logger.info("msmon: %d records after step %s kept aside (superseded)", moved, step or 0)
        if supersede:
            self.restarted()  # the rank watcher forgets the earlier attempt's ranks
        self.entry = attempts.begin(self.info, resumed_from=point.to_json() if point else None, reason=reason)
        resuming = resume_overrides(point, self.run_dir, self.plan.training) if point is not None else []
        rundir.write_mindformers_yaml(self.run_dir, self.plan.loaded, resuming)
        # a restart without a checkpoint trains from step 0 again: the backends still continue from there
        attempt = Attempt(self.entry["attempt"], step if step is not None or not supersede else 0)
        self.training = TrainingProcess(self.plan.request, dataclasses.replace(self.base_spec, attempt=attempt))
        self.started = time.time()

    def _write(self) -> None:
        try:
            runinfo.write_run_info(self.run_dir, self.info, self.plan.request.run_json)
        except OSError as exc:
            logger.warning("msmon: cannot update %s: %s", layout.RUN_JSON, exc)

    def run_all(self) -> None:
        """Train, and restart while the lifecycle says a restart is due (the last attempt's entry is closed by the
        supervisor's finish)."""
        while True:
            self.lifecycle.begin_attempt()
            result = self.training.run(on_poll=self.react)
            self.react()
            ranks = read_results(self.run_dir)
            last = last_step_seen(self.run_dir, ranks, self.started)
            self.entry["last_step"] = last
            start = self.entry.get("resumed_from_step") or 0
            cause = self.lifecycle.attempt_ended(result, monitor_stop=self.monitor_stop(),
                                                 progressed=last is not None and last > start)
            if cause is None:
                if self.lifecycle.unrestarted is not None and self.policy.max_restarts:
                    logger.warning("msmon: the training %s; no restart left (%d used)", self.lifecycle.unrestarted,
                                   self.lifecycle.restarts)
                return
            self._end(self.lifecycle.judged, ranks, last)
            point = latest_checkpoint(self.run_dir)
            delay = self.policy.delay(self.lifecycle.restarts)
            self._alert(cause, point, delay, last)
            self._write()
            if not self._wait(delay):
                self.lifecycle.backoff_interrupted()
                return
            self._begin(point, attempts.RESTART, supersede=True)
            self._write()

    def _end(self, result: RunResult, ranks: dict[int, RankResult], last: int | None) -> None:
        summed = results.totals(ranks)
        attempts.end(self.entry, status=result.status.value, exit_code=int(self.lifecycle.exit_code(result.status)),
                     last_step=last, alert_count=summed.alert_count, dropped_records=summed.dropped_records,
                     internal_errors=summed.internal_errors.count, error=result.error,
                     records_lost=results.backend_accounting(ranks)["records_lost"])

    def _alert(self, cause: str, point: ResumePoint | None, delay: float, last: int | None) -> None:
        """One restart alert: alerts.jsonl, the console, and the webhook / command hook when configured."""
        step = point.step if point else 0
        where = f"step {step} ({point.path})" if point else "the start (no complete checkpoint)"
        message = (f"the training {cause}; restarting from {where} in {delay:g} s "
                   f"(restart {self.lifecycle.restarts} of {self.policy.max_restarts})")
        values = {"attempt": len(self.info.get("attempts") or []) + 1, "restart": self.lifecycle.restarts,
                  "max_restarts": self.policy.max_restarts, "resumed_from_step": step,
                  "checkpoint": str(point.path) if point else None, "last_step": last, "delay_s": delay}
        alert = Alert(time.time(), step, RESTART_DETECTOR, "warning", message, values, "restart")
        deadline = time.monotonic() + ALERT_CLOSE_S
        for sink in make_sinks(self.plan.settings, self.run_dir, None):
            try:
                sink.handle(alert)
                sink.close(deadline)
            except Exception as exc:  # noqa: BLE001 - an alert sink never stops the restart
                logger.warning("msmon: restart alert not delivered to %s: %s", type(sink).__name__, exc)

    def _wait(self, delay: float) -> bool:
        """The back-off; False when a signal arrived meanwhile (then there is no restart)."""
        end = time.monotonic() + delay
        while time.monotonic() < end:
            self.react()
            if self.lifecycle.signal is not None:
                return False
            time.sleep(min(POLL_S, max(end - time.monotonic(), 0.0)))
        return True
