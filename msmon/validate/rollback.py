"""Checks of ``action: rollback`` (MS810-MS812): the run saves the checkpoints a rollback goes back to, often enough
and keeps them long enough that one still lies before an anomaly's onset when the anomaly is found; the data skipped
past a bad window leaves data to train on."""

from __future__ import annotations

from msmon.compat.parallel import data_steps
from msmon.compat.template import checkpoint_saving
from msmon.config.health import ROLLBACK_DETECTORS, HealthSettings
from msmon.findings import Finding, error, warning
from msmon.validate.context import CheckContext

BASE = "monitor_config.health"
LITTLE_DATA = 0.1  # MS812: skip_steps and margin_steps together at least this share of the data


def detection_lag(health: HealthSettings, detector: str, log_interval: int) -> int:
    """About how many steps after its onset a detector finds an anomaly (its onset_step goes back that far)."""
    if detector == "loss_spike":
        spike = health.loss_spike
        return max(spike.patience * log_interval, spike.span_steps + log_interval)
    if detector == "grad_explosion":
        growth = health.grad_explosion
        return max(growth.window_steps, growth.min_points * log_interval) + growth.patience * log_interval
    return log_interval


def check_rollback(ctx: CheckContext) -> list[Finding]:
    """MS810: a rollback action without a CheckpointMonitor; MS811 (warning): checkpoints too sparse or too few to
    cover a rollback, or no rollback allowed."""
    health = ctx.settings.health
    rolling = [name for name in ROLLBACK_DETECTORS if getattr(health, name).action == "rollback"]
    if not health.enabled or not rolling:
        return []
    where = f"{BASE}.{rolling[0]}.action"
    saving = checkpoint_saving(ctx.training)
    if saving is None:
        return [error("MS810", where, "action rollback needs checkpoints to go back to, and the config saves none",
                      "add a CheckpointMonitor callback (save_checkpoint_steps, keep_checkpoint_max)")]
    found = []
    if health.rollback.max_rollbacks == 0:
        found.append(warning("MS811", f"{BASE}.rollback.max_rollbacks", "max_rollbacks is 0: action rollback stops "
                             "the run as stop would", "allow a few rollbacks (default 3)"))
    lag = max(detection_lag(health, name, ctx.settings.log_interval) for name in rolling)
    reach = lag + health.rollback.margin_steps
    if not saving.reaches_back(reach):
        needed = 2 + -(-reach // saving.every_steps)
        found.append(warning(
            "MS811", where, f"the CheckpointMonitor keeps {saving.keep} checkpoints {saving.every_steps} steps apart; "
            f"an anomaly is found up to about {lag} steps after its onset, and then no kept checkpoint may lie "
            f"{health.rollback.margin_steps} steps before the onset (a rollback would stop the run instead)",
            f"set {saving.path}.{saving.keep_key}: {needed}, or save more often"))
    steps, skip = data_steps(ctx.training), health.rollback.skip_steps
    if steps is not None and skip + health.rollback.margin_steps >= steps * LITTLE_DATA:
        found.append(warning(
            "MS812", f"{BASE}.rollback.skip_steps", f"skip_steps {skip} is {skip / steps:.0%} of the data's {steps} "
            f"steps: a rollback after an anomaly in the last {skip} steps skips to the data's end (its margin "
            "shortened), and one whose bad window reaches the end leaves nothing to train: the run ends there, its "
            "data exhausted", f"use a skip_steps of a few percent of the run, e.g. {max(1, steps // 50)}"))
    return found
