"""The separate losses of an mcore model (lm, MoE auxiliary, MTP, indexer) as mindformers reports them.

With ``print_separate_loss`` (mindformers' default for the mcore models) the train step adds each
part into a ``parameter_register`` parameter; ``MFLossMonitor`` reads and zeroes them at every step end
(only for MoE or MTP models) through one module function, before msmon's callback runs. ``install``
wraps that function: it copies the values first, returns the copies and keeps them for ``take``. The
copies matter on CPU, where ``asnumpy()`` shares memory with the parameter that is then zeroed, so
mindformers 1.9 alone prints 0 for every part there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msmon.compat import LOSS_PART_KEYS, LOSS_PARTS
from msmon.engine.record import to_float
from msmon.engine.wrap import entry_for, wrap_once

_latest: dict[str, float] = {}


def install(version: str) -> bool:
    """Wrap mindformers' reader of the separate losses (idempotent); False, with a warning, for an unknown
    mindformers version (the parts are then not recorded)."""
    spec = entry_for(LOSS_PARTS, version, "msmon's recording of the separate losses",
                     "loss_lm/loss_aux/loss_mtp are not recorded")
    if spec is None:
        return False
    from mindformers.utils.parameter_register import parameter_register

    def tap(original: Callable[[], Any]) -> Callable[[], tuple[Any, ...]]:
        def read_separate_loss() -> tuple[Any, ...]:
            values = tuple(parameter_register.get(name).asnumpy().copy() for name in spec.names)
            original()  # mindformers' own read-and-zero
            publish(dict(zip(spec.names, values, strict=True)))
            return values

        return read_separate_loss

    wrap_once(spec.module, spec.function, tap)
    return True


def publish(values: dict[str, Any]) -> None:
    """Keep one step's parts under msmon's record keys: the lm loss always, the others when not 0 (a
    dense model's MTP or auxiliary loss is an exact 0, not a series; NaN is kept)."""
    _latest.clear()
    for name, value in values.items():
        number = to_float(value)
        if name == "lm_loss" or number != 0.0:
            _latest[LOSS_PART_KEYS[name]] = number


def take() -> dict[str, float]:
    """The parts of the latest step (empty when mindformers reported none), removed once taken."""
    parts = dict(_latest)
    _latest.clear()
    return parts
