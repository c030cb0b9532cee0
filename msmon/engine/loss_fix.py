"""The loss as mindformers prints it: ``MFLossMonitor``'s correction of a parallel run's raw train-step loss.

Under pipeline stages, micro-batch interleaving or gradient accumulation the train step returns a multiple of
the loss; ``MFLossMonitor`` divides it before printing (``LOSS_FIX`` in msmon.compat). msmon calls that same
mindformers function, so its loss equals the printed one: the run's own ``MFLossMonitor`` when it has one (its
attributes are what the Trainer gave it), else the function with the values the Trainer would have given it,
read from the training config. Resolved once at train begin; applied at logging steps only.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any

from msmon.compat import LOSS_FIX, LossFix
from msmon.errors import describe
from msmon.util.mapping import dotted_get

logger = logging.getLogger("msmon")

Fix = Callable[[float], float]


def _config_state(spec: LossFix, config: Mapping[str, Any] | None) -> SimpleNamespace:
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


def resolve(callbacks: Iterable[Any], config: Mapping[str, Any] | None) -> Fix | None:
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
