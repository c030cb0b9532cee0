"""What the MoE routing detectors share: a record's tokens per expert, layer by layer (the routing records of
msmon.engine.routing, ``moe/layer_<i>/expert_<e>``: the tokens since the previous log), the step a condition began,
and experts named for people."""

from __future__ import annotations

import math

from msmon.config.metrics import MOE_PREFIX, is_expert_tokens
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import as_number
from msmon.util.ranks import rank_ranges

LAYER = "layer_"
EXPERT = "/expert_"


def expert_key(key: str) -> tuple[int, int] | None:
    """(layer, expert) of a record key holding one expert's token count (``moe/layer_0/expert_3``), else None."""
    if not is_expert_tokens(key):
        return None
    layer_part, _, expert_part = key[len(MOE_PREFIX):].partition(EXPERT)
    if not (layer_part.startswith(LAYER) and layer_part[len(LAYER):].isdigit() and expert_part.isdigit()):
        return None
    return int(layer_part[len(LAYER):]), int(expert_part)


class RoutedTokens:
    """``routed(record)``: each MoE layer's tokens per expert (expert e at index e), layers in order; a layer whose
    experts are not all there as finite numbers is left out. The keys that hold them are found once per set of
    record keys (a run's records mostly have the same keys: a record without routing costs a set comparison)."""

    def __init__(self) -> None:
        self._keys: frozenset[str] = frozenset()
        self._experts: tuple[tuple[str, int, int], ...] = ()  # (key, layer, expert)

    def __call__(self, record: JsonObject) -> dict[int, list[float]]:
        if record.keys() != self._keys:
            self._keys = frozenset(record)
            self._experts = tuple((key, *found) for key in record if (found := expert_key(key)) is not None)
        if not self._experts:
            return {}  # a run without MoE routing: every record
        layers: dict[int, dict[int, float]] = {}
        for key, layer, expert in self._experts:
            number = as_number(record[key])
            if number is not None and math.isfinite(number):
                layers.setdefault(layer, {})[expert] = number
        return {layer: [experts[e] for e in range(len(experts))] for layer, experts in sorted(layers.items())
                if sorted(experts) == list(range(len(experts)))}


def layer_cv(record: JsonObject, layer: int) -> float | None:
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
