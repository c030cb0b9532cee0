"""What the callback reads from the training besides ``net_outputs``: the optimizer, its learning rate and the steps
a resumed run trained before, the model's sequence length and the batch shape (samples, tokens)."""

from __future__ import annotations

from collections.abc import Mapping

from msmon.engine.record import to_float
from msmon.foreign import CallbackParams, ConfigValue, Optimizer
from msmon.util.mapping import dotted_get
from msmon.util.numbers import positive_int


def find_optimizer(cb_params: CallbackParams) -> Optimizer:
    """The optimizer (mindformers' wrapper holds it; ``cb_params.optimizer`` is None), else False."""
    network = cb_params.get("train_network") or cb_params.get("network")
    return cb_params.get("optimizer") or getattr(network, "optimizer", None) or False


def steps_before(cb_params: CallbackParams, optimizer: Optimizer) -> int:
    """Steps trained before this process, read at its first step end (MindSpore counts ``cur_step_num`` from 0 again
    in a resumed run): the step mindformers resumed from, as its step lines count it (``initial_step`` of its loss
    monitor, the checkpoint's step); else the optimizer's restored ``global_step`` less this process's steps, which
    falls short by every step whose gradients overflowed (a NaN loss: the optimizer skips its update and its count).
    0 when unreadable."""
    for callback in cb_params.get("list_callback") or ():
        initial = getattr(callback, "initial_step", None)
        if isinstance(initial, int) and not isinstance(initial, bool) and initial >= 0:
            return initial
    global_step = getattr(optimizer or None, "global_step", None)
    try:
        return max(int(to_float(global_step)) - int(cb_params.cur_step_num), 0) if global_step is not None else 0
    except (TypeError, ValueError, RuntimeError):
        return 0


def optimizer_learning_rate(optimizer: Optimizer) -> float | None:
    """The learning rate the optimizer applied at its last step, or None when it cannot be read."""
    lr = getattr(optimizer, "learning_rate", None)
    if lr is None:
        return None
    if getattr(optimizer, "is_group_lr", False):
        lr = lr[0]
    if getattr(optimizer, "dynamic_lr", False):
        lr = lr(optimizer.global_step - 1)  # global_step was already advanced by the step
    return to_float(lr)


def seq_length_of(config: Mapping[str, ConfigValue] | None) -> int | None:
    """``model.model_config.seq_length`` of a mindformers config, when present."""
    return positive_int(dotted_get(config, "model.model_config.seq_length"))


def batch_shape(cb_params: CallbackParams, seq_length: int | None) -> tuple[int, int | None] | None:
    """(samples, tokens) of one device's batch, from the first input's shape."""
    element = cb_params.get("train_dataset_element")
    first = element[0] if isinstance(element, list | tuple) and element else element
    shape = tuple(getattr(first, "shape", ()) or ())
    if not shape:
        return None
    samples = int(shape[0])
    if seq_length:
        return samples, samples * seq_length
    dtype = str(getattr(first, "dtype", ""))
    if len(shape) == 2 and "Int" in dtype:  # token ids: (batch, sequence)
        return samples, samples * int(shape[1])
    return samples, None
