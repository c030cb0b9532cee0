"""mindformers' own monitoring keys and msmon's nearest equivalent (docs/config.md's table), and MS012: the
two switched on for the same thing, where a run pays twice or two settings disagree."""

from __future__ import annotations

from dataclasses import dataclass

from msmon.findings import Finding, warning
from msmon.util.tables import shipped_rows
from msmon.validate.context import CheckContext


@dataclass(frozen=True)
class Equivalent:
    """One mindformers monitoring key and what msmon offers for it."""

    key: str  # dotted, in the training config
    msmon: str  # msmon's key or metric ("-": nothing)
    note: str


#: mf_equivalents.toml: one row a key.
EQUIVALENTS: tuple[Equivalent, ...] = tuple(
    Equivalent(row["key"], row["msmon"], row["note"]) for row in shipped_rows(__file__, "equivalent")
)


def check_duplicates(ctx: CheckContext) -> list[Finding]:
    """MS012: one thing measured or written twice, or two intervals that disagree."""
    found = []
    if ctx.get("tensorboard.tensorboard_dir") and "tensorboard" in ctx.settings.monitor_type:
        found.append(warning("MS012", "tensorboard.tensorboard_dir", "two TensorBoard writers: mindformers' own "
                             "(tensorboard.tensorboard_dir) and msmon's tensorboard backend write events for the "
                             "same run", "keep one: drop the tensorboard: section, or tensorboard from monitor_type"))
    norms = [key for key in ("local_norm_format", "device_local_norm_format") if ctx.get(f"monitor_config.{key}")]
    if norms and ctx.get("monitor_config.monitor_on") is True and "layer_grad_norm" in ctx.settings.track_metrics:
        found.append(warning("MS012", f"monitor_config.{norms[0]}", "the gradient norms are computed twice: "
                             f"mindformers' {norms[0]} (per parameter, written by its monitor) and msmon's "
                             "layer_grad_norm (per block)", "keep layer_grad_norm unless the per-parameter values "
                             "are needed"))
    interval = ctx.get("monitor_config.step_interval")
    if (ctx.get("monitor_config.monitor_on") is True and isinstance(interval, int) and not isinstance(interval, bool)
            and interval != ctx.settings.log_interval and ctx.settings.enable_monitor):
        found.append(warning("MS012", "monitor_config.step_interval", f"mindformers' state monitor writes every "
                             f"{interval} steps, msmon every {ctx.settings.log_interval}: their curves have "
                             "different steps", f"set monitor_config.log_interval: {interval} (or "
                             f"monitor_config.step_interval: {ctx.settings.log_interval})"))
    return found
