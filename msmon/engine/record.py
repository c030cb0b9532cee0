"""The record of one logged step, step progress, and the helpers that build and show them."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from msmon.config.metrics import canonical_metric
from msmon.foreign import Tensor
from msmon.listener import Listener
from msmon.step_cost import StepCost
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number

logger = logging.getLogger("msmon")

#: The record keys a tracked metric produces (throughput brings its companions).
METRIC_KEYS: dict[str, tuple[str, ...]] = {
    "throughput": ("throughput", "throughput_per_device", "samples_per_s", "samples_per_s_per_device",
                   "model_flops", "tflops_per_device", "mfu"),
    "loss": ("loss", "loss_mean"),
    "grad_norm": ("grad_norm", "grad_norm_mean", "grad_norm_max", "grad_norm_initial"),
    "step_time_ms": ("step_time_ms", "step_inside_ms", "step_outside_ms"),
    "host_memory_mb": ("host_memory_mb", "device_memory_mb", "device_memory_peak_mb"),
    "layer_grad_norm": (),  # grad_norm/<group>: the groups are known only once the model is built
    "moe_routing": (),  # moe/layer_<i>/...: the layers and experts are known only once the model is built
    "layer_update_ratio": (),  # weight_norm/<group>, update_ratio/<group>: as layer_grad_norm
}


def canonical_metrics(names: Iterable[str]) -> list[str]:
    """Canonical names of ``names`` (aliases resolved, unknown names and duplicates dropped), in order."""
    result: list[str] = []
    for name in names:
        canonical = canonical_metric(name)
        if canonical and canonical not in result:
            result.append(canonical)
    return result


def record_columns(metrics: Iterable[str]) -> list[str]:
    """Every key a record of these canonical metrics can hold, coordinates first (the CSV header)."""
    columns = ["step", "time", "rank"]
    for name in metrics:
        columns.extend(key for key in METRIC_KEYS.get(name, (name,)) if key not in columns)
    return columns


def to_float(value: Tensor) -> float:
    """A Python float from a Tensor, numpy value or number (arrays: their mean; NaN/Inf kept)."""
    if hasattr(value, "asnumpy"):
        if getattr(value, "size", 0) == 1:
            return float(value.item())  # one element: ~3 us against ~20 us through asnumpy (MindSpore 2.9, CPU)
        value = value.asnumpy()
    if hasattr(value, "size") and getattr(value, "size", 1) != 1:
        return float(value.mean())
    if hasattr(value, "reshape"):
        value = value.reshape(-1)[0]
    return float(value)


def to_host(value: Tensor) -> Tensor:
    """A Tensor or Parameter as a numpy array (anything else as it is)."""
    return value.asnumpy() if hasattr(value, "asnumpy") else value


def to_max(value: Tensor) -> float:
    """The largest element of a Tensor or array as a float (NaN when any element is NaN)."""
    array = to_host(value)
    if getattr(array, "size", 1) == 0:
        return math.nan
    return float(array.max()) if hasattr(array, "max") else float(array)


def interval_stats(values: list[float], *, finite_mean: bool = True) -> tuple[float, float]:
    """(mean, max) of one log interval's per-step values. The max keeps non-finite values (NaN when any
    is NaN, else +Inf when any is +Inf). ``finite_mean``: the mean of the finite values (NaN when none
    is; a loss-scale overflow's Inf grad norm is expected); else the plain mean (a NaN stays NaN)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite_mean and len(finite) < len(values):
        mean = sum(values) / len(values)
    else:
        mean = math.fsum(finite) / len(finite) if finite else math.nan
    return mean, (math.nan if any(map(math.isnan, values)) else max(values))


_SHOWN = (
    ("loss", "loss"), ("grad_norm", "grad_norm"), ("learning_rate", "lr"), ("throughput", "tokens/s"),
    ("samples_per_s", "samples/s"), ("step_time_ms", "step_ms"), ("loss_scale", "loss_scale"),
    ("overflow", "overflow"), ("host_memory_mb", "mem_mb"),
)


def console_line(record: JsonObject) -> str:
    """The one verbose console line of a logged step."""
    parts = [f"step {record.get('step')}"]
    parts.extend(f"{label} {fmt_number(record[key], 5)}" for key, label in _SHOWN if key in record)
    return "msmon: " + " | ".join(parts)


class ConsoleLines(Listener):
    """``monitor_config.verbose``: msmon's log gets the console line of each logged step."""

    def on_record(self, record: JsonObject) -> None:
        logger.info(console_line(record))


@dataclass
class StepProgress:
    """Where training is, updated by the callback at every step's begin and end (read from other threads)."""

    last_step: int = 0
    last_end_monotonic: float = 0.0
    begun_step: int = 0
    begun_monotonic: float = 0.0
    training_thread: int | None = None  # the ident of the thread that trains (its stack is the one that matters)
    total_steps: int | None = None  # the step the data lets the curve end at (known at the first step end)
    data_batches: int | None = None  # the data's batches over every epoch (a rollback never skips past them)
    recent_step_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    recent_costs: deque[StepCost] = field(default_factory=lambda: deque(maxlen=64))
    cost_count: int = 0  # every StepCost added so far (the heartbeat appends the ones it has not written)
    _wall_offset: float = field(default_factory=lambda: time.time() - time.monotonic(), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_step_seconds(self, seconds: float) -> None:
        """Training thread, logging steps only: one more step duration."""
        with self._lock:
            self.recent_step_seconds.append(seconds)

    def add_cost(self, cost: StepCost) -> None:
        """Training thread, logging steps only: this step's cost."""
        with self._lock:
            self.recent_costs.append(cost)
            self.cost_count += 1

    def costs_since(self, count: int) -> tuple[list[StepCost], int]:
        """Any thread: (the recent costs added after the first ``count``, the count now)."""
        with self._lock:
            new = min(self.cost_count - count, len(self.recent_costs))
            return list(self.recent_costs)[len(self.recent_costs) - new:], self.cost_count

    def step_seconds(self) -> list[float]:
        """Any thread: a consistent copy of the recent step durations."""
        with self._lock:
            return list(self.recent_step_seconds)

    def steady_step_seconds(self, log_interval: int) -> list[float]:
        """The recent step durations without the first step's graph compilation: at log_interval 1 the first
        logged step is step 1, which holds it (at a longer interval its time is spread over the interval)."""
        seconds = self.step_seconds()
        return seconds[1:] if log_interval == 1 else seconds

    def wall(self, monotonic: float) -> float:
        """The unix time of a ``time.monotonic()`` reading of this process."""
        return monotonic + self._wall_offset

    @property
    def last_end_wall(self) -> float | None:
        """Unix time of the last step end (None before the first step)."""
        return self.wall(self.last_end_monotonic) if self.last_step else None
