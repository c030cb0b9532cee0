"""Pre-flight learning-rate sanity (MS805-MS808): a peak the optimizer cannot train with, an ``lr_end`` above the
peak of a decaying schedule, a warm-up longer than the run, a schedule length that disagrees with the data; for
every schedule mindformers builds (``lr_schedule``, or each of ``grouped_lr_schedule``).

The schedules are read as the health detector reads them (``msmon.config.schedule``), without the
``monitor_config.health.learning_rate`` overrides: these checks are about what the config tells mindformers.
"""

from __future__ import annotations

import math

from msmon.compat.parallel import data_steps
from msmon.config.schedule import Schedule, read_schedule, stated_schedules
from msmon.findings import Finding, error, warning
from msmon.util.numbers import fmt_number, positive_int
from msmon.validate.context import CheckContext

#: Optimizer families (fragments of the lower-case ``optimizer.type``) -> (lowest, highest) plausible peak. Adam-style
#: optimizers normalise the step, so a peak above 1 moves every weight by about its own size per step: the loss
#: diverges within a few steps (measured: 1.e+4 leaves the CPU quickstart's network dead, loss ln(vocab), grad 0).
RANGES: tuple[tuple[tuple[str, ...], float, float], ...] = (
    (("adam", "lamb", "lion", "came", "muon"), 1e-7, 1.0),
    (("sgd", "momentum"), 1e-7, 10.0),
)
OTHER_RANGE = (1e-7, 10.0)


def plausible_range(optimizer: object) -> tuple[float, float]:
    """(lowest, highest) plausible peak learning rate for an ``optimizer.type``."""
    name = str(optimizer or "").lower()
    for fragments, low, high in RANGES:
        if any(fragment in name for fragment in fragments):
            return low, high
    return OTHER_RANGE


def check_peak(ctx: CheckContext, schedule: Schedule) -> list[Finding]:
    """MS805: a peak that cannot be meant (negative, not finite: errors) or is implausible for the optimizer
    (warnings: a learning-rate range test or a health-detector demo may mean it)."""
    peak, path = schedule.peak, f"{schedule.path}.learning_rate"
    if peak is None:
        return []
    if not math.isfinite(peak) or peak < 0:
        return [error("MS805", path, f"learning_rate {fmt_number(peak)} must be a finite, non-negative number",
                      "write e.g. learning_rate: 1.e-4")]
    if peak == 0:
        return [warning("MS805", path, "learning_rate 0: no weight ever moves", "write e.g. learning_rate: 1.e-4")]
    optimizer = ctx.get("optimizer.type") or "this optimizer"
    low, high = plausible_range(ctx.get("optimizer.type"))
    if peak > high:
        return [warning("MS805", path, f"learning_rate {fmt_number(peak)} is above {fmt_number(high)}, the highest "
                        f"plausible peak for {optimizer}: the loss diverges within a few steps",
                        "check the exponent: LLMs train with AdamW at about 1.e-5 to 1.e-3 (the CPU quickstart at "
                        "5.e-3)")]
    if peak < low:
        return [warning("MS805", path, f"learning_rate {fmt_number(peak)} is below {fmt_number(low)}: the weights "
                        "barely move (float32 rounding swallows most updates)", "check the exponent")]
    return []


def check_lr_end(ctx: CheckContext, schedule: Schedule) -> list[Finding]:
    """MS806: lr_end (min_lr) above the peak of a schedule that decays."""
    if not schedule.moves or schedule.peak is None or schedule.lr_end is None or schedule.lr_end <= schedule.peak:
        return []
    key = "lr_end" if ctx.has(f"{schedule.path}.lr_end") else "min_lr"
    return [error("MS806", f"{schedule.path}.{key}", f"{key} {fmt_number(schedule.lr_end)} is above the peak "
                  f"learning_rate {fmt_number(schedule.peak)}: the {schedule.type} schedule would raise the "
                  "learning rate after the warm-up instead of decaying it",
                  f"{key} is the final, lowest rate: e.g. a tenth of learning_rate")]


def run_steps(ctx: CheckContext) -> int | None:
    """The steps the run trains: runner_config.stop_step, else the data's steps."""
    return positive_int(ctx.get("runner_config.stop_step")) or data_steps(ctx.training)


def check_warmup(ctx: CheckContext, schedule: Schedule) -> list[Finding]:
    """MS807: a warm-up as long as the run or longer (the peak is never reached)."""
    steps = run_steps(ctx)
    ratio = schedule.warmup_ratio
    if schedule.warmup_steps is None and ratio is not None and ratio > 1:
        return [warning("MS807", f"{schedule.path}.warmup_ratio", f"warmup_ratio {fmt_number(ratio)} is above 1: the "
                        "warm-up is longer than the schedule and the learning rate never reaches its peak",
                        "warmup_ratio is a fraction of the steps: e.g. 0.03")]
    total = schedule.total_steps or steps
    warmup = schedule.warmup_steps
    if warmup is None and ratio is not None and total:
        warmup = int(ratio * total)
    if warmup is None or steps is None or warmup < steps:
        return []
    key = "warmup_steps" if schedule.warmup_steps is not None else "warmup_ratio"
    return [warning("MS807", f"{schedule.path}.{key}", f"the warm-up ({warmup} steps) is not shorter than the "
                    f"run ({steps} steps): the learning rate never reaches its peak",
                    "use a warm-up of a few percent of the run")]


def check_total_steps(ctx: CheckContext, schedule: Schedule) -> list[Finding]:
    """MS808: a decaying schedule whose total_steps differs from the steps the data and batch size give (single
    device, no sinking, no gradient accumulation: where msmon can count them as mindformers does)."""
    data = data_steps(ctx.training)
    if (not schedule.moves or schedule.total_steps is None or data is None or schedule.total_steps == data
            or ctx.get("use_parallel") is True or ctx.get("runner_config.sink_mode") is True
            or (positive_int(ctx.get("runner_config.gradient_accumulation_steps")) or 1) > 1):
        return []
    total = schedule.total_steps
    effect = (f"reaches its end at step {total} and stays there for the last {data - total} steps" if total < data
              else f"is cut off at step {data}, {total - data} steps before it has decayed")
    return [warning("MS808", f"{schedule.path}.total_steps", f"total_steps {total} differs from the {data} "
                    "steps the data gives (num_samples // batch_size x epochs): the schedule " + effect,
                    f"set {schedule.path}.total_steps: -1 (mindformers then uses the run's step count)")]


def check_learning_rate(ctx: CheckContext) -> list[Finding]:
    """Every MS805-MS808 finding of each schedule the config states."""
    found: list[Finding] = []
    for path, section in stated_schedules(ctx.training):
        schedule = read_schedule(ctx.training, path, section)
        found += [*check_peak(ctx, schedule), *check_lr_end(ctx, schedule), *check_warmup(ctx, schedule),
                  *check_total_steps(ctx, schedule)]
    return found
