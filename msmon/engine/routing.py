"""MoE routing records: the tokens each expert of each MoE layer received, from what the router already computes for
its load-balancing loss (no extra pass), with their summaries.

With ``moe_router_load_balancing_type: gbs_aux_loss`` (the shipped Qwen3-MoE configs) every router adds, at every
forward, each expert's share of the step's ``k * N`` routed token slots (``f_i``) into its parameter ``fi_accu``;
``MFLossMonitor`` zeroes it at every step end through one method (``_reset_accu_gbs_fi``), before msmon's callback
runs. ``install`` wraps that method: it adds the shares first, per layer, into a window kept on the device (queued
adds, no read; on a CPU, where the device is the host, a copy of the shares summed in host memory: a read there is
no sync and costs a tenth of an op launch), which ``take`` reads and empties at a logging step; only while
``moe_routing`` is tracked (``enable``), else nothing is done. Tokens per
expert = share * k * N summed over the window's forwards, N being the tokens of one forward on this rank (the batch
tensor's size). The other balancing types keep no shares: nothing is recorded for them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from msmon.compat import ROUTING_SHARES
from msmon.config.metrics import MOE_PREFIX
from msmon.engine.wrap import entry_for, wrap_once
from msmon.foreign import Callback, CallbackParams, Cell, Passed, Tensor

_window: dict[int, Tensor] = {}  # layer index -> summed shares since the last take (a device tensor)
_top_k: list[int] = []
_enabled: list[bool] = [False]
_on_host: list[bool] = [False]


def enable(tracked: bool, on_host: bool | None = None) -> None:
    """Read the shares at every step end from now on (``moe_routing`` tracked), or not at all; ``on_host``: sum them
    in host memory (default: when MindSpore trains on a CPU)."""
    _enabled[0] = tracked
    _on_host[0] = training_on_cpu() if on_host is None else on_host
    _window.clear()


def training_on_cpu() -> bool:
    """Whether the imported MindSpore trains on a CPU (False when none is imported)."""
    mindspore = sys.modules.get("mindspore")
    return mindspore is not None and str(mindspore.get_context("device_target")).upper() == "CPU"


def install(version: str) -> bool:
    """Wrap mindformers' reset of the routers' shares (idempotent); False, with a warning, for an unknown version."""
    spec = entry_for(ROUTING_SHARES, version, "msmon's routing records", "the MoE routing is not recorded")
    if spec is None:
        return False
    from mindformers.wrapper.wrapper import get_real_models

    def tap(original: Callable[..., Passed]) -> Callable[..., Passed]:
        def reset_shares(monitor: Callback, cb_params: CallbackParams) -> Passed:
            if not _enabled[0]:
                return original(monitor, cb_params)
            network = get_real_models(cb_params.train_network)
            config = network.get_gpt_transformer_config()
            if config.moe_router_load_balancing_type == "gbs_aux_loss":
                add_shares(network.get_gpt_model(), int(config.moe_router_topk))
            return original(monitor, cb_params)

        return reset_shares

    wrap_once(spec.module, spec.attribute, tap)
    return True


def add_shares(model: Cell, top_k: int) -> None:
    """Add each MoE layer's ``fi_accu`` into the window on the device: one queued add per layer, before mindformers'
    own queued zeroing of it, and no read (on Ascend a read is a host-device sync); ``take`` reads the sums. On a CPU
    (``enable``'s ``on_host``) the shares are copied to host memory and summed there instead (``asnumpy`` shares the
    memory mindformers zeroes next: ``astype`` copies)."""
    _top_k[:] = [top_k]
    for index, layer in enumerate(model.decoder.layers):
        router = getattr(getattr(layer, "mlp", None), "router", None)
        if router is None or not hasattr(router, "fi_accu"):
            continue
        shares = router.fi_accu.asnumpy().astype("float64") if _on_host[0] else router.fi_accu
        if index not in _window:
            _window[index] = shares if _on_host[0] else shares + 0
        else:
            _window[index] = _window[index] + shares


def take(tokens_per_forward: int) -> dict[str, float]:
    """The window's routing records (empty when no MoE layer reported), the window emptied:
    ``moe/layer_<i>/expert_<e>`` tokens, and per layer ``moe/layer_<i>/max_load`` (the busiest expert's tokens over
    the mean), ``cv`` (coefficient of variation of the tokens), ``idle_experts`` (experts that got none)."""
    if not _window:
        return {}
    record: dict[str, float] = {}
    for index, summed in sorted(_window.items()):
        host = summed if _on_host[0] else summed.asnumpy().astype("float64")  # the one device read, at a logging step
        tokens = host * _top_k[0] * tokens_per_forward
        record.update(routing_summary(index, [float(round(t, 3)) for t in tokens]))
    _window.clear()
    return record


def routing_summary(layer: int, tokens: list[float]) -> dict[str, float]:
    """One layer's record keys from its tokens per expert."""
    prefix = f"{MOE_PREFIX}layer_{layer}/"
    record = {f"{prefix}expert_{expert}": value for expert, value in enumerate(tokens)}
    mean = sum(tokens) / len(tokens)
    spread = (sum((t - mean) ** 2 for t in tokens) / len(tokens)) ** 0.5
    record[f"{prefix}max_load"] = max(tokens) / mean if mean > 0 else 0.0
    record[f"{prefix}cv"] = spread / mean if mean > 0 else 0.0
    record[f"{prefix}idle_experts"] = float(sum(1 for t in tokens if t == 0))
    return record
