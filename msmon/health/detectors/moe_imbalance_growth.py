"""Imbalance growth: an MoE layer whose load imbalance (the cv of its tokens per expert) rises well above its own
low."""

from __future__ import annotations

import statistics
from collections import deque

from msmon.config.health import MoeImbalanceGrowthSettings
from msmon.health.alert import Signal
from msmon.health.detectors.moe_layers import LogSteps, RoutedTokens, experts_text, layer_cv
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number


class MoeImbalanceGrowthDetector:
    """A layer's level is the median cv of its last ``level_logs`` logs, its low the lowest level so far (no low, no
    alert: the first logs only form it). A cv above the low + ``rise`` and above ``ratio`` x the low on ``patience``
    consecutive logs is a growth; reported once, until the layer's cv comes back."""

    name = "moe_imbalance_growth"

    def __init__(self, settings: MoeImbalanceGrowthSettings) -> None:
        self.settings = settings
        self._logs = LogSteps()
        self._routed = RoutedTokens()
        self._recent: dict[int, deque[float]] = {}
        self._low: dict[int, float] = {}
        self._streak: dict[int, tuple[int, int]] = {}  # layer -> (consecutive logs grown, the onset step)
        self._reported: set[int] = set()

    def observe(self, record: JsonObject) -> Signal | None:
        s = self.settings
        step = record.get("step")
        layers = self._routed(record)
        if not layers or not isinstance(step, int):
            return None
        onset = self._logs.onset(step)
        found = []
        for layer, tokens in layers.items():
            cv = layer_cv(record, layer)
            if cv is None:
                continue
            low = self._low.get(layer)
            if low is not None and cv > low + s.rise and cv > s.ratio * low:
                logs, since = self._streak.get(layer, (0, onset))
                self._streak[layer] = (logs + 1, since)
                if logs + 1 >= s.patience and layer not in self._reported:
                    self._reported.add(layer)
                    found.append((layer, cv, low, since, logs + 1, busiest(tokens)))
            else:
                self._streak.pop(layer, None)
                self._reported.discard(layer)
            recent = self._recent.setdefault(layer, deque(maxlen=s.level_logs))
            recent.append(cv)
            if len(recent) == s.level_logs:
                level = statistics.median(recent)
                self._low[layer] = level if low is None else min(low, level)
        if not found:
            return None
        message = "; ".join(f"MoE layer {layer}: load imbalance (cv of the tokens per expert) {fmt_number(cv, 3)} "
                            f"against its low {fmt_number(low, 3)} for {logs} logs since step {since}, most load on "
                            f"{experts_text(experts)}" for layer, cv, low, since, logs, experts in found)
        layer, cv, low, since, logs, experts = found[0]
        values = {"layer": layer, "experts": experts, "cv": cv, "low": low, "since_step": since, "logs": logs,
                  "layers": [item[0] for item in found]}
        return Signal("warning", message, values, onset_step=min(item[3] for item in found))


def busiest(tokens: list[float]) -> list[int]:
    """The experts more than one standard deviation above the mean load (else the busiest one), busiest first."""
    mean = sum(tokens) / len(tokens)
    spread = statistics.pstdev(tokens)
    above = [e for e, t in enumerate(tokens) if t > mean + spread]
    return sorted(above, key=lambda e: -tokens[e]) or [max(range(len(tokens)), key=tokens.__getitem__)]
