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
from typing import Any

from msmon.anomaly import ROLLBACK_DETECTORS
from msmon.compat.template import CheckpointSaving, checkpoint_saving
from msmon.config.health import HealthSettings
from msmon.health.alert import Alert


@dataclass(frozen=True)
class Forecast:
    """What a rollback for the alert at ``alert_step`` would have done: ``checkpoint_step`` and ``skip_to`` (the data
    position the next attempt would start at), or ``refused`` saying why there would have been none."""

    detector: str
    alert_step: int
    onset_step: int
    checkpoint_step: int | None = None
    skip_to: int | None = None
    refused: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"onset_step": self.onset_step, "checkpoint_step": self.checkpoint_step, "skip_to": self.skip_to,
                "refused": self.refused}

    def describe(self) -> str:
        if self.refused is not None or self.checkpoint_step is None:
            return f"no rollback: {self.refused}"
        return (f"rollback to step {self.checkpoint_step}, skipping the data of steps {self.checkpoint_step + 1}-"
                f"{self.skip_to}")


def forecast(alerts: Sequence[Alert], settings: HealthSettings, config: Mapping[str, Any] | None) -> list[Forecast]:
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
        before = onset - rollback.margin_steps
        refused = _refused(alert.step, before, saving, skipped_until, done, rollback.max_rollbacks)
        if refused is not None or saving is None:
            found.append(Forecast(alert.detector, alert.step, onset, refused=refused))
            continue
        done += 1
        skipped_until = alert.step + rollback.skip_steps
        found.append(Forecast(alert.detector, alert.step, onset, saving.newest_before(before), skipped_until))
    return found


def _refused(step: int, before: int, saving: CheckpointSaving | None, skipped_until: int, done: int,
             budget: int) -> str | None:
    """Why the alert at ``step`` would not have rolled back (None: it would have)."""
    if step <= skipped_until:
        return "its data would have been skipped by the rollback before"
    if done >= budget:
        return f"no rollback left ({done} of {budget})"
    if saving is None:
        return "the config saves no checkpoint"
    newest = saving.newest_before(before)
    if newest == 0 or newest < saving.oldest_kept(step):
        return (f"no checkpoint kept before step {before} (every {saving.every_steps} steps, the last {saving.keep} "
                "kept)")
    return None
