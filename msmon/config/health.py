"""The ``monitor_config.health`` section: one small settings class per detector, each value with its range."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

from msmon.config.fields import CLASS_DOC, doc
from msmon.probe import MAX_STEPS

Action = Literal["log", "alert", "stop"]
ACTION_DOC = "log (alerts.jsonl and msmon.log only), alert (every sink), or stop (alert, then a graceful stop: exit 4)"
RecoverableAction = Literal["log", "alert", "stop", "rollback"]
RECOVERABLE_ACTION_DOC = (ACTION_DOC + ", or rollback (alert, stop, train again from the newest checkpoint before the "
                          "onset with the bad data skipped: health.rollback)")
ProfilingAction = Literal["log", "alert", "stop", "profile"]
PROFILING_ACTION_DOC = (ACTION_DOC + ", or profile (alert, profile the next health.profile.steps steps of the affected "
                        "rank(s), then alert which operator types got slower than in the run's baseline profile)")


@dataclass(frozen=True)
class DetectorSettings:
    """Every detector's switch and action; each detector's settings class says in its docstring what it finds."""

    enabled: bool = doc(True, CLASS_DOC)
    action: Action = doc("alert", ACTION_DOC)


@dataclass(frozen=True)
class RecoverableDetectorSettings:
    """A detector that bad data sets off (a spike, a growth, a non-finite value): its action may be rollback."""

    enabled: bool = doc(True, CLASS_DOC)
    action: RecoverableAction = doc("alert", RECOVERABLE_ACTION_DOC)


@dataclass(frozen=True)
class ProfilingDetectorSettings:
    """A detector of slowness: its action may be profile (docs/probe.md)."""

    enabled: bool = doc(True, CLASS_DOC)
    action: ProfilingAction = doc("alert", PROFILING_ACTION_DOC)


@dataclass(frozen=True)
class NonFiniteSettings(RecoverableDetectorSettings):
    """alert the moment loss or grad_norm is NaN or Inf (grad_norm ignored on overflow steps)"""


@dataclass(frozen=True)
class ChanceLevelSettings(DetectorSettings):
    """alert from the first log, no warm-up, when the loss is worse than a uniform guess over the vocabulary"""

    vocab_size: int | None = doc(None, "tokens the guess picks from (default: model.model_config.vocab_size)",
                                 at_least=2)
    factor: float = doc(1.5, "a loss above factor x ln(vocab_size) is worse than chance ...", above=1.0)
    patience: int = doc(2, "... on this many consecutive logs", at_least=1)


@dataclass(frozen=True)
class GradNormBoundSettings(DetectorSettings):
    """alert from the first log, no warm-up, when grad_norm is absurd for this model: far above its value at step 1"""

    factor: float = doc(100.0, "a grad_norm above factor x its value at step 1 (the initialised model) ...",
                        above=1.0)
    patience: int = doc(2, "... on this many consecutive logs", at_least=1)


@dataclass(frozen=True)
class FlatStartSettings(DetectorSettings):
    """alert when a model trained from scratch has not left the chance level soon after the LR warm-up"""

    steps: int = doc(100, "training steps after the LR warm-up (after step 1 without one) by which the loss ...",
                     at_least=1)
    band: float = doc(0.02, "... must have left this fraction around ln(vocab_size), up or down", above=0.0,
                      at_most=1.0)


@dataclass(frozen=True)
class ReferenceDriftSettings(DetectorSettings):
    """alert when the run leaves the band of its reference runs (monitor_config.reference): which metric, the first
    step it parted, by how much"""

    metrics: list[str] = doc(["loss", "grad_norm", "learning_rate"],
                             "metrics compared with the references (positive ones: their log)")
    smooth_steps: int = doc(10, "a metric's level: the median of its logs over this many steps (run and references)",
                            at_least=1)
    spread_factor: float = doc(4.0, "the band: the references' centre +- this x their half-range ...", above=0.0)
    span_steps: int = doc(100, "... the largest half-range within this many steps either side ...", at_least=0)
    noise_factor: float = doc(6.0, "... never narrower than this x the references' own noise (one log's scatter about "
                              "its trend; two or more references) ...", at_least=0.0)
    tolerance: float = doc(0.05, "... and never narrower than this fraction (the band of a single reference)",
                           above=0.0)
    patience: int = doc(3, "consecutive logs outside the band before the alert", at_least=1)
    align: Literal["auto", "step", "samples"] = doc(
        "auto", "match steps by step, or by consumed samples (auto: samples when both global batch sizes are known "
        "and differ)"
    )


@dataclass(frozen=True)
class LossSpikeSettings(RecoverableDetectorSettings):
    """detect loss spikes against the recent level; spiking values never enter it"""

    warmup: int = doc(10, "logged steps that fill the baseline before the detector may fire", at_least=3)
    level_window: int = doc(5, "recent logged steps whose median is the loss level (short: the loss falls)", at_least=1)
    window: int = doc(20, "recent logged steps whose step-to-step changes measure the noise (trend-free)", at_least=3)
    ratio: float = doc(1.5, "a spike needs loss above ratio x the level ...", above=1.0)
    z_score: float = doc(4.0, "... and (loss - level) above this many noise sigmas ...", above=0.0)
    patience: int = doc(2, "... on this many consecutive logs ...", at_least=1)
    span_steps: int = doc(2, "... spanning at least this many steps (so 3 logs at log_interval 1)", at_least=0)


@dataclass(frozen=True)
class GradExplosionSettings(RecoverableDetectorSettings):
    """detect sustained exponential grad_norm growth against the run's own low"""

    settle_steps: int = doc(
        80, "training steps after the LR warm-up (grad norms rise early) before the baseline forms", at_least=0
    )
    window_steps: int = doc(60, "training steps over which the growth of log(grad_norm) is fitted", at_least=1)
    min_points: int = doc(
        9, "logged values in a fit: the window widens to this many logs at a sparse log_interval", at_least=3
    )
    growth_per_step: float = doc(0.005, "minimum fitted growth per training step (0.005 = 0.5%/step) ...", above=0.0)
    t_stat: float = doc(3.0, "... with a fit this many standard errors above zero ...", at_least=0.0)
    ratio: float = doc(
        1.5, "... and grad_norm above ratio x the lowest rolling median since the baseline formed ...", at_least=1.0
    )
    patience: int = doc(2, "... on this many consecutive logs", at_least=1)
    level_ratio: float = doc(
        3.0, "or: median of the last 5 logs above this x the low, with a robust upward trend", above=1.0
    )
    absolute_threshold: float | None = doc(
        None, "alert when grad_norm >= this value (default: mindformers' global_norm_spike_threshold when set)",
        above=0.0,
    )


@dataclass(frozen=True)
class DeadSeriesSettings(DetectorSettings):
    """detect grad_norm exactly 0 and tracked metrics exactly constant"""

    metrics: list[str] = doc(["loss", "grad_norm"], "metrics that must never stay exactly constant")
    window: int = doc(5, "logged steps a metric must stay exactly constant", at_least=2)
    zero_patience: int = doc(2, "consecutive logs of grad_norm exactly 0", at_least=1)


@dataclass(frozen=True)
class MoeCollapseSettings(RecoverableDetectorSettings):
    """alert when an MoE layer routes nearly every token to the same expert(s): names the layer and the experts"""

    top_k: int | None = doc(None, "experts each token is routed to (default: model.model_config.num_experts_per_tok "
                            "or moe_router_topk; silent without it)", at_least=1)
    fraction: float = doc(0.9, "collapse: an expert receives more than this fraction of the layer's tokens ...",
                          above=0.0, at_most=1.0)
    patience: int = doc(3, "... on this many consecutive logs", at_least=1)


@dataclass(frozen=True)
class MoeDeadExpertsSettings(RecoverableDetectorSettings):
    """alert when an expert of an MoE layer receives no token at all for a window of steps: names the layer and the
    experts"""

    steps: int = doc(50, "training steps an expert's tokens stay exactly 0 (on at least 2 logs)", at_least=1)


@dataclass(frozen=True)
class MoeImbalanceGrowthSettings(RecoverableDetectorSettings):
    """alert when an MoE layer's load imbalance (the cv of its tokens per expert) rises well above the layer's own
    low: names the layer and its busiest experts"""

    level_logs: int = doc(5, "a layer's level: the median cv of this many logs; its low: the lowest level so far",
                          at_least=1)
    rise: float = doc(0.25, "growth: the cv above the low + rise ...", above=0.0)
    ratio: float = doc(2.0, "... and above ratio x the low ...", above=1.0)
    patience: int = doc(3, "... on this many consecutive logs", at_least=1)


@dataclass(frozen=True)
class LearningRateSettings(DetectorSettings):
    """check the learning rate is finite, non-negative, and follows its schedule"""

    peak: float | None = doc(None, "peak learning rate (default: lr_schedule.learning_rate)", "MS804", above=0.0)
    warmup_steps: int | None = doc(
        None, "warm-up steps (default: lr_schedule warmup_steps or warmup_ratio)", at_least=0
    )
    constant_window: int = doc(10, "logged steps of exactly constant LR that count as a frozen schedule", at_least=2)
    zero_grace_steps: int = doc(10, "LR exactly 0 this many steps after the warm-up is a fault", at_least=0)
    tolerance: float = doc(1e-3, "relative tolerance of the peak check (float32 rounding)", at_least=0.0)


@dataclass(frozen=True)
class ThroughputDropSettings(ProfilingDetectorSettings):
    """detect throughput that stays below a fraction of its rolling median"""

    fraction: float = doc(
        0.7, "slow = the median of the last `patience` logs below fraction x the baseline median",
        above=0.0, at_most=1.0,
    )
    window: int = doc(50, "logged steps in the baseline median", at_least=1)
    warmup: int = doc(5, "logged values (after the first, which holds compilation) before it may fire", at_least=1)
    patience: int = doc(5, "logged steps whose median must be slow", at_least=1)
    min_steps: int = doc(
        150, "training steps the slowness must last (a burst of a neighbour on the host is no alert)", at_least=0
    )


@dataclass(frozen=True)
class SlowStepSettings(ProfilingDetectorSettings):
    """alert when one logged step takes far longer than the recent median (off by default: a busy host has such
    steps; turn it on to profile them)"""

    enabled: bool = doc(False, CLASS_DOC)
    factor: float = doc(5.0, "a slow step takes more than factor x the median of the recent logged steps ...",
                        above=1.0)
    min_excess_ms: float = doc(20.0, "... and at least this many milliseconds more", at_least=0.0)
    window: int = doc(20, "recent logged steps in the median (slow ones never enter it)", at_least=3)
    warmup: int = doc(5, "logged steps (after the first, which holds compilation) before it may fire", at_least=1)


@dataclass(frozen=True)
class StallSettings(DetectorSettings):
    """alert when no step has ended for the timeout (a hang)"""

    timeout_s: float | None = doc(None, "seconds without a step end; default calibrates from step times", above=0.0)
    factor: float = doc(10.0, "calibrated timeout = factor x the slowest recent step ...", at_least=1.0)
    floor_s: float = doc(60.0, "... but never less than this many seconds", above=0.0)
    recent: int = doc(
        50, "step times the calibration looks back on (the first step, compilation, never counts)", at_least=1
    )
    first_step_timeout_s: float = doc(
        3600.0, "timeout before the first step has ended (model build, compilation); timeout_s does not apply then",
        above=0.0,
    )
    slow_step_timeout_s: float = doc(
        1800.0, "timeout at the steps that save a checkpoint (CheckpointMonitor) or evaluate (do_eval): slow, not hung",
        at_least=0.0,
    )
    poll_s: float = doc(0.5, "how often msmon run's parent reads the ranks' heartbeats", at_least=0.05)


@dataclass(frozen=True)
class SlowRankSettings(ProfilingDetectorSettings):
    """name a rank whose time outside the step (or whole step time) stays above its peers'"""

    ratio: float = doc(1.5, "a slow rank's time is above ratio x the other ranks' median ...", above=1.0)
    min_excess_ms: float = doc(5.0, "... by at least this many milliseconds a step ...", at_least=0.0)
    window_steps: int = doc(50, "... at every logged step for this many training steps", at_least=1)
    skip_steps: int = doc(10, "training steps after a start or a restart that are not judged (compilation)",
                          at_least=0)


@dataclass(frozen=True)
class MemoryGrowthSettings(DetectorSettings):
    """alert when a rank's host or device memory grows steadily (a leak, fragmentation)"""

    window_steps: int = doc(100, "training steps over which the growth is fitted (a straight line) ...", at_least=2)
    min_growth_mb: float = doc(200.0, "... that must grow by at least this many MiB over the window ...", above=0.0)
    min_fit: float = doc(0.9, "... and fit a straight line this well (R squared: steady growth, not one jump)",
                         at_least=0.0, at_most=1.0)
    skip_steps: int = doc(20, "training steps after a start or a restart that are not fitted (warm-up allocations)",
                          at_least=0)
    device_capacity_gb: float | None = doc(
        None, "the device's memory (time left to it in the alert); default: not known, the growth rate only",
        above=0.0,
    )


@dataclass(frozen=True)
class RollbackSettings:
    max_rollbacks: int = doc(3, "rollbacks per run; one more anomaly then stops the run (exit 4)", at_least=0)
    margin_steps: int = doc(
        0, "the checkpoint rolled back to is saved at least this many steps before the anomaly's onset", at_least=0
    )
    skip_steps: int = doc(
        100, "the data skipped reaches this many steps past the alert (PaLM skipped 200-500 batches)", at_least=0
    )


@dataclass(frozen=True)
class ProfileActionSettings:
    steps: int = doc(5, "steps profiled after an alert whose action is profile, and in the baseline", at_least=1,
                     at_most=MAX_STEPS)
    baseline_step: int = doc(
        20, "with a profile action on: the baseline profile begins after this training step (past compilation)",
        at_least=1,
    )
    slower_ratio: float = doc(1.2, "an operator type is slower when its time a step is above this x the baseline's",
                              above=1.0)
    max_profiles: int = doc(5, "alert profiles per run (the baseline not counted)", at_least=0)
    max_disk_mb: float = doc(500.0, "no new profile once the run's profiles/ holds this many MB", above=0.0)


ChatService = Literal["feishu", "lark", "dingtalk", "wecom", "slack"]


@dataclass(frozen=True)
class ChatTarget:
    service: ChatService = doc("slack", "feishu, lark, dingtalk, wecom or slack (docs/health.md, \"Team chat\")")
    url: str = doc("", "the robot's webhook URL (write it as ${oc.env:NAME}: it is a secret)", "MS809")
    secret_env: str | None = doc(None, "environment variable holding the signing secret (feishu, dingtalk)", "MS809")
    min_interval_s: float | None = doc(None, "seconds between two messages; default the service's limit",
                                       at_least=0.0)


@dataclass(frozen=True)
class AlertSettings:
    webhook_url: str | None = doc(None, "HTTP(S) URL that receives each alert as a JSON POST (its own thread)", "MS802")
    webhook_timeout_s: float = doc(5.0, "timeout of one webhook POST", above=0.0)
    command: list[str] | None = doc(None, "argv run for each alert (own thread); the alert JSON is on stdin", "MS803")
    command_timeout_s: float = doc(30.0, "the command hook is killed after this many seconds", above=0.0)
    chat: list[ChatTarget] = doc([], "team chat robots that get each alert and the run's end", "MS809")
    queue_size: int = doc(100, "alerts waiting for the webhook or the command; beyond it they are dropped", at_least=1)
    rate_limit_s: float = doc(
        300.0, "minimum seconds between two alerts of one detector (critical beats warning)", at_least=0.0
    )
    distributions_logs: int = doc(
        3, "after a grad_explosion, loss_spike or nonfinite alert: histograms of each layer group's weights, "
        "updates and gradients at the next N logging steps (the distributions probe, docs/probe.md); 0: none",
        at_least=0,
    )


@dataclass(frozen=True)
class HealthSettings:
    """``monitor_config.health``: the detectors, the rollback and profile budgets, and where alerts go."""

    enabled: bool = doc(True, "run the health detectors and the stall check")
    nonfinite: NonFiniteSettings = field(default_factory=NonFiniteSettings)
    chance_level: ChanceLevelSettings = field(default_factory=ChanceLevelSettings)
    grad_norm_bound: GradNormBoundSettings = field(default_factory=GradNormBoundSettings)
    flat_start: FlatStartSettings = field(default_factory=FlatStartSettings)
    reference_drift: ReferenceDriftSettings = field(default_factory=ReferenceDriftSettings)
    loss_spike: LossSpikeSettings = field(default_factory=LossSpikeSettings)
    grad_explosion: GradExplosionSettings = field(default_factory=GradExplosionSettings)
    dead_series: DeadSeriesSettings = field(default_factory=DeadSeriesSettings)
    learning_rate: LearningRateSettings = field(default_factory=LearningRateSettings)
    moe_collapse: MoeCollapseSettings = field(default_factory=MoeCollapseSettings)
    moe_dead_experts: MoeDeadExpertsSettings = field(default_factory=MoeDeadExpertsSettings)
    moe_imbalance_growth: MoeImbalanceGrowthSettings = field(default_factory=MoeImbalanceGrowthSettings)
    throughput_drop: ThroughputDropSettings = field(default_factory=ThroughputDropSettings)
    stall: StallSettings = field(default_factory=StallSettings)
    slow_rank: SlowRankSettings = field(default_factory=SlowRankSettings)
    slow_step: SlowStepSettings = field(default_factory=SlowStepSettings)
    memory_growth: MemoryGrowthSettings = field(default_factory=MemoryGrowthSettings)
    rollback: RollbackSettings = field(default_factory=RollbackSettings)
    profile: ProfileActionSettings = field(default_factory=ProfileActionSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)


#: The detectors whose anomalies a rollback can cure (action ``rollback``): those whose settings are recoverable.
ROLLBACK_DETECTORS: tuple[str, ...] = tuple(
    name for name, tp in typing.get_type_hints(HealthSettings).items()
    if isinstance(tp, type) and issubclass(tp, RecoverableDetectorSettings)
)

#: The detectors whose alerts may profile the slow steps (action ``profile``).
PROFILE_DETECTORS: tuple[str, ...] = tuple(
    name for name, tp in typing.get_type_hints(HealthSettings).items()
    if isinstance(tp, type) and issubclass(tp, ProfilingDetectorSettings)
)
