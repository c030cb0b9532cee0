"""The detectors, one module each, built from ``monitor_config.health`` and the training config."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from msmon.compat import global_norm_spike_threshold
from msmon.compat.template import checkpoint_saving
from msmon.config.health import HealthSettings
from msmon.config.hyperparameters import hyperparameters
from msmon.config.metrics import TOP_K_KEYS
from msmon.config.schedule import schedule_from_config
from msmon.foreign import ConfigValue
from msmon.health.detectors.base import Detector
from msmon.health.detectors.chance_level import ChanceLevelDetector
from msmon.health.detectors.dead_series import DeadSeriesDetector
from msmon.health.detectors.flat_start import FlatStartDetector
from msmon.health.detectors.grad_explosion import GradExplosionDetector
from msmon.health.detectors.grad_norm_bound import GradNormBoundDetector
from msmon.health.detectors.learning_rate import LearningRateDetector
from msmon.health.detectors.loss_spike import LossSpikeDetector
from msmon.health.detectors.moe_collapse import MoeCollapseDetector
from msmon.health.detectors.moe_dead_experts import MoeDeadExpertsDetector
from msmon.health.detectors.moe_imbalance_growth import MoeImbalanceGrowthDetector
from msmon.health.detectors.nonfinite import NonFiniteDetector
from msmon.health.detectors.reference_drift import ReferenceDriftDetector
from msmon.health.detectors.slow_step import SlowStepDetector
from msmon.health.detectors.stall import StallDetector
from msmon.health.detectors.throughput_drop import ThroughputDropDetector
from msmon.reference.band import ReferenceBand
from msmon.util.mapping import dotted_get
from msmon.util.numbers import positive_int


def slow_step_intervals(config: Mapping[str, ConfigValue] | None) -> tuple[int, ...]:
    """Step intervals whose step ends are slow by design: CheckpointMonitor's ``save_checkpoint_steps``
    (mindformers' default 1) and, with ``do_eval``, ``eval_step_interval`` (default 100)."""
    config = config or {}
    found: list[int] = []
    saving = checkpoint_saving(config)
    if saving is not None:
        found.append(saving.every_steps)
    if config.get("do_eval") is True:
        found.extend(filter(None, [positive_int(config.get("eval_step_interval", 100))]))
    return tuple(found)


def vocab_size(config: Mapping[str, ConfigValue] | None, given: int | None = None) -> int | None:
    """The vocabulary a uniform guess picks from: ``given`` (``health.chance_level.vocab_size``), else the model
    config's (msmon.config.hyperparameters reads it)."""
    if given is not None:
        return given
    value = hyperparameters(config).get("vocab_size")
    return positive_int(value)


def moe_top_k(config: Mapping[str, ConfigValue] | None, given: int | None = None) -> int | None:
    """The experts each token is routed to: ``given`` (``health.moe_collapse.top_k``), else the model config's."""
    if given is not None:
        return given
    model = dotted_get(config or {}, "model.model_config")
    found = (positive_int(model.get(key)) for key in TOP_K_KEYS) if isinstance(model, Mapping) else iter(())
    return next((value for value in found if value is not None), None)


def build_detectors(settings: HealthSettings, config: Mapping[str, ConfigValue] | None = None,
                    reference: ReferenceBand | None = None) -> list[Detector]:
    """The enabled detectors in a fixed order (the same list live and in replay); ``reference_drift`` with a
    reference band only."""
    schedule = schedule_from_config(config, settings.learning_rate)
    grad, chance = settings.grad_explosion, settings.chance_level
    vocab = vocab_size(config, chance.vocab_size)
    threshold = grad.absolute_threshold if grad.absolute_threshold is not None else global_norm_spike_threshold(config)
    candidates: list[tuple[bool, Callable[[], Detector]]] = [
        (settings.nonfinite.enabled, lambda: NonFiniteDetector(settings.nonfinite)),
        (chance.enabled, lambda: ChanceLevelDetector(chance, vocab)),
        (settings.grad_norm_bound.enabled, lambda: GradNormBoundDetector(settings.grad_norm_bound)),
        (settings.flat_start.enabled, lambda: FlatStartDetector(settings.flat_start, vocab, schedule)),
        (settings.dead_series.enabled, lambda: DeadSeriesDetector(settings.dead_series)),
        (settings.loss_spike.enabled, lambda: LossSpikeDetector(settings.loss_spike)),
        (grad.enabled, lambda: GradExplosionDetector(grad, schedule, threshold)),
        (settings.moe_collapse.enabled,
         lambda: MoeCollapseDetector(settings.moe_collapse, moe_top_k(config, settings.moe_collapse.top_k))),
        (settings.moe_dead_experts.enabled, lambda: MoeDeadExpertsDetector(settings.moe_dead_experts)),
        (settings.moe_imbalance_growth.enabled, lambda: MoeImbalanceGrowthDetector(settings.moe_imbalance_growth)),
        (settings.learning_rate.enabled, lambda: LearningRateDetector(settings.learning_rate, schedule)),
        (settings.throughput_drop.enabled, lambda: ThroughputDropDetector(settings.throughput_drop)),
        (settings.slow_step.enabled, lambda: SlowStepDetector(settings.slow_step, slow_step_intervals(config))),
        (settings.stall.enabled, lambda: StallDetector(settings.stall, slow_step_intervals(config))),
    ]
    detectors: list[Detector] = [make() for enabled, make in candidates if enabled]
    if reference is not None and settings.reference_drift.enabled:
        detectors.append(ReferenceDriftDetector(settings.reference_drift, reference))
    return detectors
