"""The model FLOPs one device performs in a training step, as mindformers counts them where it does, else from the
model's config.

mindformers' ``MFLossMonitor`` counts them once, at the first step end: for a legacy model from the compiled graph
(MindSpore's ``flops_collection``, divided by the group size in a parallel run; graph mode only, not for a
GroupMatMul MoE or dynamic shapes), for an mcore model with Megatron's formula (``num_floating_point_operations``
over the global batch; the printed figure divides it by the device count). msmon reads that figure from the run's
own monitor, so its TFLOPS are the ones mindformers prints. Without that monitor, or where it counts nothing, msmon
uses the same formula from ``model.model_config``: dense and MoE (the experts a token is routed to, and the shared
ones), grouped-query attention, a gated MLP, causal attention, the logits; 3x for the forward and backward passes.
It equals mindformers' mcore figure; for the legacy quickstart it is 4.4% below the graph's count (docs/backends.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msmon.compat import use_legacy
from msmon.util.numbers import positive_int

MONITOR = "MFLossMonitor"


@dataclass(frozen=True)
class ModelFlops:
    """FLOPs per training step on one device, and where the figure comes from (``mindformers``: its monitor's
    count; ``config``: the formula over the model config)."""

    per_device: float
    source: str


def from_loss_monitor(callbacks: Any, config: Mapping[str, Any] | None, devices: int) -> ModelFlops | None:
    """The figure the run's ``MFLossMonitor`` prints from, per device, once it has counted it."""
    monitor = next((cb for cb in callbacks or () if type(cb).__name__ == MONITOR), None)
    full = getattr(monitor, "full_model_flops", None)
    if not getattr(monitor, "mf_calculated", False) or not isinstance(full, int | float) or full <= 0:
        return None
    if use_legacy(config or {}):  # already divided by the group size in a parallel run
        return ModelFlops(float(full), "mindformers")
    return ModelFlops(float(full) / max(1, int(getattr(monitor, "device_num", devices) or devices)), "mindformers")


def _int(model: Mapping[str, Any], *keys: str) -> int | None:
    return next((value for key in keys if (value := positive_int(model.get(key))) is not None), None)


def llama_ffn(hidden: int, model: Mapping[str, Any]) -> int:
    """The legacy LLaMA MLP width when the config gives none: 2/3 of 4 x hidden, scaled, rounded up to
    ``multiple_of`` (mindformers' LlamaFeedForward)."""
    width = int(2 * 4 * hidden / 3)
    multiplier = model.get("ffn_dim_multiplier")
    if isinstance(multiplier, int | float) and not isinstance(multiplier, bool):
        width = int(multiplier * width)
    multiple = _int(model, "multiple_of") or 256
    return multiple * ((width + multiple - 1) // multiple)


def transformer_flops(model: Mapping[str, Any], samples: int, seq: int) -> float | None:
    """Training FLOPs of one step over ``samples`` sequences of ``seq`` tokens (forward x 3), or None when the config
    lacks a size it needs."""
    layers = _int(model, "num_layers", "num_hidden_layers")
    hidden = _int(model, "hidden_size")
    heads = _int(model, "num_heads", "num_attention_heads")
    vocab = _int(model, "vocab_size", "padded_vocab_size")
    if not (layers and hidden and heads and vocab):
        return None
    kv_heads = _int(model, "n_kv_heads", "num_key_value_heads", "num_query_groups") or heads
    head_dim = _int(model, "head_dim", "kv_channels") or hidden // heads
    ffn = _int(model, "intermediate_size", "ffn_hidden_size") or llama_ffn(hidden, model)
    gated = str(model.get("hidden_act", "silu")).lower() in ("silu", "swiglu") or model.get("type") == "LlamaConfig"
    tokens = samples * seq
    attention = 4 * tokens * hidden * head_dim * (heads + kv_heads) + 2 * tokens * seq * heads * head_dim
    experts = _int(model, "num_experts", "num_moe_experts", "n_routed_experts")
    routed = _int(model, "moe_router_topk", "num_experts_per_tok") if experts else None
    expert_ffn = _int(model, "moe_ffn_hidden_size", "moe_intermediate_size") or ffn
    shared = _int(model, "moe_shared_expert_intermediate_size", "shared_expert_intermediate_size") or 0
    width = (routed or 1) * (expert_ffn if routed else ffn) + (shared if routed else 0)
    mlp = (6 if gated else 4) * tokens * hidden * width
    logits = 2 * tokens * hidden * vocab
    return 3.0 * (layers * (attention + mlp) + logits)


def model_flops(callbacks: Any, config: Mapping[str, Any] | None, samples: int, seq: int | None,
                devices: int) -> ModelFlops | None:
    """One device's FLOPs per step: mindformers' count, else the formula for this device's ``samples`` x ``seq``."""
    counted = from_loss_monitor(callbacks, config, devices)
    if counted is not None:
        return counted
    model = (((config or {}).get("model") or {}).get("model_config")) or {}
    flops = transformer_flops(model, samples, seq) if isinstance(model, Mapping) and samples and seq else None
    return ModelFlops(flops, "config") if flops else None
