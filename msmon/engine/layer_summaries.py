"""The cheap layer summaries (``layer_update_ratio``, on with ``layer_grad_norm``): each group's weight norm and
update-to-weight ratio ||dw|| / ||w||, at logging steps only.

dw is the logging step's own update: at the end of the step before a logging step the trained weights are copied
(``snapshot``), at the logging step each parameter's squared sum and the squared sum of its change since that copy are
summed per group (``GradGroups``) and the copy is dropped. Two readers do the arithmetic:

- ``HostReader`` where the weights live in host memory (CPU): numpy, summed in float64;
- ``DeviceReader`` elsewhere (Ascend, GPU): the copy is one device copy per parameter (queued, never read), the sums
  one compiled graph over every parameter returning two vectors, read once at the logging step (one device sync).

The copy costs one extra set of the trained weights in device memory from the step before a logging step to the
logging step (every step at ``log_interval: 1``); nothing is copied, computed or read at the other steps.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Protocol

from msmon.config.metrics import UPDATE_RATIO_PREFIX, WEIGHT_NORM_PREFIX
from msmon.engine.grad_groups import GradGroups, trained_weights
from msmon.foreign import Cell, Tensor

logger = logging.getLogger("msmon")


class WeightReader(Protocol):
    def copy(self, weights: Sequence[Tensor]) -> Tensor:
        """A copy of the weights as they are now (nothing read on a device)."""

    def square_sums(self, weights: Sequence[Tensor], copy: Tensor) -> tuple[list[float], list[float]]:
        """(each weight's squared sum, each weight's squared change since ``copy``)."""


class HostReader:
    """Weights in host memory: numpy copies and float64 sums."""

    def copy(self, weights: Sequence[Tensor]) -> list[Tensor]:
        return [w.asnumpy().copy() for w in weights]  # on CPU asnumpy shares the parameter's memory: copy it

    def square_sums(self, weights: Sequence[Tensor], copy: Tensor) -> tuple[list[float], list[float]]:
        import numpy as np

        def square_sum(array: Tensor) -> float:  # einsum sums in float64 without BLAS threads (np.dot: 4x the time)
            flat = array.reshape(-1)
            return float(np.einsum("i,i->", flat, flat, dtype=np.float64))

        now = [w.asnumpy() for w in weights]
        changes = [square_sum(np.subtract(w, c, dtype=np.promote_types(w.dtype, np.float32)))  # fp16: exact in fp32
                   for w, c in zip(now, copy, strict=True)]
        return [square_sum(w) for w in now], changes


class DeviceReader:
    """Weights in device memory: device copies, and one compiled graph for the sums (built at the first use)."""

    def __init__(self) -> None:
        self._graph: Cell = None

    def copy(self, weights: Sequence[Tensor]) -> list[Tensor]:
        from mindspore import ops

        return [ops.deepcopy(w) for w in weights]

    def square_sums(self, weights: Sequence[Tensor], copy: Tensor) -> tuple[list[float], list[float]]:
        if self._graph is None:
            self._graph = _sums_graph(weights)
        squares, changes = self._graph(*copy)
        return squares.tolist(), changes.tolist()


def _sums_graph(weights: Sequence[Tensor]) -> Cell:
    """A Cell over ``weights`` whose call with their copies returns (squared sums, squared changes), float32."""
    import mindspore as ms
    from mindspore import nn, ops

    class SquareSums(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.weights = ms.ParameterTuple(weights)

        @ms.jit  # compiled once in PyNative mode too (graph mode compiles a Cell anyway)
        def construct(self, *copies: Tensor) -> Tensor:
            squares = [ops.sum(ops.square(ops.cast(w, ms.float32))) for w in self.weights]
            changes = [ops.sum(ops.square(ops.cast(w, ms.float32) - ops.cast(c, ms.float32)))
                       for w, c in zip(self.weights, copies)]  # noqa: B905 - graph syntax: no strict=
            return ops.stack(squares), ops.stack(changes)

    return SquareSums()


def reader_for_device() -> WeightReader:
    """The reader for where MindSpore keeps the weights."""
    import mindspore as ms

    return HostReader() if ms.get_context("device_target") == "CPU" else DeviceReader()


class LayerSummaries:
    """Each group's weight norm and update ratio at logging steps, from a copy taken the step before."""

    def __init__(self, weights: Sequence[Tensor], groups: GradGroups, reader: WeightReader) -> None:
        self._weights = list(weights)
        self._groups = groups
        self._reader = reader
        self._copy: Tensor = None

    def snapshot(self) -> None:
        """The end of the step before a logging step: copy the weights (replacing an older copy)."""
        self._copy = self._reader.copy(self._weights)

    def at_logging_step(self) -> dict[str, float]:
        """``weight_norm/<group>`` and ``update_ratio/<group>`` (empty without a copy: the run's first step at
        log_interval 1); the copy is dropped."""
        copy, self._copy = self._copy, None
        if copy is None:
            return {}
        squares, changes = self._reader.square_sums(self._weights, copy)
        weight = self._groups.totals(squares)
        change = self._groups.totals(changes)
        values: dict[str, float] = {}
        for name in self._groups.names:
            norm = math.sqrt(weight[name])
            values[WEIGHT_NORM_PREFIX + name] = norm
            values[UPDATE_RATIO_PREFIX + name] = math.sqrt(change[name]) / norm if norm > 0 else math.nan
        return values


def summaries_of_network(network: Cell) -> LayerSummaries | None:
    """The layer summaries of a training's network, or None (one warning) when it exposes no trained weights."""
    weights = trained_weights(network)
    if not weights:
        logger.warning("msmon: layer_update_ratio is not recorded: the train-step wrapper exposes neither weights "
                       "nor optimizer.parameters")
        return None
    return LayerSummaries(weights, GradGroups.of([w.name for w in weights]), reader_for_device())
