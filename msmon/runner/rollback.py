"""Rolling a run back past bad data (a detector with ``action: rollback``): the checkpoint it goes back to, the
data it skips, and each rollback as run.json lists it.

Steps and data: without a rollback, step s trains on the s-th batch of the data. A rollback resumes from the
checkpoint of step C and skips the data up to batch P (mindformers' ``data_skip_steps: P``), so step C + k then
trains on batch P + k. Every later start from a checkpoint (a restart, ``msmon resume``) must skip the same way,
or it would train on the bad data again: ``data_position`` is the one answer to "which batch comes after step s",
over the rollbacks of the surviving curve.

The data's end: a rollback never asks the data pipeline to skip past it (MindSpore refuses a reset step at or past
the data's batches over every epoch). The bad window itself is always skipped; the margin past it
(``health.rollback.skip_steps``) is shortened to what the data holds, and when nothing is left after the window the
run ends as what it is: completed, its data exhausted (``DataExhausted``).

The checkpoint: the newest one whole on every rank whose step is before the anomaly's onset by
``health.rollback.margin_steps``. Checkpoints the rolled-back attempt saved after it move aside
(``logs/output/checkpoint.superseded/attempt-N/``; an ``iteration_<step>/`` directory whole), so neither a later
rollback, a restart nor mindformers' ``keep_checkpoint_max`` ever takes one trained on the bad data.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from msmon import layout
from msmon.anomaly import Anomaly, Rollback, data_position
from msmon.compat.parallel import samples_per_step
from msmon.config.health import RollbackSettings
from msmon.foreign import ConfigValue
from msmon.runner.checkpoints import ResumePoint, latest_checkpoint, saved_checkpoints
from msmon.util.jsonfiles import read_jsonl_tail

logger = logging.getLogger("msmon")


class NoCheckpoint(Exception):
    """No complete checkpoint lies before the anomaly (the message says which step it needed)."""


class DataExhausted(Exception):
    """The bad window reaches the end of the data: nothing is left to train after it (the message says so)."""


def choose(run_dir: Path, anomaly: Anomaly, settings: RollbackSettings, earlier: Sequence[Rollback],
           training: Mapping[str, ConfigValue], attempt: int, data_end: int | None) -> tuple[ResumePoint, Rollback]:
    """The checkpoint to roll back to and the rollback it makes; ``data_end``: the data's batches over every epoch
    (None: unknown). NoCheckpoint when there is none before the onset, DataExhausted when no data is left after the
    bad window."""
    before = anomaly.onset_step - settings.margin_steps
    point = latest_checkpoint(run_dir, before=before)
    bad_end = data_position(earlier, anomaly.alert_step)
    if data_end is not None and bad_end >= data_end:
        kept = f"; the newest checkpoint before its onset: step {point.step} ({point.path})" if point else ""
        raise DataExhausted(f"its data exhausted: the {anomaly.detector} window (onset step {anomaly.onset_step}, "
                            f"alert at step {anomaly.alert_step}) reaches batch {bad_end} of the data's {data_end}, "
                            f"so nothing is left to train after it{kept}")
    if point is None:
        raise NoCheckpoint(f"no complete checkpoint before step {before} (the {anomaly.detector} onset at step "
                           f"{anomaly.onset_step} less health.rollback.margin_steps {settings.margin_steps})")
    skip_from = data_position(earlier, point.step)
    skip_to = bad_end + settings.skip_steps
    if data_end is not None:
        skip_to = min(skip_to, data_end - 1)  # the margin shortened: at least one batch stays to train on
    per_step = samples_per_step(training)
    rollback = Rollback(attempt, anomaly.detector, anomaly.onset_step, anomaly.alert_step, point.step,
                        str(point.path), skip_from, skip_to,
                        (skip_to - skip_from) * per_step if per_step is not None else None, time.time())
    return point, rollback


def set_aside_checkpoints(run_dir: Path, after_step: int, attempt: int) -> int:
    """Move every checkpoint of a step after ``after_step`` (each rank's file; an iteration directory whole) to
    ``checkpoint.superseded/attempt-N/`` (its path below the checkpoint directory kept); how many moved."""
    base = run_dir / layout.CHECKPOINTS
    aside = layout.superseded_checkpoints(run_dir, attempt)
    moved = 0
    for step, path in saved_checkpoints(run_dir):
        if step <= after_step:
            continue
        target = aside / path.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, target)
        moved += 1
    return moved


def time_lost(run_dir: Path, rollback: Rollback, resumed_at: float) -> float | None:
    """Seconds from the end of the checkpoint's step (its record in the rolled-back attempt) to the first record
    after the rollback (``resumed_at``: when the rollback began): the training done again plus the restart."""
    rows = read_jsonl_tail(run_dir / layout.METRICS).rows
    before = [row["time"] for row in rows if isinstance(row.get("step"), int) and isinstance(row.get("time"), float)
              and row["step"] <= rollback.checkpoint_step and row["time"] < resumed_at]
    after = [row["time"] for row in rows if isinstance(row.get("time"), float) and row["time"] >= resumed_at]
    if not after:
        return None
    start = max(before) if before else rollback.time
    return round(min(after) - start, 3)
