"""The ``monitor_config.health`` section: one small settings class per detector."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from msmon.config.fields import doc

Action = Literal["log", "alert", "stop"]


@dataclass(frozen=True)
class NonFiniteSettings:
    enabled: bool = doc(True, "raise an alert the moment loss or grad_norm is NaN or Inf")
    action: Action = doc("alert", "log, alert, or stop (graceful stop, exit code 4)")


@dataclass(frozen=True)
class LossSpikeSettings:
    enabled: bool = doc(True, "detect loss spikes against a robust running baseline")
    action: Action = doc("alert", "log, alert, or stop")
    warmup: int = doc(20, "logged steps before the detector may fire")
    window: int = doc(50, "logged steps in the rolling baseline (median and MAD)")
    ratio: float = doc(1.5, "a spike needs loss above ratio x the rolling median")
    z_score: float = doc(6.0, "and a robust z-score (MAD based) above this value")
    patience: int = doc(2, "consecutive spiking logs before an alert")


@dataclass(frozen=True)
class GradExplosionSettings:
    enabled: bool = doc(True, "detect sustained grad_norm growth against the run's own baseline")
    action: Action = doc("alert", "log, alert, or stop")
    warmup: int = doc(10, "logged steps that form the early robust baseline")
    window: int = doc(10, "logged steps in the growth-slope window")
    growth_per_step: float = doc(0.005, "minimum fitted growth of log(grad_norm) per training step")
    ratio: float = doc(3.0, "and grad_norm above ratio x the early baseline")
    absolute_threshold: float | None = doc(
        None, "mindformers' global_norm_spike_threshold: alert when grad_norm >= this value"
    )


@dataclass(frozen=True)
class DeadSeriesSettings:
    enabled: bool = doc(True, "detect grad_norm exactly 0 and metrics exactly constant")
    action: Action = doc("alert", "log, alert, or stop")
    window: int = doc(5, "logged steps a metric must stay exactly constant")


@dataclass(frozen=True)
class LearningRateSettings:
    enabled: bool = doc(True, "check the learning rate is finite, non-negative, and follows its schedule")
    action: Action = doc("alert", "log, alert, or stop")
    peak: float | None = doc(None, "configured peak learning rate (default: read from lr_schedule)")
    warmup_steps: int | None = doc(None, "warm-up steps of the schedule (default: read from lr_schedule)")
    constant_window: int = doc(20, "logged steps of exactly constant LR that count as a frozen schedule")


@dataclass(frozen=True)
class ThroughputDropSettings:
    enabled: bool = doc(True, "detect throughput below a fraction of the rolling median")
    action: Action = doc("alert", "log, alert, or stop")
    fraction: float = doc(0.5, "alert below this fraction of the rolling median")
    window: int = doc(20, "logged steps in the rolling median")
    patience: int = doc(3, "consecutive slow logs before an alert")


@dataclass(frozen=True)
class StallSettings:
    enabled: bool = doc(True, "watch for steps that stop ending (a hang)")
    action: Action = doc("alert", "log, alert, or stop")
    timeout_s: float | None = doc(None, "seconds without a step end; default calibrates from step times")
    factor: float = doc(10.0, "auto timeout = factor x the slowest recent step ...")
    floor_s: float = doc(60.0, "... but never less than this many seconds")


@dataclass(frozen=True)
class AlertSettings:
    webhook_url: str | None = doc(None, "HTTP(S) URL that receives each alert as a JSON POST")
    webhook_timeout_s: float = doc(5.0, "timeout of one webhook POST")
    command: list[str] | None = doc(None, "argv run for each alert; the alert JSON is on its stdin")
    rate_limit_s: float = doc(300.0, "minimum seconds between two alerts of the same detector")


@dataclass(frozen=True)
class HealthSettings:
    enabled: bool = doc(True, "run the health detectors and the stall watchdog")
    nonfinite: NonFiniteSettings = field(default_factory=NonFiniteSettings)
    loss_spike: LossSpikeSettings = field(default_factory=LossSpikeSettings)
    grad_explosion: GradExplosionSettings = field(default_factory=GradExplosionSettings)
    dead_series: DeadSeriesSettings = field(default_factory=DeadSeriesSettings)
    learning_rate: LearningRateSettings = field(default_factory=LearningRateSettings)
    throughput_drop: ThroughputDropSettings = field(default_factory=ThroughputDropSettings)
    stall: StallSettings = field(default_factory=StallSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
