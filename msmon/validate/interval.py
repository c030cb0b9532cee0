"""log_interval: >= 1, not wastefully small, not larger than the run; the flight recorder's ranges (MS4xx)."""

from __future__ import annotations

from msmon.compat.parallel import data_steps
from msmon.config.coerce import range_findings
from msmon.findings import Finding, error, warning
from msmon.util.numbers import positive_int
from msmon.validate.context import CheckContext

PATH = "monitor_config.log_interval"
MANY_METRICS = 5


def total_steps(ctx: CheckContext) -> int | None:
    """The run's step count when the config states it: stop_step, lr_schedule.total_steps, or the data's steps."""
    for key in ("runner_config.stop_step", "lr_schedule.total_steps"):
        if steps := positive_int(ctx.get(key)):
            return steps
    return data_steps(ctx.training)


def check_interval(ctx: CheckContext) -> list[Finding]:
    interval = ctx.settings.log_interval
    if interval < 1:
        return [error("MS401", PATH, f"log_interval must be >= 1, got {interval}", "use 10 to 20 for long runs")]
    if interval == 1 and len(ctx.settings.track_metrics) >= MANY_METRICS:
        return [
            warning(
                "MS402",
                PATH,
                f"log_interval 1 with {len(ctx.settings.track_metrics)} metrics reads device values every step "
                "(a host-device sync on Ascend)",
                "use 10 to 20: loss curves do not change within a few steps",
            )
        ]
    steps = total_steps(ctx)
    if steps is not None and interval > steps:
        return [
            warning(
                "MS403",
                PATH,
                f"log_interval {interval} is larger than the run's {steps} steps: nothing would be logged",
                f"use a log_interval below {steps}",
            )
        ]
    return []


def check_flight_recorder(ctx: CheckContext) -> list[Finding]:
    """``flight_recorder.steps`` and ``max_files`` within their ranges (docs/health.md)."""
    return range_findings(ctx.settings.flight_recorder, "monitor_config.flight_recorder", "MS404")
