"""What a logged step cost this rank, measured on the training thread at no cost between logs.

The clock: each step's time split into inside (the train step itself: from msmon's step begin, the last step-begin
callback, to the end of the first step-end callback, MindSpore's own) and outside (the rest: the step-end callbacks,
a checkpoint save, the next batch, the step-begin callbacks), summed over a log interval (two clock reads a step and
two additions). The memory: the process's resident host memory (``/proc`` through psutil) and, on a device whose
MindSpore reports it (Ascend), the device memory allocated and its peak, in MiB, read at logging steps only (a
device read is a call into the runtime; on CPU there is no device and nothing is read). The speed: tokens and
samples per second (over all devices and per device) from the batch shape, and the model FLOPs one device performs
in a training step, as mindformers counts them where it does (``MFLossMonitor``: for a legacy model from the
compiled graph, MindSpore's ``flops_collection``, divided by the group size in a parallel run; graph mode only, not
for a GroupMatMul MoE or dynamic shapes; for an mcore model Megatron's formula, ``num_floating_point_operations``),
else from the model's config, with the TFLOPS they make and, where the device's peak is known, the model FLOPs
utilisation. Looked up once at the first logging step (the batch shape, the FLOPs, the device).

msmon reads mindformers' FLOPs from the run's own monitor, so its TFLOPS are the ones mindformers prints. Without
that monitor, or where it counts nothing, msmon uses the same formula from ``model.model_config``: dense and MoE
(the experts a token is routed to, and the shared ones), grouped-query attention, a gated MLP, causal attention,
the logits; 3x for the forward and backward passes. It equals mindformers' mcore figure; for the legacy
quickstart it is 4.4% below the graph's count (docs/backends.md).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from msmon.compat import use_legacy
from msmon.compat.devices import peak_tflops
from msmon.config.hyperparameters import hyperparameters
from msmon.engine.train_facts import batch_shape
from msmon.errors import describe
from msmon.foreign import Callback, CallbackParams, ConfigValue, Passed, RunContext
from msmon.step_cost import StepCost
from msmon.util.jsonfiles import JsonObject
from msmon.util.memory import MIB
from msmon.util.numbers import positive_int

if TYPE_CHECKING:
    import psutil

logger = logging.getLogger("msmon")



WATCHED = "_msmon_step_end_watched"  # set on the callback whose step end marks the end of the train step


class StepClock:
    """``train_begin``, then ``begin``/``end`` at every step (``time.monotonic()`` readings), ``cost`` at a log."""

    def __init__(self) -> None:
        self._last_end: float | None = None
        self._begun: float | None = None
        self._step_done: float | None = None  # when the first step-end callback of this step finished
        self._inside = 0.0
        self._outside = 0.0
        self.last_inside_s = 0.0  # the last step's own time inside it, per step (mindformers' per_step_time)
        self._logged_step: int | None = None
        self._memory = MemoryReads()

    def train_begin(self, now: float) -> None:
        self._last_end = now

    def first_step(self, steps_before: int) -> None:
        """The steps trained before this process (a resumed run): the first interval starts there."""
        self._logged_step = steps_before

    def begin(self, now: float) -> None:
        if self._last_end is not None:
            self._outside += now - self._last_end
        self._begun = now

    def step_done(self, now: float) -> None:
        """The train step returned and the first step-end callback ran (``watch_step_end``)."""
        if self._begun is not None:
            self._step_done = now

    def end(self, now: float, steps: int = 1) -> None:
        """msmon's step end (``steps``: the steps this call ran, several with dataset sinking); the step itself ended
        at ``step_done`` when that was seen."""
        done = self._step_done if self._step_done is not None else now
        if self._begun is not None:
            self._inside += done - self._begun
            self.last_inside_s = (done - self._begun) / steps
        self._begun = self._step_done = None
        self._last_end = done

    def take(self, steps: int) -> tuple[float, float]:
        """(inside, outside) in milliseconds per step over the ``steps`` steps since the last take; then zero."""
        per_step = 1000.0 / max(1, steps)
        split = self._inside * per_step, self._outside * per_step
        self._inside = self._outside = 0.0
        return split

    def cost(self, step: int, when: float) -> StepCost:
        """The logging step ``step``'s cost (``when``: its wall-clock time): the interval's split, memory now."""
        steps, self._logged_step = step - (self._logged_step or 0), step
        inside, outside = self.take(steps)
        return StepCost(step, when, steps, inside, outside, *self._memory.read())


def watch_step_end(callbacks: Sequence[Callback] | None, clock: StepClock, own: Callback) -> bool:
    """Mark the end of each train step at the end of the first step-end callback of the training (MindSpore's own
    first: its framework profiler's, or in PyNative mode the device sync), so that the step-end work of the
    callbacks after it (mindformers' print, a checkpoint save) counts outside the step, as their step-begin work
    does. Its behaviour is unchanged: the wrapper calls it, then reads the clock. False when there is none to watch
    (msmon's callback is the first) or it cannot be wrapped; then msmon's own step end marks the step's end."""
    first = next(iter(callbacks or ()), None)
    if first is None or first is own or getattr(first, WATCHED, False):
        return False
    original = first.on_train_step_end

    def on_train_step_end(run_context: RunContext) -> Passed:
        result = original(run_context)
        clock.step_done(time.monotonic())
        return result

    try:
        first.on_train_step_end = on_train_step_end
        setattr(first, WATCHED, True)
    except AttributeError:  # a callback without an instance dict (__slots__): msmon's own step end marks it
        return False
    return True


def _device_readers() -> tuple[Callable[[], int], Callable[[], int]] | None:
    """MindSpore's (allocated, peak allocated) device-memory functions, or None on CPU, without them, or when no
    MindSpore is imported (nothing of it trains here: msmon never imports it for this)."""
    mindspore = sys.modules.get("mindspore")
    if mindspore is None or str(mindspore.get_context("device_target")).upper() == "CPU":
        return None
    for module_name in ("runtime", "hal"):  # mindspore.runtime from 2.5, mindspore.hal before
        module: ModuleType | None = getattr(mindspore, module_name, None)
        allocated, peak = getattr(module, "memory_allocated", None), getattr(module, "max_memory_allocated", None)
        if callable(allocated) and callable(peak):
            return allocated, peak
    return None


class MemoryReads:
    """``read()`` -> (host, device, device peak) MiB; what cannot be read is None (decided at the first read)."""

    def __init__(self) -> None:
        self._process: psutil.Process | None = None
        self._device: tuple[Callable[[], int], Callable[[], int]] | None = None
        self._device_looked_up = False

    def read(self) -> tuple[float | None, float | None, float | None]:
        return self.host(), *self._device_mb()

    def host(self) -> float | None:
        if self._process is None:
            import psutil

            self._process = psutil.Process()
        return self._process.memory_info().rss / MIB

    def _device_mb(self) -> tuple[float | None, float | None]:
        if not self._device_looked_up:
            self._device_looked_up = True
            self._device = _device_readers()
        if self._device is None:
            return None, None
        allocated, peak = self._device
        try:
            return allocated() / MIB, peak() / MIB
        except (RuntimeError, ValueError) as exc:  # the runtime refuses: device memory is not recorded
            logger.warning("msmon: device memory is not recorded: %s", describe(exc))
            self._device = None
            return None, None


MONITOR = "MFLossMonitor"


@dataclass(frozen=True)
class ModelFlops:
    """FLOPs per training step on one device, and where the figure comes from (``mindformers``: its monitor's
    count; ``config``: the formula over the model config)."""

    per_device: float
    source: str


def from_loss_monitor(callbacks: Sequence[Callback] | None, config: Mapping[str, ConfigValue] | None,
                      devices: int) -> ModelFlops | None:
    """The figure the run's ``MFLossMonitor`` (or a subclass in its place) prints from, per device, once it has counted
    it."""
    monitor = next((cb for cb in callbacks or () if any(kind.__name__ == MONITOR for kind in type(cb).__mro__)), None)
    full = getattr(monitor, "full_model_flops", None)
    if not getattr(monitor, "mf_calculated", False) or not isinstance(full, int | float) or full <= 0:
        return None
    if use_legacy(config or {}):  # already divided by the group size in a parallel run
        return ModelFlops(float(full), "mindformers")
    return ModelFlops(float(full) / max(1, int(getattr(monitor, "device_num", devices) or devices)), "mindformers")


def _int(model: Mapping[str, ConfigValue], *keys: str) -> int | None:
    return next((value for key in keys if (value := positive_int(model.get(key))) is not None), None)


def llama_ffn(hidden: int, model: Mapping[str, ConfigValue]) -> int:
    """The legacy LLaMA MLP width when the config gives none: 2/3 of 4 x hidden, scaled, rounded up to
    ``multiple_of`` (mindformers' LlamaFeedForward)."""
    width = int(2 * 4 * hidden / 3)
    multiplier = model.get("ffn_dim_multiplier")
    if isinstance(multiplier, int | float) and not isinstance(multiplier, bool):
        width = int(multiplier * width)
    multiple = _int(model, "multiple_of") or 256
    return multiple * ((width + multiple - 1) // multiple)


def transformer_flops(model: Mapping[str, ConfigValue], samples: int, seq: int) -> float | None:
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
    routed = _int(model, "moe_router_topk", "num_experts_per_tok", "num_experts_chosen") if experts else None
    per_width = (6 if gated else 4) * tokens * hidden
    moe = moe_layers(model, layers) if routed else 0
    mlp = per_width * ((layers - moe) * ffn + moe * moe_active_width(model, routed or 0, ffn))
    logits = 2 * tokens * hidden * vocab
    return 3.0 * (layers * attention + mlp + logits)


def moe_active_width(model: Mapping[str, ConfigValue], routed: int, ffn: int) -> int:
    """The MLP width one token passes through in an MoE layer: its ``routed`` (top-k) experts and the shared experts
    (``moe_shared_expert_intermediate_size``, else ``n_shared_experts`` x the expert width), as mindformers counts."""
    expert_ffn = _int(model, "moe_ffn_hidden_size", "moe_intermediate_size") or ffn
    shared = _int(model, "moe_shared_expert_intermediate_size", "shared_expert_intermediate_size")
    if shared is None:
        shared = (_int(model, "n_shared_experts", "shared_expert_num") or 0) * expert_ffn
    return routed * expert_ffn + shared


def moe_layers(model: Mapping[str, ConfigValue], layers: int) -> int:
    """How many of the ``layers`` are MoE layers: all but the first ``first_k_dense_replace``, else those
    ``moe_layer_freq`` marks (every f-th from layer 0, or a 0/1 list), else all (mindformers' TransformerConfig)."""
    dense_first = _int(model, "first_k_dense_replace")
    if dense_first is not None:
        return max(0, layers - dense_first)
    freq = model.get("moe_layer_freq")
    if isinstance(freq, list | tuple):
        return sum(1 for flag in freq[:layers] if flag)
    every = positive_int(freq)
    return len(range(0, layers, every)) if every else layers


def model_flops(callbacks: Sequence[Callback] | None, config: Mapping[str, ConfigValue] | None, samples: int,
                seq: int | None,
                devices: int) -> ModelFlops | None:
    """One device's FLOPs per step: mindformers' count, else the formula for this device's ``samples`` x ``seq``."""
    counted = from_loss_monitor(callbacks, config, devices)
    if counted is not None:
        return counted
    model = (((config or {}).get("model") or {}).get("model_config")) or {}
    flops = transformer_flops(model, samples, seq) if isinstance(model, Mapping) and samples and seq else None
    return ModelFlops(flops, "config") if flops else None


def device_name() -> str | None:
    """The training device's name as MindSpore reports it (``Ascend910B2``), None on CPU or when it cannot say."""
    mindspore = sys.modules.get("mindspore")
    if mindspore is None or str(mindspore.get_context("device_target")).upper() == "CPU":
        return None
    try:
        return str(mindspore.hal.get_device_properties(0).name) or None
    except (AttributeError, RuntimeError, ValueError):
        return None


class Throughput:
    """``add(record, cb_params, step_seconds, inside_seconds)`` at every logging step."""

    def __init__(self, config: Mapping[str, ConfigValue] | None, seq_length: int | None, world: int,
                 peak: float | None = None, device: str | None = None) -> None:
        self._config = config
        self._seq_length = seq_length
        self._world = world
        self._peak = peak
        self._device = device
        self._batch: tuple[int, int | None] | None = None
        self._flops: ModelFlops | None = None
        self._looked_up = False  # the FLOPs and the device's peak, at the first logging step

    def add(self, record: JsonObject, cb_params: CallbackParams, step_seconds: float, inside_seconds: float) -> None:
        """Tokens and samples per second over ``step_seconds`` (the logging step, end to end); TFLOPS over
        ``inside_seconds`` (the train step itself, ``StepClock.last_inside_s``: the interval mindformers times the
        figure it prints over)."""
        if self._batch is None:
            self._batch = batch_shape(cb_params, self._seq_length) or (0, None)
        samples, tokens = self._batch
        if not samples:
            return
        if tokens:
            record["throughput"] = tokens * self._world / step_seconds
            record["throughput_per_device"] = tokens / step_seconds
        record["samples_per_s"] = samples * self._world / step_seconds
        record["samples_per_s_per_device"] = samples / step_seconds
        flops = self._model_flops(cb_params, samples, tokens)
        if flops is not None and inside_seconds > 0:
            tflops = flops.per_device / inside_seconds / 1e12
            record.update(model_flops=flops.per_device, tflops_per_device=tflops)
            if self._peak:
                record["mfu"] = tflops / self._peak

    def _model_flops(self, cb_params: CallbackParams, samples: int, tokens: int | None) -> ModelFlops | None:
        if not self._looked_up:
            self._looked_up = True
            seq = tokens // samples if tokens else None
            self._flops = model_flops(cb_params.get("list_callback"), self._config, samples, seq, self._world)
            if self._peak is None:
                dtype = hyperparameters(self._config).get("compute_dtype")
                self._peak = peak_tflops(self._device or device_name(), str(dtype) if dtype else None)
        return self._flops
