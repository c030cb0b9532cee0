"""What the MoE routing detectors share: a record's tokens per expert, layer by layer (the routing records of
msmon.engine.routing, ``moe/layer_<i>/expert_<e>``: the tokens since the previous log), the step a condition began,
and experts named for people."""

from __future__ import annotations

import math
from typing import Any

from msmon.config.metrics import MOE_PREFIX, is_expert_tokens
from msmon.util.numbers import as_number
from msmon.util.ranks import rank_ranges

LAYER = "layer_"
EXPERT = "/expert_"


def routed_tokens(record: dict[str, Any]) -> dict[int, list[float]]:
    """Each MoE layer's tokens per expert (expert e at index e), layers in order; a layer whose experts are not all
    there as finite numbers is left out."""
    layers: dict[int, dict[int, float]] = {}
    for key, value in record.items():
        if not is_expert_tokens(key):
            continue
        layer_part, _, expert_part = key[len(MOE_PREFIX):].partition(EXPERT)
        number = as_number(value)
        if not (layer_part.startswith(LAYER) and layer_part[len(LAYER):].isdigit() and expert_part.isdigit()):
            continue
        if number is not None and math.isfinite(number):
            layers.setdefault(int(layer_part[len(LAYER):]), {})[int(expert_part)] = number
    return {layer: [experts[e] for e in range(len(experts))] for layer, experts in sorted(layers.items())
            if sorted(experts) == list(range(len(experts)))}


def layer_cv(record: dict[str, Any], layer: int) -> float | None:
    """The layer's coefficient of variation of its tokens per expert, as recorded."""
    number = as_number(record.get(f"{MOE_PREFIX}{LAYER}{layer}/cv"))
    return number if number is not None and math.isfinite(number) else None


def experts_text(experts: list[int]) -> str:
    """``expert 3``, ``experts 0, 1``, ``experts 4-9``."""
    return f"expert {experts[0]}" if len(experts) == 1 else f"experts {rank_ranges(experts)}"


class LogSteps:
    """The step of the previous log with routing records: a condition seen at a log began right after it (the
    records count the tokens since that log)."""

    def __init__(self) -> None:
        self._previous: int | None = None

    def onset(self, step: int) -> int:
        """The first step of the window ``step``'s record covers; then ``step`` becomes the previous log."""
        previous, self._previous = self._previous, step
        return previous + 1 if previous is not None and previous < step else step
