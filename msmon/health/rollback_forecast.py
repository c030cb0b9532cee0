"""Where a rollback would have gone in a recorded run (``msmon replay``): for each alert of a detector whose action
is ``rollback``, the checkpoint step the run's CheckpointMonitor would still have kept before the anomaly's onset and
the data it would have skipped; so a team can try ``action: rollback`` on yesterday's runs first.

The live rollback picks among the checkpoint files on disk (msmon.runner.rollback); a recorded run's files are long
rotated, so the forecast reasons from the config: saves every ``save_checkpoint_steps``, the last
``keep_checkpoint_max`` kept (one of them the stop's own save).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from msmon.compat.template import CheckpointSaving, checkpoint_saving
from msmon.config.health import ROLLBACK_DETECTORS, HealthSettings, RollbackSettings
from msmon.foreign import ConfigValue
from msmon.health.alert import Alert
from msmon.util.jsonfiles import JsonObject


@dataclass(frozen=True)
class RollbackTarget:
    """Where a rollback would have gone: the checkpoint's step, and the data position the next attempt starts at."""

    checkpoint_step: int
    skip_to: int


@dataclass(frozen=True)
class Forecast:
    """What a rollback for the alert at ``alert_step`` would have done (``outcome``: where it would have gone, or why
    there would have been none)."""

    detector: str
    alert_step: int
    onset_step: int
    outcome: RollbackTarget | str

    def to_json(self) -> JsonObject:
        where: dict[str, int | str | None]
        if isinstance(self.outcome, RollbackTarget):
            where = {"checkpoint_step": self.outcome.checkpoint_step, "skip_to": self.outcome.skip_to, "refused": None}
        else:
            where = {"checkpoint_step": None, "skip_to": None, "refused": self.outcome}
        return {"onset_step": self.onset_step, **where}

    def describe(self) -> str:
        if not isinstance(self.outcome, RollbackTarget):
            return f"no rollback: {self.outcome}"
        target = self.outcome
        return (f"rollback to step {target.checkpoint_step}, skipping the data of steps {target.checkpoint_step + 1}-"
                f"{target.skip_to}")


def forecast(alerts: Sequence[Alert], settings: HealthSettings,
             config: Mapping[str, ConfigValue] | None) -> list[Forecast]:
    """One Forecast per alert whose detector's action is ``rollback``, in step order; an alert inside the data an
    earlier rollback would have skipped is not one the run would have seen."""
    saving = checkpoint_saving(config)
    rollback = settings.rollback
    found: list[Forecast] = []
    done = 0
    skipped_until = -1
    for alert in sorted(alerts, key=lambda a: a.step):
        if alert.detector not in ROLLBACK_DETECTORS or getattr(settings, alert.detector).action != "rollback":
            continue
        onset = alert.onset_step if alert.onset_step is not None else alert.step
        outcome = _outcome(alert.step, onset - rollback.margin_steps, saving, skipped_until, done, rollback)
        if isinstance(outcome, RollbackTarget):
            done += 1
            skipped_until = outcome.skip_to
        found.append(Forecast(alert.detector, alert.step, onset, outcome))
    return found


def _outcome(step: int, before: int, saving: CheckpointSaving | None, skipped_until: int, done: int,
             rollback: RollbackSettings) -> RollbackTarget | str:
    """Where the alert at ``step`` would have rolled back to (a checkpoint saved at ``before`` or earlier), or why it
    would not have."""
    if step <= skipped_until:
        return "its data would have been skipped by the rollback before"
    if done >= rollback.max_rollbacks:
        return f"no rollback left ({done} of {rollback.max_rollbacks})"
    if saving is None:
        return "the config saves no checkpoint"
    newest = saving.newest_before(before)
    if newest == 0 or newest < saving.oldest_kept(step):
        return (f"no checkpoint kept before step {before} (every {saving.every_steps} steps, the last {saving.keep} "
                "kept)")
    return RollbackTarget(newest, step + rollback.skip_steps)
