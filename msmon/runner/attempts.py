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
from msmon.runner import results, rundir, runinfo
from msmon.runner.lifecycle import Lifecycle
from msmon.runner.plan import RunPlan
from msmon.runner.protocol import RankResult, RankSpec, read_results
from msmon.runner.results import RunResult
from msmon.runner.resume import ResumePoint, latest_checkpoint, resume_overrides, training_layout
from msmon.runner.runinfo import now_iso
from msmon.runner.training_process import TrainingProcess
from msmon.status import Attempt, RunStatus
from msmon.util.jsonfiles import read_jsonl_tail

logger = logging.getLogger("msmon")

BACKOFF_CAP_S = 300.0
ALERT_CLOSE_S = 5.0  # a webhook or command hook gets this long for a restart alert
POLL_S = 0.2
RESTART_DETECTOR = "restart"
#: ``reason`` of an attempt: the first start, a resume asked for by the user, an automatic restart.
START, RESUME, RESTART = "start", "resume", "restart"
#: What an attempt entry of run.json holds when it ends.
END_FIELDS = ("status", "exit_code", "last_step", "alert_count", "dropped_records", "records_lost", "internal_errors",
              "error")
#: What run.json sums over the attempts.
SUMMED = ("alert_count", "dropped_records", "records_lost", "internal_errors")


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
        earlier = carried_over(previous)
        if earlier and previous:
            info.update(attempts=earlier, start_time=previous.get("start_time") or info["start_time"])
        info["layout"] = training_layout(self.plan.training, self.plan.request.worker_num or 1)
        point = self.plan.resume_point
        self._begin(point, RESUME if point else START, supersede=point is not None)

    def _begin(self, point: ResumePoint | None, reason: str, *, supersede: bool) -> None:
        """Move the records after the resume step aside, add the attempt to run.json, prepare its process."""
        step = point.step if point else None
        if supersede and not self.plan.request.joins_run:  # node 0 owns the metrics of a multi-machine run
            moved = rundir.supersede(self.run_dir, step or 0, len(self.info.get("attempts") or []))
            if moved:
                logger.info("msmon: %d records after step %s kept aside (superseded)", moved, step or 0)
        if supersede:
            self.restarted()  # the rank watcher forgets the earlier attempt's ranks
        self.entry = begin(self.info, resumed_from=point.to_json() if point else None, reason=reason)
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
            self._begin(point, RESTART, supersede=True)
            self._write()

    def _end(self, result: RunResult, ranks: dict[int, RankResult], last: int | None) -> None:
        summed = results.totals(ranks)
        end(self.entry, status=result.status.value, exit_code=int(self.lifecycle.exit_code(result.status)),
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


def carried_over(previous: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The attempts of an earlier run.json of this run directory (one made up from it when it predates attempts)."""
    if not previous:
        return []
    found = previous.get("attempts")
    if isinstance(found, list) and found:
        entries = [dict(entry) for entry in found if isinstance(entry, dict)]
    else:
        entries = [{"attempt": 1, "start_time": previous.get("start_time"), "resumed_from_step": None,
                    "reason": START, **{key: previous.get(key) for key in END_FIELDS}}]
    for entry in entries:  # an msmon that was killed itself left its last attempt running
        if RunStatus.parse(entry.get("status")) in (None, RunStatus.RUNNING):
            entry.update(status=RunStatus.FAILED.value,
                         error=entry.get("error") or "msmon itself ended during this attempt",
                         end_time=entry.get("end_time") or previous.get("end_time"))
    return entries


def begin(info: dict[str, Any], *, resumed_from: dict[str, Any] | None, reason: str) -> dict[str, Any]:
    """Append a running attempt to ``info["attempts"]`` and return it (``resumed_from``: the checkpoint's
    ``ResumePoint.to_json()``, None when training from the start)."""
    attempts = info.setdefault("attempts", [])
    entry: dict[str, Any] = {
        "attempt": len(attempts) + 1, "start_time": now_iso(), "end_time": None, "status": RunStatus.RUNNING.value,
        "reason": reason, "resumed_from_step": resumed_from["step"] if resumed_from else None,
        "checkpoint": resumed_from["path"] if resumed_from else None,
    }
    attempts.append(entry)
    return entry


def end(entry: dict[str, Any], **fields: Any) -> None:
    """Close an attempt entry with its end time and ``END_FIELDS`` (keyword arguments)."""
    entry.update({key: value for key, value in fields.items() if key in END_FIELDS}, end_time=now_iso())


def finish(info: dict[str, Any]) -> dict[str, Any]:
    """run.json at the end of ``msmon run``: the last attempt closed with the run's end (its last step from the
    attempt when the ranks left no result), then the totals over the attempts."""
    entries = info.get("attempts") or []
    if entries and entries[-1].get("status") == RunStatus.RUNNING:
        last = entries[-1]
        step = info.get("last_step") if info.get("last_step") is not None else last.get("last_step")
        end(last, **{**{key: info.get(key) for key in END_FIELDS}, "last_step": step})
        info = {**info, "last_step": step}
    return totals(info)


def totals(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with ``alert_count``, ``dropped_records`` and ``records_lost`` summed over its attempts; each
    automatic restart adds its own alert. ``info`` alone when it has one attempt."""
    attempts = info.get("attempts") or []
    if len(attempts) < 2:
        return info
    summed = {key: sum(int(entry.get(key) or 0) for entry in attempts) for key in SUMMED}
    summed["alert_count"] += sum(entry.get("reason") == RESTART for entry in attempts)
    return {**info, **summed}
