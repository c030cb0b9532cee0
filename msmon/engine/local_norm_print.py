"""Keep ``MFLossMonitor`` from printing the raw per-gradient squared sums at every step once msmon records them.

With 7 train-step outputs mindformers 1.8-1.9's reader of the outputs (``_get_loss_output``, named per version in
msmon.compat ``LOSS_OUTPUT_READER``) logs ``norm_size`` and the whole ``local_norm`` array at INFO on every step.
A log filter would hide the lines but not the cost: formatting the Tensor takes 0.65 ms for 21 parameters and
6 ms for 400 on CPU, every step. ``install`` wraps that reader so it gets the first 5 outputs, all it returns;
``MFLossMonitor`` prints and computes exactly what it did before, without the arrays. msmon's callback reads the
squared sums itself, only at logging steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msmon.compat import LOSS_OUTPUT_READER
from msmon.engine.wrap import entry_for, wrap_once

FULL_OUTPUTS = 7  # loss, overflow, loss_scale, learning_rate, global_norm, local_norm, local_norm_size
READ_OUTPUTS = 5


def install(version: str | None) -> bool:
    """Wrap mindformers' output reader (idempotent); False, with a warning, for a version msmon does not know."""
    patch = entry_for(LOSS_OUTPUT_READER, version, "msmon's quieting of MFLossMonitor's local_norm print",
                      "MFLossMonitor prints the raw local_norm array at every step")
    if patch is None:
        return False

    def quiet(original: Callable[..., Any]) -> Callable[..., Any]:
        def read_outputs(output: Any) -> Any:
            if isinstance(output, tuple | list) and len(output) == FULL_OUTPUTS:
                output = output[:READ_OUTPUTS]
            return original(output)

        return read_outputs

    wrap_once(patch.module, patch.attribute, quiet)
    return True
