"""mindformers' own monitoring keys and msmon's nearest equivalent (docs/config.md's table), and MS012: the
two switched on for the same thing, where a run pays twice or two settings disagree."""

from __future__ import annotations

from dataclasses import dataclass

from msmon.findings import Finding, warning
from msmon.validate.context import CheckContext


@dataclass(frozen=True)
class Equivalent:
    """One mindformers monitoring key and what msmon offers for it."""

    key: str  # dotted, in the training config
    msmon: str  # msmon's key or metric ("-": nothing)
    note: str


EQUIVALENTS: tuple[Equivalent, ...] = (
    Equivalent("monitor_config.monitor_on", "enable_monitor", "switches mindformers' TrainingStateMonitor on; "
               "independent of msmon's callback"),
    Equivalent("monitor_config.step_interval", "log_interval", "how often mindformers' state monitor writes; msmon "
               "records every log_interval steps"),
    Equivalent("monitor_config.local_norm_format", "track_metrics: layer_grad_norm", "per-parameter gradient "
               "norms (mindformers, TensorDump; no CPU kernel) vs per-block norms from the train step's outputs"),
    Equivalent("monitor_config.device_local_norm_format", "track_metrics: layer_grad_norm", "as local_norm_format, "
               "summed per device"),
    Equivalent("monitor_config.local_loss_format", "track_metrics: loss", "per-micro-batch losses vs the step's loss"),
    Equivalent("monitor_config.device_local_loss_format", "track_metrics: loss", "as local_loss_format, per device"),
    Equivalent("monitor_config.optimizer_state_format", "-", "per-parameter optimizer state norms (costly)"),
    Equivalent("monitor_config.weight_state_format", "-", "per-parameter weight norms (costly)"),
    Equivalent("monitor_config.max_attention_logit_format", "-", "the largest attention logit per layer"),
    Equivalent("monitor_config.throughput_baseline", "health.throughput_drop", "mindformers logs throughput "
               "relative to it; msmon alerts on a lasting drop against its own baseline"),
    Equivalent("monitor_config.print_struct", "-", "prints the network structure once"),
    Equivalent("monitor_config.check_for_global_norm", "health.grad_explosion", "mindformers stops at the first "
               "global norm over the threshold; msmon alerts on the trend before it (MS009)"),
    Equivalent("monitor_config.global_norm_spike_threshold", "health.grad_explosion.absolute_threshold",
               "the same threshold; msmon's defaults to it (MS009)"),
    Equivalent("monitor_config.global_norm_spike_count_threshold", "-", "skips in a row before mindformers stops"),
    Equivalent("monitor_config.health_checkpoint", "health.grad_explosion", "1.9: where the spike settings live"),
    Equivalent("monitor_config.stable_rank_config", "-", "stable rank of weights"),
    Equivalent("monitor_config.dump_path", "save_dir", "where mindformers dumps local norms; msmon writes to "
               "save_dir (MS008)"),
    Equivalent("monitor_config.target", "-", "which parameters mindformers' state monitor covers"),
    Equivalent("monitor_config.invert", "-", "inverts target"),
    Equivalent("tensorboard.tensorboard_dir", "monitor_type: tensorboard", "mindformers' own TensorBoard writer "
               "(its scalars) vs msmon's backend (msmon's records)"),
    Equivalent("tensorboard.log_loss_scale_to_tensorboard", "track_metrics: loss_scale", ""),
    Equivalent("tensorboard.log_timers_to_tensorboard", "track_metrics: step_time_ms", ""),
    Equivalent("check_for_nan_in_loss_and_grad", "health.nonfinite", "mindformers raises at the first NaN; msmon "
               "alerts or stops gracefully (MS009)"),
    Equivalent("use_skip_data_by_global_norm", "health.grad_explosion", "mindformers skips the update; msmon "
               "records and alerts (MS009)"),
    Equivalent("callbacks: MFLossMonitor", "track_metrics: loss, learning_rate, throughput", "mindformers' step "
               "log line; msmon's loss equals its printed loss"),
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
                             "different steps", f"set monitor_config.log_interval: {interval} (or step_interval: "
                             f"{ctx.settings.log_interval})"))
    return found
