"""``StopRequest``: why the training is asked to stop (a detector's action, or a signal); ``Anomaly``: what a
detector whose ``action`` is ``rollback`` found, where it began and where it was seen; and ``Rollback``: what the
run did about it, as run.json lists it (``rollbacks``).

The writing rank's health monitor (or the parent's rank watcher) makes a StopRequest when a detector's action stops
the training, with an Anomaly for a rollback; it crosses to the parent in the rank's result (msmon.runner.protocol),
and the run's lifecycle decides from it whether the run restarts or rolls back (msmon.runner.lifecycle) and to
which checkpoint (msmon.runner.rollback). The ending, ``msmon runs`` and the report read the Rollbacks back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from msmon.util.jsonfiles import JsonObject, JsonValue

logger = logging.getLogger("msmon")


@dataclass(frozen=True)
class Anomaly:
    """``detector`` saw it at ``alert_step``; its first affected step is ``onset_step`` (at most ``alert_step``)."""

    detector: str
    onset_step: int
    alert_step: int
    message: str

    def to_json(self) -> JsonObject:
        return {"detector": self.detector, "onset_step": self.onset_step, "alert_step": self.alert_step,
                "message": self.message}

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> Anomaly:
        """ValueError, KeyError or TypeError when ``data`` is not one."""
        return cls(str(data["detector"]), int(data["onset_step"]), int(data["alert_step"]), str(data["message"]))


@dataclass(frozen=True)
class StopRequest:
    """Why the training is asked to stop at its next step end: ``detector``'s ``stop`` or ``rollback`` action at
    ``step`` (``anomaly``: what a rollback is for), or a signal (``detector`` None)."""

    message: str
    detector: str | None = None
    step: int | None = None
    anomaly: Anomaly | None = None

    @property
    def reason(self) -> str:
        """The run's one-line error: ``stall at step 120: no step ended for 300 s ...``."""
        return f"{self.detector} at step {self.step}: {self.message}" if self.detector is not None else self.message

    def to_json(self) -> JsonObject:
        return {"message": self.message, "detector": self.detector, "step": self.step,
                "anomaly": self.anomaly.to_json() if self.anomaly is not None else None}

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> StopRequest:
        """ValueError, KeyError or TypeError when ``data`` is not one."""
        detector, step, anomaly = data.get("detector"), data.get("step"), data.get("anomaly")
        return cls(str(data["message"]), str(detector) if detector is not None else None,
                   int(step) if step is not None else None,
                   Anomaly.from_json(anomaly) if anomaly is not None else None)


@dataclass(frozen=True)
class Rollback:
    """One rollback: what set it off, the checkpoint it went back to, and the data it skipped (in steps)."""

    attempt: int  # the attempt it started
    detector: str
    onset_step: int
    alert_step: int
    checkpoint_step: int
    checkpoint: str
    skip_from: int  # the data position (batches) at the checkpoint's step
    skip_to: int  # where the next attempt's data begins (data_skip_steps)
    skipped_samples: int | None  # skipped steps x the samples of num_samples a step takes
    time: float  # unix seconds of the alert
    time_lost_s: float | None = None  # from the checkpoint's step to the first step after the rollback

    @property
    def skipped_steps(self) -> int:
        return self.skip_to - self.skip_from

    def describe(self) -> str:
        """``loss_spike from step 150 (alert at 152) -> back to step 100, the data of 82 steps skipped (batches
        101-182)``."""
        return (f"{self.detector} from step {self.onset_step} (alert at {self.alert_step}) -> back to step "
                f"{self.checkpoint_step}, the data of {self.skipped_steps} steps skipped (batches {self.skip_from + 1}-"
                f"{self.skip_to})")

    def to_json(self) -> JsonObject:
        return {"attempt": self.attempt, "detector": self.detector, "onset_step": self.onset_step,
                "alert_step": self.alert_step, "checkpoint_step": self.checkpoint_step,
                "checkpoint": self.checkpoint, "skip_from": self.skip_from, "skip_to": self.skip_to,
                "skipped_steps": self.skipped_steps, "skipped_samples": self.skipped_samples, "time": self.time,
                "time_lost_s": self.time_lost_s}

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> Rollback:
        """ValueError, KeyError or TypeError when ``data`` is not one."""
        samples, lost = data.get("skipped_samples"), data.get("time_lost_s")
        return cls(int(data["attempt"]), str(data["detector"]), int(data["onset_step"]), int(data["alert_step"]),
                   int(data["checkpoint_step"]), str(data["checkpoint"]), int(data["skip_from"]),
                   int(data["skip_to"]), int(samples) if samples is not None else None, float(data["time"]),
                   float(lost) if lost is not None else None)


def rollbacks_of(info: Mapping[str, JsonValue]) -> list[Rollback]:
    """The rollbacks run.json lists (entries this msmon cannot read are left out)."""
    found = []
    for entry in info.get("rollbacks") or []:
        try:
            found.append(Rollback.from_json(entry))
        except (ValueError, KeyError, TypeError):
            logger.warning("msmon: run.json lists a rollback this msmon cannot read: %s", entry)
    return found


def in_effect(rollbacks: Sequence[Rollback]) -> list[Rollback]:
    """The rollbacks the surviving curve still follows: one back to an earlier checkpoint discards those after it."""
    chain: list[Rollback] = []
    for rollback in rollbacks:
        chain = [r for r in chain if r.checkpoint_step < rollback.checkpoint_step] + [rollback]
    return chain


def data_position(rollbacks: Sequence[Rollback], step: int) -> int:
    """The batches the data has given (trained on or skipped) once ``step`` of the surviving curve has ended."""
    position = step
    for rollback in in_effect(rollbacks):
        if rollback.checkpoint_step <= step:
            position = rollback.skip_to + step - rollback.checkpoint_step
    return position
