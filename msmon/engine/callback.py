"""The training-thread side: a MindSpore Callback that counts steps and hands one record per logged step.

Non-logging steps cost a counter, a monotonic timestamp at the step's begin and one at its end, a stop-flag
check, a probe flag check and, at log_interval > 1, a reference to the step's ``net_outputs`` (never read there);
the step before a logging step also copies the trained weights when the layer summaries are on (queued device
copies, never read: msmon.engine.layer_summaries). Logging steps read the needed Tensors once (the held ones too:
their interval mean/max and the flight recorder's per-step values), build one flat dict and put it in the writer's
queue, and look for a probe request (one ``os.stat``, the one file access here: msmon.engine.probe); the rest of the
I/O is elsewhere. While a probe's window is open, its steps call the probe. A rank that does not write the metrics
(``reduced``) builds the same record of loss, grad_norm and overflow only, for its own heartbeat (docs/health.md,
"Distributed runs").
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from msmon.anomaly import StopRequest
from msmon.config.schema import MonitorSettings
from msmon.engine import routing
from msmon.engine.absent import warn_absent
from msmon.engine.flight import VALUES as FLIGHT_VALUES
from msmon.engine.flight import FlightRecorder
from msmon.engine.grad_groups import GradGroups, groups_of_network
from msmon.engine.layer_summaries import LayerSummaries, summaries_of_network
from msmon.engine.probe.runner import ProbeRunner
from msmon.engine.record import StepProgress, canonical_metrics, interval_stats, to_float, to_max
from msmon.engine.step_costs import StepClock, Throughput, watch_step_end
from msmon.engine.step_outputs import (
    SCALARS,
    Fix,
    Held,
    HeldSteps,
    quiet_local_norm_print,
    resolve_fix,
    split_outputs,
    step_values,
    take_loss_parts,
)
from msmon.engine.train_facts import (
    batch_shape,
    find_optimizer,
    optimizer_learning_rate,
    seq_length_of,
    steps_before,
)
from msmon.foreign import Callback, CallbackParams, ConfigValue, Optimizer, RunContext, Tensor
from msmon.util import internal_errors
from msmon.util.jsonfiles import JsonObject

logger = logging.getLogger("msmon")

#: What a rank that does not write the metrics reads at its logging steps: the inputs of the non-finite check.
REDUCED_METRICS = frozenset({"loss", "grad_norm", "overflow"})


class StopSource(Protocol):
    stop: StopRequest | None


@dataclass(frozen=True)
class ReadPlan:
    """What the callback reads at a logging step and holds between logs: decided once, from the settings."""

    interval: int
    metrics: frozenset[str]  # the record's metrics (a reduced rank: the inputs of the non-finite check)
    layer_norms: bool  # grad_norm/<group> from the train step's squared sums
    stats: bool  # loss_mean, grad_norm_mean/max over the interval
    hold: bool  # the steps between logs keep their outputs, unread, until the logging step
    reads: frozenset[str]  # the logging step's scalar reads (of ``SCALARS``)
    held_reads: frozenset[str]  # each held step's reads

    @classmethod
    def of(cls, settings: MonitorSettings, *, writes: bool, reduced: bool, flight: bool) -> ReadPlan:
        """``writes``: the rank puts records; ``flight``: the flight recorder keeps each step's values."""
        interval = max(1, settings.log_interval)
        metrics = frozenset(canonical_metrics(settings.track_metrics))
        if reduced:
            metrics &= REDUCED_METRICS
        stats = interval > 1 and bool(metrics & {"loss", "grad_norm"})
        recorded = frozenset(FLIGHT_VALUES) if flight else frozenset()
        return cls(
            interval=interval,
            metrics=metrics,
            layer_norms="layer_grad_norm" in metrics,
            stats=stats,
            hold=writes and interval > 1 and (stats or flight),
            reads=frozenset(name for name in SCALARS if name in metrics or name in recorded),
            held_reads=recorded | (metrics & {"loss", "grad_norm"} if stats else frozenset()),
        )


class StepObserver:
    """The callback's logic, free of MindSpore (the Callback subclass only forwards to it)."""

    def __init__(
        self,
        settings: MonitorSettings,
        progress: StepProgress,
        put: Callable[[JsonObject], None] | None,
        stop: StopSource,
        *,
        rank: int = 0,
        world_size: int = 1,
        config: Mapping[str, ConfigValue] | None = None,
        flight: FlightRecorder | None = None,
        reduced: bool = False,
        probes: ProbeRunner | None = None,
    ) -> None:
        self._flight = flight if put is not None and flight is not None and flight.steps > 0 else None
        writes, flight_on = put is not None, self._flight is not None
        self.plan = plan = ReadPlan.of(settings, writes=writes, reduced=reduced, flight=flight_on)
        routing.enable("moe_routing" in plan.metrics)  # the routers' shares are read only when tracked
        self._progress = progress
        self._probes = probes
        self._put = put
        self._stop = stop
        self._rank = rank
        self._world = max(1, world_size)
        self._config = config
        self._speed = Throughput(config, seq_length_of(config), self._world, settings.peak_tflops, settings.device_name)
        self._optimizer: Optimizer = None
        self._clock = StepClock()
        self._checked = reduced  # the writing rank warns about absent metrics, once
        self._fix: Fix | None = None
        self._bucket = 0
        self._offset: int | None = None  # steps trained before this process (a resumed run), known at the first step
        self._groups: GradGroups | None | bool = None  # looked up at the first logging step; False: unavailable
        # weight_norm/<group>, update_ratio/<group>: with layer_grad_norm or on their own, on the writing rank
        self._summarise = put is not None and bool(plan.metrics & {"layer_grad_norm", "layer_update_ratio"})
        self._summaries: LayerSummaries | None = None  # built at the first step end
        self._held = HeldSteps(self.plan.interval) if plan.hold else None
        if self._flight is not None and self._held is not None:
            self._flight.pending = self._pending

    def begin(self, cb_params: CallbackParams, own: Callback = None) -> None:
        """Train begin: the time base of the first step, the planned number of steps, mindformers' loss correction
        for parallel runs and where a train step ends (``cb_params.list_callback``: the training's callbacks,
        ``own``: msmon's among them)."""
        now = time.monotonic()
        self._progress.last_end_monotonic = now
        self._clock.train_begin(now)
        watch_step_end(cb_params.get("list_callback"), self._clock, own)
        self._progress.training_thread = threading.get_ident()
        callbacks = cb_params.get("list_callback")
        if "loss" in self.plan.metrics and self._put is not None and callbacks is not None:
            self._fix = resolve_fix(callbacks, self._config)

    def step_begin(self, cb_params: CallbackParams) -> None:
        """Step begin: which step runs and since when (read by the heartbeat thread)."""
        progress = self._progress
        progress.begun_monotonic = now = time.monotonic()
        self._clock.begin(now)
        progress.begun_step = cb_params.cur_step_num + (self._offset or 0)
        if self._probes is not None and self._probes.busy:
            self._probes.step_begin(progress.begun_step)

    def step_end(self, cb_params: CallbackParams) -> bool:
        """Step end: count, log every ``log_interval`` steps; True when the run must stop."""
        now = time.monotonic()
        if self._offset is None:  # MindSpore counts from 1 again in a resumed run; its optimizer restored the step
            self._optimizer = find_optimizer(cb_params)
            self._offset = steps_before(cb_params, self._optimizer)
            self._bucket = self._offset // self.plan.interval
            self._clock.first_step(self._offset)
            self._plan_steps(cb_params, self._offset)
            network = cb_params.get("train_network") or cb_params.get("network")
            if self._summarise:
                self._summaries = summaries_of_network(network)
            if self._probes is not None:  # the distributions probe reads its weights
                self._probes.network = network
        step = cb_params.cur_step_num + self._offset
        progress = self._progress
        previous, previous_step = progress.last_end_monotonic, progress.last_step or self._offset
        progress.last_end_monotonic = now
        progress.last_step = step
        steps = max(1, step - previous_step)  # several with dataset sinking
        seconds = (now - previous) / steps
        self._clock.end(now, steps)
        probes = self._probes
        if probes is not None and probes.busy:
            probes.step_end(step)
        bucket = step // self.plan.interval  # a new bucket = a logging step, also when sinking several steps per call
        if bucket != self._bucket and self._put is not None:
            self._bucket = bucket
            self._log(cb_params, step, now, seconds)
            if probes is not None:  # a probe request: one os.stat, at logging steps only
                probes.at_logging_step(step)
        elif self._held is not None:  # a reference to the step's outputs, unread: a read here would be a device sync
            self._held.hold(Held(step, now, seconds, cb_params.get("net_outputs")))
        if self._summaries is not None and (step + 1) // self.plan.interval != bucket:  # the next step logs
            self._summaries.snapshot()
        return self._stop.stop is not None

    def end(self) -> None:
        """Train end (or the session closing after a failed training): a probe window still open is cut short."""
        if self._probes is not None:
            self._probes.close()

    def _plan_steps(self, cb_params: CallbackParams, offset: int) -> None:
        """At the first step end: the data's batches over every epoch (the epochs before this process's first one
        included: a resumed run) and the step the curve ends at, the batches it skips (a resume, a rollback's
        ``data_skip_steps``) not trained again."""
        per_epoch, epochs, epoch = cb_params.get("batch_num"), cb_params.get("epoch_num"), cb_params.get(
            "cur_epoch_num")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (per_epoch, epochs, epoch)):
            return
        self._progress.data_batches = data = (epochs + epoch - 1) * per_epoch
        dataset = cb_params.get("train_dataset")
        skipped = dataset.get_init_step() if hasattr(dataset, "get_init_step") else None
        skipped = skipped if isinstance(skipped, int) and 0 < skipped < data else offset
        if self._progress.total_steps is None:
            self._progress.total_steps = offset + data - skipped

    def _log(self, cb_params: CallbackParams, step: int, now: float, step_seconds: float) -> None:
        wanted = self.plan.metrics
        record: JsonObject = {"step": step, "time": time.time(), "rank": self._rank}
        parts = split_outputs(cb_params.get("net_outputs"))
        groups = self._layer_groups(cb_params, parts)
        values = self._fixed(step_values(parts, self.plan.reads, groups))
        record.update((key, value) for key, value in values.items() if key in wanted or key not in SCALARS)
        if "loss" in wanted:  # an mcore model's lm / aux / MTP losses, when mindformers reports them
            record.update({key: self._loss(value) for key, value in take_loss_parts().items()})
        if "moe_routing" in wanted:  # tokens per expert per MoE layer since the previous logging step
            record.update(routing.take((batch_shape(cb_params, None) or (0, None))[1] or 0))
        if self._summaries is not None:
            record.update(self._summaries.at_logging_step())
        if "local_norm" in wanted and parts.get("local_norm") is not None:
            record["local_norm"] = to_max(parts["local_norm"])
        held = [self._read_held(h, groups) for h in self._held.drain()] if self._held is not None else []
        if self.plan.stats:
            self._interval_stats(record, held, first_log=not self._checked)
        if self._flight is not None:
            own = {key: value for key, value in values.items() if key != "learning_rate"}
            self._flight.extend([*held, {**self._step_entry(step, now, step_seconds), **own}])
        if "learning_rate" in wanted and "learning_rate" not in record:
            self._optimizer_lr(record)
        if "global_step" in wanted:
            record["global_step"] = step
        if "step_time_ms" in wanted:
            record["step_time_ms"] = step_seconds * 1000.0
        if "throughput" in wanted and step_seconds > 0:
            self._speed.add(record, cb_params, step_seconds, self._clock.last_inside_s)
        if "epoch" in wanted and cb_params.get("cur_epoch_num") is not None:
            record["epoch"] = int(cb_params.cur_epoch_num)
        self._cost(record, step)
        if not self._checked:
            self._checked = True
            self._warn_absent(record)
        self._progress.add_step_seconds(step_seconds)
        self._put(record)  # type: ignore[misc]

    def _step_entry(self, step: int, end: float, seconds: float) -> JsonObject:
        return {"step": step, "time": self._progress.wall(end), "step_time_ms": seconds * 1000.0}

    def _read_held(self, held: Held, groups: GradGroups | None) -> JsonObject:
        """One held step's values (each one read, now, at the logging step)."""
        groups = groups if self._flight else None
        values = self._fixed(step_values(split_outputs(held.outputs), self.plan.held_reads, groups))
        return {**self._step_entry(held.step, held.end, held.seconds), **values}

    def _pending(self) -> list[JsonObject]:
        """The flight recorder's view of the steps held unread (any thread; nothing is read)."""
        held = self._held.pending() if self._held is not None else []
        return [self._step_entry(h.step, h.end, h.seconds) for h in held]

    def _layer_groups(self, cb_params: CallbackParams, parts: Mapping[str, Tensor]) -> GradGroups | None:
        """The parameter groups of ``layer_grad_norm`` (looked up once, when the step returns squared sums)."""
        if not self.plan.layer_norms or parts.get("local_norm") is None:
            return None
        if self._groups is None:
            network = cb_params.get("train_network") or cb_params.get("network")
            groups, why = groups_of_network(network, parts.get("local_norm_size"))
            if groups is None:
                logger.warning("msmon: layer_grad_norm is not recorded: %s", why)
            self._groups = groups or False
        return self._groups if isinstance(self._groups, GradGroups) else None

    def _interval_stats(self, record: JsonObject, held: list[JsonObject], first_log: bool) -> None:
        """``grad_norm_mean``/``grad_norm_max`` and ``loss_mean`` over the steps since the last log: the held steps
        plus this step's own value. ``grad_norm_mean`` skips non-finite values (overflow steps), ``loss_mean`` keeps
        them (a NaN loss between two logs is never averaged away). At the first log: step 1's grad norm."""
        for name in ("grad_norm", "loss"):
            if name in record:
                values = [record[name], *(entry[name] for entry in held if name in entry)]
                record[f"{name}_mean"], peak = interval_stats(values, finite_mean=name == "grad_norm")
                if name == "grad_norm":
                    record["grad_norm_max"] = peak
                    if first_log and held and held[0]["step"] == 1:  # the initialised model's (grad_norm_bound)
                        record["grad_norm_initial"] = held[0]["grad_norm"]

    def _fixed(self, values: JsonObject) -> JsonObject:
        """One step's values with its loss corrected as mindformers prints it."""
        if "loss" in values:
            values["loss"] = self._loss(values["loss"])
        return values

    def _loss(self, value: Tensor) -> float:
        """A loss as mindformers prints it (corrected for pipeline stages, interleaving, accumulation)."""
        number = to_float(value)
        return self._fix(number) if self._fix is not None else number

    def _optimizer_lr(self, record: JsonObject) -> None:
        if self._optimizer is None or self._optimizer is False:  # set at the first step end; False: none/unreadable
            return
        try:
            value = optimizer_learning_rate(self._optimizer)
        except Exception as exc:  # noqa: BLE001 - msmon's read of the optimizer's schedule failed: counted, not again
            internal_errors.report("the learning-rate read", exc)
            self._optimizer, value = False, None
        if value is not None:
            record["learning_rate"] = value

    def _cost(self, record: JsonObject, step: int) -> None:
        """This logging step's StepCost, for the heartbeat; its figures in the record when tracked."""
        cost = self._clock.cost(step, record["time"])
        self._progress.add_cost(cost)
        record.update(cost.record_fields(self.plan.metrics))

    def _warn_absent(self, record: JsonObject) -> None:
        present = set(record)
        if self._groups is not None:  # recorded as grad_norm/<group>, or its absence already explained
            present.add("layer_grad_norm")
        if self._summarise:  # from the second logging step at log_interval 1, or its absence already explained
            present.add("layer_update_ratio")
        warn_absent(self.plan.metrics, present, self._config)


_CALLBACK_CLASS: type | None = None


def callback_class() -> type:
    """The MindSpore Callback subclass (mindspore is imported on first use only)."""
    global _CALLBACK_CLASS
    if _CALLBACK_CLASS is None:
        from mindspore.train import Callback

        class MsmonCallback(Callback):
            """Forwards train begin and end, step begin and step end to a StepObserver; stops the run when asked."""

            def __init__(self, observer: StepObserver) -> None:
                super().__init__()
                self.observer = observer

            def on_train_begin(self, run_context: RunContext) -> None:
                framework = sys.modules.get("mindformers")
                if self.observer.plan.layer_norms and framework is not None:  # msmon reads the arrays it prints
                    quiet_local_norm_print(getattr(framework, "__version__", None))
                self.observer.begin(run_context.original_args(), self)

            def on_train_step_begin(self, run_context: RunContext) -> None:
                self.observer.step_begin(run_context.original_args())

            def on_train_step_end(self, run_context: RunContext) -> None:
                if self.observer.step_end(run_context.original_args()):
                    run_context.request_stop()

            def on_train_end(self, run_context: RunContext) -> None:
                self.observer.end()

        _CALLBACK_CLASS = MsmonCallback
    return _CALLBACK_CLASS


def make_callback(observer: StepObserver) -> Callback:
    """A MindSpore Callback driving ``observer``."""
    return callback_class()(observer)
