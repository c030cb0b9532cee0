"""The gradient the optimizer received, read back from its first moment (the distributions probe's ``gradients/``).

An Adam-family optimizer keeps, for each trained weight, m_t = beta1 m_{t-1} + (1 - beta1) g_t. With the moments
copied as a step begins and read as it ends, g_t = (m_t - beta1 m_{t-1}) / (1 - beta1) is that step's gradient as
the update used it: after the train step's loss-scale division and clipping. The train step hands a callback only
each gradient's squared sum; this is how the values themselves come out, at the probe's logging steps only.

msmon reads the moments of the optimizers whose first moment is exactly that average (``FIRST_MOMENTS``, by class:
a subclass may update it otherwise) and of no other (SGD, Momentum, Came, Muon, ...): then there are no gradient
histograms, and the probe says why. A step at which the optimizer did not run (an overflow, a skipped batch) leaves
its moments as they were: its ``global_step`` did not advance, and that step has no gradient histograms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from msmon.engine.record import to_host
from msmon.foreign import Optimizer, Tensor

#: (module, class) of an optimizer -> the prefix of its first moments' names (``<prefix>.<weight name>``).
FIRST_MOMENTS: dict[tuple[str, str], str] = {
    ("mindformers.core.optim.adamw", "AdamW"): "adam_m",
    ("mindspore.nn.optim.adam", "AdamWeightDecay"): "adam_m",
    ("mindspore.nn.optim.adam", "Adam"): "moment1",  # with weight_decay, its L2 term is in the moment's gradient
}


@dataclass(frozen=True)
class FirstMoments:
    """An optimizer's first moment of each trained weight (in the weights' order), its beta1 and its step counter."""

    states: tuple[Tensor, ...]
    beta1: float
    step: Tensor  # the optimizer's ``global_step`` Parameter: it advances by one when the optimizer runs

    def gradients(self, before: Sequence[Tensor], after: Sequence[Tensor]) -> list[Tensor]:
        """Each weight's gradient (float64 arrays) from its moments at the step's begin and end."""
        import numpy as np

        return [(np.asarray(m, np.float64) - self.beta1 * np.asarray(p, np.float64)) / (1.0 - self.beta1)
                for p, m in zip(before, after, strict=True)]


def first_moments(optimizer: Optimizer, weights: Sequence[Tensor]) -> tuple[FirstMoments | None, str]:
    """The first moments ``optimizer`` keeps of ``weights``, or (None, why not)."""
    import numpy as np

    if optimizer is None:
        return None, "the train-step wrapper has no optimizer"
    kind = type(optimizer)
    prefix = FIRST_MOMENTS.get((kind.__module__, kind.__name__))
    if prefix is None:
        known = ", ".join(f"{module.split('.')[0]} {name}" for module, name in FIRST_MOMENTS)
        return None, f"the optimizer {kind.__name__} keeps no first moment msmon reads ({known} do)"
    by_name = {p.name: p for p in optimizer.get_parameters()}
    missing = [w.name for w in weights if f"{prefix}.{w.name}" not in by_name]
    if missing:
        return None, f"the optimizer {kind.__name__} has no {prefix}.{missing[0]}"
    beta1 = float(np.asarray(to_host(optimizer.beta1), np.float32).reshape(-1)[0])  # the float32 the update uses
    return FirstMoments(tuple(by_name[f"{prefix}.{w.name}"] for w in weights), beta1, optimizer.global_step), ""
