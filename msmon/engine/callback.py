"""The training-thread side: a MindSpore Callback that counts steps and hands one record per logged step.

Non-logging steps cost a counter, a monotonic timestamp, a stop-flag check and, at log_interval > 1, a
reference to the step's ``net_outputs`` (never read there). Logging steps read the needed
Tensors once (the held ones too: their interval mean/max), build one flat dict and put it in the writer's
queue; all I/O is elsewhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from msmon.config.metrics import METRICS
from msmon.config.schema import MonitorSettings
from msmon.engine.record import StepProgress, canonical_metrics, interval_stats, to_float, to_max

logger = logging.getLogger("msmon")

#: The change that makes a metric appear, when the training config cannot tell.
DEFAULT_FIXES: dict[str, str] = {
    "loss": "the network returns no loss to callbacks; train with a loss function or a mindformers model",
    "grad_norm": "use mindformers' MFTrainOneStepCell with use_clip_grad: True "
    "(a training step that returns only the loss has no global norm)",
    "learning_rate": "use a mindformers runner_wrapper (it returns the learning rate) or an optimizer "
    "with a readable learning_rate",
    "throughput": "the batch shape is not visible to callbacks; set runner_config.sink_mode: False",
    "loss_scale": "use a loss-scale runner_wrapper such as MFTrainOneStepCell with a scale_sense",
    "overflow": "use a loss-scale runner_wrapper such as MFTrainOneStepCell with a scale_sense",
    "local_norm": "set runner_wrapper.local_norm: True",
    "epoch": "the training loop reports no epoch number",
    "host_memory_mb": "install psutil",
}


class StopSource(Protocol):
    stop_reason: str | None


def split_outputs(outputs: Any) -> dict[str, Any]:
    """Name the parts of ``cb_params.net_outputs`` (mindformers' 3/4/5/7-tuples or a bare loss)."""
    if not isinstance(outputs, tuple | list):
        return {"loss": outputs} if outputs is not None else {}
    parts: dict[str, Any] = {"loss": outputs[0]} if outputs else {}
    if len(outputs) in (3, 4, 5, 7):
        parts["overflow"], parts["loss_scale"] = outputs[1], outputs[2]
        names = {4: ("learning_rate",), 5: ("learning_rate", "grad_norm"),
                 7: ("learning_rate", "grad_norm", "local_norm")}.get(len(outputs), ())
        parts.update(zip(names, outputs[3:], strict=False))
    return parts


def optimizer_learning_rate(optimizer: Any) -> float | None:
    """The learning rate the optimizer applied at its last step, or None when it cannot be read."""
    lr = getattr(optimizer, "learning_rate", None)
    if lr is None:
        return None
    if getattr(optimizer, "is_group_lr", False):
        lr = lr[0]
    if getattr(optimizer, "dynamic_lr", False):
        lr = lr(optimizer.global_step - 1)  # global_step was already advanced by the step
    return to_float(lr)


def seq_length_of(config: Mapping[str, Any] | None) -> int | None:
    """``model.model_config.seq_length`` of a mindformers config, when present."""
    try:
        value = config["model"]["model_config"]["seq_length"]  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def missing_fix(name: str, config: Mapping[str, Any] | None) -> str:
    """The config change that makes ``name`` appear."""
    spec = METRICS.get(name)
    if config is not None and spec is not None:
        exposure = spec.exposure(config)
        if not exposure.exposed and exposure.fix:
            return exposure.fix
    return DEFAULT_FIXES.get(name, "check the training setup")


class StepObserver:
    """The callback's logic, free of MindSpore (the Callback subclass only forwards to it)."""

    def __init__(
        self,
        settings: MonitorSettings,
        progress: StepProgress,
        put: Callable[[dict[str, Any]], None] | None,
        stop: StopSource,
        *,
        rank: int = 0,
        world_size: int = 1,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self._interval = max(1, settings.log_interval)
        self._metrics = frozenset(canonical_metrics(settings.track_metrics))
        self._progress = progress
        self._put = put
        self._stop = stop
        self._rank = rank
        self._world = max(1, world_size)
        self._config = config
        self._seq_length = seq_length_of(config)
        self._batch: tuple[int, int | None] | None = None
        self._optimizer: Any = None
        self._process: Any = None
        self._checked = False
        self._bucket = 0
        # interval statistics: slot = step % interval holds the step's net_outputs, unread until the logging step
        self._hold = put is not None and self._interval > 1 and bool(self._metrics & {"loss", "grad_norm"})
        self._held: list[Any] = [None] * self._interval
        self._empty: tuple[None, ...] = (None,) * self._interval

    def begin(self, cb_params: Any) -> None:
        """Train begin: the time base of the first step and the planned number of steps."""
        self._progress.last_end_monotonic = time.monotonic()
        epochs, per_epoch = cb_params.get("epoch_num"), cb_params.get("batch_num")
        if self._progress.total_steps is None and isinstance(epochs, int) and isinstance(per_epoch, int):
            self._progress.total_steps = epochs * per_epoch

    def step_end(self, cb_params: Any) -> bool:
        """Step end: count, log every ``log_interval`` steps; True when the run must stop."""
        now = time.monotonic()
        step = cb_params.cur_step_num
        progress = self._progress
        previous, previous_step = progress.last_end_monotonic, progress.last_step
        progress.last_end_monotonic = now
        progress.last_step = step
        bucket = step // self._interval  # a new bucket = a logging step, also when sinking several steps per call
        if bucket != self._bucket and self._put is not None:
            self._bucket = bucket
            self._log(cb_params, step, (now - previous) / max(1, step - previous_step))
        elif self._hold:  # a reference to the step's outputs, unread: a read here would be a device sync
            self._held[step % self._interval] = cb_params.get("net_outputs")
        return self._stop.stop_reason is not None

    def _log(self, cb_params: Any, step: int, step_seconds: float) -> None:
        wanted = self._metrics
        record: dict[str, Any] = {"step": step, "time": time.time(), "rank": self._rank}
        parts = split_outputs(cb_params.get("net_outputs"))
        for name in ("loss", "grad_norm", "learning_rate", "loss_scale"):
            if name in wanted and parts.get(name) is not None:
                record[name] = to_float(parts[name])
        if "overflow" in wanted and parts.get("overflow") is not None:
            record["overflow"] = int(bool(to_float(parts["overflow"])))
        if "local_norm" in wanted and parts.get("local_norm") is not None:
            record["local_norm"] = to_max(parts["local_norm"])
        if self._hold:
            self._interval_stats(record)
        if "learning_rate" in wanted and "learning_rate" not in record:
            self._optimizer_lr(cb_params, record)
        if "global_step" in wanted:
            record["global_step"] = step
        if "step_time_ms" in wanted:
            record["step_time_ms"] = step_seconds * 1000.0
        if "throughput" in wanted and step_seconds > 0:
            self._throughput(cb_params, step_seconds, record)
        if "epoch" in wanted and cb_params.get("cur_epoch_num") is not None:
            record["epoch"] = int(cb_params.cur_epoch_num)
        if "host_memory_mb" in wanted:
            self._memory(record)
        if not self._checked:
            self._checked = True
            self._warn_absent(record)
        self._progress.recent_step_seconds.append(step_seconds)
        self._put(record)  # type: ignore[misc]

    def _interval_stats(self, record: dict[str, Any]) -> None:
        """``grad_norm_mean``/``grad_norm_max`` and ``loss_mean`` over the steps since the last log: the
        held outputs plus this step's own value. ``grad_norm_mean`` skips non-finite values (overflow steps),
        ``loss_mean`` keeps them (a NaN loss between two logs is never averaged away). The slots are emptied."""
        held = [split_outputs(outputs) for outputs in self._held if outputs is not None]
        self._held[:] = self._empty
        for name in ("grad_norm", "loss"):
            if name in record:
                values = [record[name], *(to_float(parts[name]) for parts in held if parts.get(name) is not None)]
                record[f"{name}_mean"], peak = interval_stats(values, finite_mean=name == "grad_norm")
                if name == "grad_norm":
                    record["grad_norm_max"] = peak

    def _optimizer_lr(self, cb_params: Any, record: dict[str, Any]) -> None:
        if self._optimizer is None:
            network = cb_params.get("train_network") or cb_params.get("network")
            self._optimizer = cb_params.get("optimizer") or getattr(network, "optimizer", None) or False
        if self._optimizer is False:
            return
        try:
            value = optimizer_learning_rate(self._optimizer)
        except Exception:  # an unreadable schedule: reported once as an absent metric
            self._optimizer = False
            return
        if value is not None:
            record["learning_rate"] = value

    def _throughput(self, cb_params: Any, step_seconds: float, record: dict[str, Any]) -> None:
        if self._batch is None:
            self._batch = self._batch_shape(cb_params) or (0, None)
        samples, tokens = self._batch
        if not samples:
            return
        world = self._world
        if tokens:
            record["throughput"] = tokens * world / step_seconds
            record["throughput_per_device"] = tokens / step_seconds
        record["samples_per_s"] = samples * world / step_seconds
        record["samples_per_s_per_device"] = samples / step_seconds

    def _batch_shape(self, cb_params: Any) -> tuple[int, int | None] | None:
        """(samples, tokens) of one device's batch, from the first input's shape."""
        element = cb_params.get("train_dataset_element")
        first = element[0] if isinstance(element, list | tuple) and element else element
        shape = tuple(getattr(first, "shape", ()) or ())
        if not shape:
            return None
        samples = int(shape[0])
        if self._seq_length:
            return samples, samples * self._seq_length
        dtype = str(getattr(first, "dtype", ""))
        if len(shape) == 2 and "Int" in dtype:  # token ids: (batch, sequence)
            return samples, samples * int(shape[1])
        return samples, None

    def _memory(self, record: dict[str, Any]) -> None:
        if self._process is None:
            try:
                import psutil

                self._process = psutil.Process()
            except Exception:
                self._process = False
        if self._process:
            record["host_memory_mb"] = self._process.memory_info().rss / 2**20

    def _warn_absent(self, record: dict[str, Any]) -> None:
        for name in sorted(self._metrics - {"throughput"}):
            if name not in record:
                self._warn_one(name)
        if "throughput" in self._metrics and "samples_per_s" not in record:
            self._warn_one("throughput")

    def _warn_one(self, name: str) -> None:
        logger.warning(
            "msmon: tracked metric '%s' is absent at the first logged step and is not recorded "
            "(no placeholder values). Fix: %s; or remove '%s' from monitor_config.track_metrics.",
            name, missing_fix(name, self._config), name,
        )


_CALLBACK_CLASS: type | None = None


def callback_class() -> type:
    """The MindSpore Callback subclass (mindspore is imported on first use only)."""
    global _CALLBACK_CLASS
    if _CALLBACK_CLASS is None:
        from mindspore.train import Callback

        class MsmonCallback(Callback):  # type: ignore[misc]
            """Forwards train begin and step end to a StepObserver; stops the run when asked."""

            def __init__(self, observer: StepObserver) -> None:
                super().__init__()
                self.observer = observer

            def on_train_begin(self, run_context: Any) -> None:
                self.observer.begin(run_context.original_args())

            def on_train_step_end(self, run_context: Any) -> None:
                if self.observer.step_end(run_context.original_args()):
                    run_context.request_stop()

        _CALLBACK_CLASS = MsmonCallback
    return _CALLBACK_CLASS


def make_callback(observer: StepObserver) -> Any:
    """A MindSpore Callback driving ``observer``."""
    return callback_class()(observer)
