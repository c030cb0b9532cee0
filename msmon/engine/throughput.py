"""A logging step's speed: tokens and samples per second (over all devices and per device) from the batch shape,
and the model FLOPs per device with the TFLOPS they make and, where the device's peak is known, the model FLOPs
utilisation. Looked up once at the first logging step (the batch shape, the FLOPs, the device), computed at
logging steps only."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from msmon.compat.devices import peak_tflops
from msmon.config.hyperparameters import hyperparameters
from msmon.engine.model_flops import ModelFlops, model_flops
from msmon.engine.train_facts import batch_shape


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

    def __init__(self, config: Mapping[str, Any] | None, seq_length: int | None, world: int,
                 peak: float | None = None, device: str | None = None) -> None:
        self._config = config
        self._seq_length = seq_length
        self._world = world
        self._peak = peak
        self._device = device
        self._batch: tuple[int, int | None] | None = None
        self._flops: ModelFlops | None = None
        self._looked_up = False  # the FLOPs and the device's peak, at the first logging step

    def add(self, record: dict[str, Any], cb_params: Any, step_seconds: float, inside_seconds: float) -> None:
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

    def _model_flops(self, cb_params: Any, samples: int, tokens: int | None) -> ModelFlops | None:
        if not self._looked_up:
            self._looked_up = True
            seq = tokens // samples if tokens else None
            self._flops = model_flops(cb_params.get("list_callback"), self._config, samples, seq, self._world)
            if self._peak is None:
                dtype = hyperparameters(self._config).get("compute_dtype")
                self._peak = peak_tflops(self._device or device_name(), str(dtype) if dtype else None)
        return self._flops
