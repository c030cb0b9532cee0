"""The metric catalogue: canonical names, aliases, and which training config exposes each metric.

One table answers "does this training really produce that series?" so `msmon validate` can refuse a
tracked metric that would otherwise be drawn as a flat line of placeholder zeros.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from msmon.foreign import ConfigValue
from msmon.util.jsonfiles import JsonValue
from msmon.util.numbers import as_number

CORE_METRICS: tuple[str, ...] = ("loss", "grad_norm", "learning_rate", "throughput", "global_step")

#: Wrappers that return mindformers' 5-tuple (loss, overflow, loss_scale, learning_rate, global_norm).
MF_WRAPPERS: frozenset[str] = frozenset(
    {"MFTrainOneStepCell", "MFPipelineWithLossScaleCell", "MsmonCPUTrainOneStepCell"}
)


@dataclass(frozen=True)
class Exposure:
    """Whether a training config produces a metric, and the change that makes it do so."""

    exposed: bool
    fix: str = ""


def _wrapper(cfg: Mapping[str, ConfigValue]) -> Mapping[str, ConfigValue] | None:
    wrapper = cfg.get("runner_wrapper")
    return wrapper if isinstance(wrapper, Mapping) else None


def _always(cfg: Mapping[str, ConfigValue]) -> Exposure:
    return Exposure(True)


def _grad_norm(cfg: Mapping[str, ConfigValue]) -> Exposure:
    wrapper = _wrapper(cfg)
    if wrapper is None:  # mindformers' template default: MFTrainOneStepCell with use_clip_grad True
        return Exposure(True)
    if wrapper.get("type") not in MF_WRAPPERS:
        return Exposure(
            False,
            f"runner_wrapper.type {wrapper.get('type')!r} returns no global norm; "
            "use MFTrainOneStepCell with use_clip_grad: True",
        )
    if wrapper.get("use_clip_grad") is not True:
        return Exposure(False, "set runner_wrapper.use_clip_grad: True (the global norm is computed while clipping)")
    return Exposure(True)


def _loss_scale(cfg: Mapping[str, ConfigValue]) -> Exposure:
    wrapper = _wrapper(cfg)
    if wrapper is None or wrapper.get("type") in MF_WRAPPERS:
        return Exposure(True)
    return Exposure(False, "use a loss-scale runner_wrapper such as MFTrainOneStepCell with a scale_sense")


def _layer_grad_norm(cfg: Mapping[str, ConfigValue]) -> Exposure:
    """Per-group norms come from the wrapper's per-gradient squared sums; msmon turns them on (config.split)."""
    wrapper = _wrapper(cfg)
    if wrapper is None:
        return Exposure(False, "add runner_wrapper: {type: MFTrainOneStepCell, use_clip_grad: True} (without a "
                        "train-step wrapper the step returns only the loss; msmon sets its local_norm itself)")
    if wrapper.get("type") not in MF_WRAPPERS:
        return Exposure(False, f"runner_wrapper.type {wrapper.get('type')!r} returns no per-gradient norms; use "
                        "MFTrainOneStepCell or MFPipelineWithLossScaleCell (msmon sets their local_norm itself)")
    return Exposure(True)


def _local_norm(cfg: Mapping[str, ConfigValue]) -> Exposure:
    wrapper = _wrapper(cfg)
    if wrapper is not None and wrapper.get("local_norm") is True:
        return Exposure(True)
    return Exposure(False, "set runner_wrapper.local_norm: True")


def _moe_routing(cfg: Mapping[str, ConfigValue]) -> Exposure:
    """The routers keep per-expert token shares only for ``gbs_aux_loss`` (msmon.engine.routing)."""
    model = cfg.get("model")
    model_config = model.get("model_config") if isinstance(model, Mapping) else None
    model_config = model_config if isinstance(model_config, Mapping) else {}
    if not any(model_config.get(key) for key in MOE_EXPERT_KEYS):
        return Exposure(False, "a mixture-of-experts model (model.model_config.num_experts) routes tokens; this "
                        "one has no experts")
    balancing = model_config.get("moe_router_load_balancing_type", "sub_seq_aux_loss")
    if balancing != "gbs_aux_loss":
        return Exposure(False, f"moe_router_load_balancing_type {balancing!r} keeps no per-expert token counts; "
                        "gbs_aux_loss does (msmon reads them, no extra pass)")
    return Exposure(True)


#: ``model_config`` keys mindformers reads as the number of routed experts (transformer_config_utils).
MOE_EXPERT_KEYS = ("num_experts", "num_moe_experts", "n_routed_experts", "expert_num")
#: mindformers' spellings of the experts each token is routed to (transformer_config_utils), the usual one first.
TOP_K_KEYS = ("num_experts_per_tok", "moe_router_topk", "num_experts_chosen")


@dataclass(frozen=True)
class MetricSpec:
    """One trackable metric."""

    name: str
    description: str
    aliases: tuple[str, ...] = ()
    exposure: Callable[[Mapping[str, ConfigValue]], Exposure] = _always
    code: str = "MS302"  # the finding when the training config does not produce it


METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec("loss", "training loss of the step"),
        MetricSpec("grad_norm", "global gradient norm (mindformers' global_norm)", ("global_norm",), _grad_norm),
        MetricSpec("learning_rate", "learning rate applied at the step", ("lr",)),
        MetricSpec(
            "throughput",
            "tokens/s over all devices (samples/s and per-device values are recorded beside it)",
            ("train_throughput", "train_throughput_per_npu", "tokens_per_s"),
        ),
        MetricSpec("global_step", "global step number, the shared x axis", ("step", "cur_step_num")),
        MetricSpec("step_time_ms", "wall time of the step in milliseconds", ("per_step_time",)),
        MetricSpec("loss_scale", "current loss scale of the loss-scale wrapper", ("scale_sense",), _loss_scale),
        MetricSpec("overflow", "1 when the step overflowed and was skipped, else 0", (), _loss_scale),
        MetricSpec("epoch", "current epoch number", ("cur_epoch_num",)),
        MetricSpec("host_memory_mb", "resident memory of the training process on the host", ("memory",)),
        MetricSpec("local_norm", "per-group local gradient norms (max is logged)", (), _local_norm),
        MetricSpec(
            "layer_grad_norm",
            "gradient norm of each block (layers.N), the embedding, the final norm, the output head and the rest, "
            "as grad_norm/<group>; msmon turns the wrapper's local_norm on",
            (),
            _layer_grad_norm,
            "MS304",
        ),
        MetricSpec(
            "moe_routing",
            "tokens routed to each expert of each MoE layer since the previous logging step, as moe/layer_<i>/"
            "expert_<e>, with moe/layer_<i>/max_load, cv and idle_experts (gbs_aux_loss routers)",
            (),
            _moe_routing,
        ),
        MetricSpec(
            "layer_update_ratio",
            "weight norm and update-to-weight ratio (update norm over weight norm) of each group of "
            "layer_grad_norm, as weight_norm/<group> and update_ratio/<group>, at logging steps (on with "
            "layer_grad_norm)",
        ),
    )
}

#: Record keys of the MoE routing records: ``moe/layer_0/expert_3``, ``moe/layer_0/cv``, ...
MOE_PREFIX = "moe/"


def is_expert_tokens(key: str) -> bool:
    """Whether a record key is one expert's token count (``moe/layer_0/expert_3``), not a layer's summary."""
    return key.startswith(MOE_PREFIX) and "/expert_" in key


#: Record keys of the per-group gradient norms: ``grad_norm/layers.0``, ``grad_norm/embedding``, ...
GROUP_NORM_PREFIX = "grad_norm/"


#: ... and of the layer summaries (``layer_update_ratio``): each group's weight norm and ||dw|| / ||w||.
WEIGHT_NORM_PREFIX = "weight_norm/"
UPDATE_RATIO_PREFIX = "update_ratio/"
GROUP_PREFIXES = (GROUP_NORM_PREFIX, WEIGHT_NORM_PREFIX, UPDATE_RATIO_PREFIX)


def norm_group(key: str, prefix: str = GROUP_NORM_PREFIX) -> str | None:
    """The group of a per-group key of ``prefix`` (``grad_norm/layers.3`` -> ``layers.3``), else None."""
    return key[len(prefix):] if key.startswith(prefix) else None


def is_group_key(key: str) -> bool:
    """A per-group series (gradient norm, weight norm, update ratio): drawn as a heatmap, not a plot of its own."""
    return key.startswith(GROUP_PREFIXES)


ALIASES: dict[str, str] = {alias: spec.name for spec in METRICS.values() for alias in spec.aliases}


def canonical_metric(name: str) -> str | None:
    """The canonical metric name for ``name`` or an alias of it; None when unknown."""
    if name in METRICS:
        return name
    return ALIASES.get(name)


def known_metric_names() -> list[str]:
    """Every accepted spelling, canonical names first."""
    return [*METRICS, *ALIASES]


def nonfinite_values(record: Mapping[str, JsonValue]) -> dict[str, float]:
    """The NaN/Inf values of ``record`` that mean divergence (the ``nonfinite`` detector's rule, and the rank
    heartbeat's): loss, grad_norm and loss_mean (loss_mean only when the loss itself is finite); a non-finite
    grad_norm alone on a step the loss-scale wrapper flagged as overflow is expected (the update is skipped)."""
    bad = {}
    for key in ("loss", "grad_norm", "loss_mean"):
        value = as_number(record.get(key))
        if value is not None and not math.isfinite(value):
            bad[key] = value
    if "loss" in bad:
        bad.pop("loss_mean", None)
    if "grad_norm" in bad and "loss" not in bad and "loss_mean" not in bad:
        overflow = record.get("overflow")
        if overflow is True or bool(as_number(overflow)):
            del bad["grad_norm"]
    return bad
