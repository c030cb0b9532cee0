"""What a step's outputs hold, read as mindformers reads them, at logging steps only.

The parts of ``cb_params.net_outputs`` (mindformers' tuples, ``TRAIN_STEP_OUTPUTS``). The steps between two logs:
one slot per step of the interval (``step % log_interval``) keeps (step, end time, step seconds, ``net_outputs``)
and reads nothing (on Ascend every read is a host-device sync); at the logging step ``drain`` returns them in step
order and empties the slots, so at most ``log_interval - 1`` steps' outputs stay alive unread; ``step_values``
reads one step's values once, for the interval statistics and the flight recorder alike.

The loss as mindformers prints it: under pipeline stages, micro-batch interleaving or gradient accumulation the
train step returns a multiple of the loss and ``MFLossMonitor`` divides it before printing (``LOSS_FIX`` in
msmon.compat). msmon calls that same mindformers function (``resolve_fix``), so its loss equals the printed one:
the run's own ``MFLossMonitor`` when it has one, else the function with the values the Trainer would have given
it, read from the training config; resolved once at train begin.

The separate losses of an mcore model (lm, MoE auxiliary, MTP, indexer): with ``print_separate_loss`` the train
step adds each part into a ``parameter_register`` parameter that ``MFLossMonitor`` reads and zeroes at every step
end through one module function, before msmon's callback runs. ``install_loss_parts`` wraps that function: it
copies the values first (on CPU ``asnumpy()`` shares memory with the parameter that is then zeroed, so mindformers
1.9 alone prints 0 for every part there) and keeps them for ``take_loss_parts``.

The per-gradient squared sums: with 7 train-step outputs mindformers 1.8-1.9's reader of the outputs
(``LOSS_OUTPUT_READER``) logs ``norm_size`` and the whole ``local_norm`` array at INFO on every step; formatting the
Tensor costs 0.65 ms for 21 parameters and 6 ms for 400 on CPU. ``quiet_local_norm_print`` hands that reader the
first 5 outputs, all it returns: ``MFLossMonitor`` prints and computes what it did before, without the arrays, and
msmon reads the squared sums itself.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from types import SimpleNamespace
from typing import NamedTuple

from msmon.compat import LOSS_FIX, LOSS_OUTPUT_READER, LOSS_PART_KEYS, LOSS_PARTS, TRAIN_STEP_OUTPUTS, LossFix
from msmon.engine.grad_groups import GradGroups
from msmon.engine.record import to_float
from msmon.engine.wrap import entry_for, wrap_once
from msmon.errors import describe
from msmon.foreign import Callback, ConfigValue, Passed, Tensor
from msmon.util.jsonfiles import JsonObject
from msmon.util.mapping import dotted_get

logger = logging.getLogger("msmon")


def split_outputs(outputs: Passed) -> dict[str, Tensor]:
    """Name the parts of ``cb_params.net_outputs`` (mindformers' tuples, ``TRAIN_STEP_OUTPUTS``, or a bare loss)."""
    if not isinstance(outputs, tuple | list):
        return {"loss": outputs} if outputs is not None else {}
    names = TRAIN_STEP_OUTPUTS.get(len(outputs), ("loss",))
    return dict(zip(names, outputs, strict=False))


#: The scalar outputs ``step_values`` can read (``overflow`` as 0/1).
SCALARS: tuple[str, ...] = ("loss", "grad_norm", "learning_rate", "loss_scale", "overflow")


class Held(NamedTuple):
    """One step between two logs."""

    step: int
    end: float  # time.monotonic() at its end
    seconds: float  # its duration (the mean over the steps of one call when sinking)
    outputs: Passed  # its net_outputs, unread


def step_values(parts: Mapping[str, Tensor], names: Collection[str], groups: GradGroups | None) -> JsonObject:
    """The values of one step's named outputs (``names`` of ``SCALARS``; the ``grad_norm/<group>`` norms when
    ``groups`` is given and the step returned its squared sums). Each is one read."""
    values: JsonObject = {}
    for name in SCALARS:
        value = parts.get(name)
        if name in names and value is not None:
            values[name] = int(bool(to_float(value))) if name == "overflow" else to_float(value)
    if groups is not None and parts.get("local_norm") is not None:
        values.update(groups.norms(parts["local_norm"]))
    return values


class HeldSteps:
    """Preallocated slots for the steps of one log interval (written and drained on the training thread)."""

    def __init__(self, interval: int) -> None:
        self._slots: list[Held | None] = [None] * max(1, interval)
        self._empty: tuple[None, ...] = (None,) * len(self._slots)

    def hold(self, held: Held) -> None:
        """Keep a reference to a step's outputs (no read)."""
        self._slots[held.step % len(self._slots)] = held

    def drain(self) -> list[Held]:
        """The held steps in step order; the slots are emptied (the outputs are released)."""
        held = sorted((h for h in self._slots if h is not None), key=lambda h: h.step)
        self._slots[:] = self._empty
        return held

    def pending(self) -> list[Held]:
        """The steps held now (any thread: one C-level copy of the slot list, nothing read)."""
        return [h for h in list(self._slots) if h is not None]


Fix = Callable[[float], float]


def _config_state(spec: LossFix, config: Mapping[str, ConfigValue] | None) -> SimpleNamespace:
    """The monitor attributes the method reads, as the Trainer would set them from ``config``."""
    import mindspore as ms

    values = {attr: dotted_get(config, key) for attr, key in spec.attributes.items()}
    for attr, value in values.items():
        if attr != "calculate_per_token_loss" and not (isinstance(value, int) and value >= 1):
            values[attr] = 1
    values["calculate_per_token_loss"] = bool(values.get("calculate_per_token_loss"))
    stages = ms.get_auto_parallel_context("pipeline_stages")
    if stages > 1 or ms.get_auto_parallel_context("parallel_mode") not in spec.accumulation_modes:
        values["gradient_accumulation_steps"] = 1  # the Trainer resets it there (BaseTrainer)
    return SimpleNamespace(print_warning_flag=False, **values)


def resolve_fix(callbacks: Iterable[Callback], config: Mapping[str, ConfigValue] | None) -> Fix | None:
    """mindformers' loss correction for this run (``callbacks``: the training's callback objects), or None when it
    changes nothing (no pipeline stages, interleaving or accumulation) or this mindformers version is unknown
    (then a warning)."""
    version = getattr(importlib.import_module("mindformers"), "__version__", None)
    spec = LOSS_FIX.get(version or "")
    if spec is None:
        logger.warning("msmon: the loss correction of parallel runs is known for mindformers %s, not %s: the loss is "
                       "recorded as the train step returns it", ", ".join(sorted(LOSS_FIX)), version)
        return None
    try:
        monitor_class = getattr(importlib.import_module(spec.module), spec.monitor)
        monitor = next((cb for cb in callbacks if isinstance(cb, monitor_class)), None)
        if monitor is not None:
            fix = functools.partial(getattr(monitor, spec.method), print_warning=False)
        else:
            state = _config_state(spec, config)
            fix = functools.partial(getattr(monitor_class, spec.method), state, print_warning=False)
        if float(fix(1.0)) == 1.0:
            return None
    except Exception as exc:  # a monitor never breaks training: the raw loss is recorded
        logger.warning("msmon: cannot apply mindformers' loss correction (%s); the loss is recorded as the train "
                       "step returns it", describe(exc))
        return None
    return lambda value: float(fix(value))


_loss_parts: dict[str, float] = {}


def install_loss_parts(version: str) -> bool:
    """Wrap mindformers' reader of the separate losses (idempotent); False, with a warning, for an unknown
    mindformers version (the parts are then not recorded)."""
    spec = entry_for(LOSS_PARTS, version, "msmon's recording of the separate losses",
                     "loss_lm/loss_aux/loss_mtp are not recorded")
    if spec is None:
        return False
    from mindformers.utils.parameter_register import parameter_register

    def tap(original: Callable[[], Passed]) -> Callable[[], tuple[Tensor, ...]]:
        def read_separate_loss() -> tuple[Tensor, ...]:
            values = tuple(parameter_register.get(name).asnumpy().copy() for name in spec.names)
            original()  # mindformers' own read-and-zero
            publish_loss_parts(dict(zip(spec.names, values, strict=True)))
            return values

        return read_separate_loss

    wrap_once(spec.module, spec.function, tap)
    return True


def publish_loss_parts(values: Mapping[str, Tensor]) -> None:
    """Keep one step's parts under msmon's record keys: the lm loss always, the others when not 0 (a
    dense model's MTP or auxiliary loss is an exact 0, not a series; NaN is kept)."""
    _loss_parts.clear()
    for name, value in values.items():
        number = to_float(value)
        if name == "lm_loss" or number != 0.0:
            _loss_parts[LOSS_PART_KEYS[name]] = number


def take_loss_parts() -> dict[str, float]:
    """The parts of the latest step (empty when mindformers reported none), removed once taken."""
    parts = dict(_loss_parts)
    _loss_parts.clear()
    return parts


FULL_OUTPUTS = 7  # loss, overflow, loss_scale, learning_rate, global_norm, local_norm, local_norm_size
READ_OUTPUTS = 5


def quiet_local_norm_print(version: str | None) -> bool:
    """Wrap mindformers' output reader (idempotent); False, with a warning, for a version msmon does not know."""
    patch = entry_for(LOSS_OUTPUT_READER, version, "msmon's quieting of MFLossMonitor's local_norm print",
                      "MFLossMonitor prints the raw local_norm array at every step")
    if patch is None:
        return False

    def quiet(original: Callable[..., Passed]) -> Callable[..., Passed]:
        def read_outputs(output: Passed) -> Passed:
            if isinstance(output, tuple | list) and len(output) == FULL_OUTPUTS:
                output = output[:READ_OUTPUTS]
            return original(output)

        return read_outputs

    wrap_once(patch.module, patch.attribute, quiet)
    return True
