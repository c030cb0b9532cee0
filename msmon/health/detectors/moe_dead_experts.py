"""Dead experts: an expert of an MoE layer that receives no token at all for a window of steps."""

from __future__ import annotations

from msmon.config.health import MoeDeadExpertsSettings
from msmon.health.alert import Signal
from msmon.health.detectors.moe_layers import LogSteps, RoutedTokens, experts_text
from msmon.util.jsonfiles import JsonObject


class MoeDeadExpertsDetector:
    """An expert whose tokens are exactly 0 on consecutive logs (at least 2) spanning ``steps`` training steps is
    dead: no token reaches it, so its weights no longer train. Reported once, until it gets tokens again."""

    name = "moe_dead_experts"

    def __init__(self, settings: MoeDeadExpertsSettings) -> None:
        self.settings = settings
        self._logs = LogSteps()
        self._routed = RoutedTokens()
        self._idle: dict[tuple[int, int], tuple[int, int]] = {}  # (layer, expert) -> (the first idle step, logs)
        self._reported: set[tuple[int, int]] = set()

    def observe(self, record: JsonObject) -> Signal | None:
        step = record.get("step")
        layers = self._routed(record)
        if not layers or not isinstance(step, int):
            return None
        onset = self._logs.onset(step)
        dead: dict[int, list[int]] = {}
        since: dict[int, int] = {}
        for layer, tokens in layers.items():
            for expert, count in enumerate(tokens):
                key = (layer, expert)
                if count != 0:
                    self._idle.pop(key, None)
                    self._reported.discard(key)
                    continue
                first, logs = self._idle.get(key, (onset, 0))
                self._idle[key] = (first, logs + 1)
                if logs + 1 >= 2 and step - first + 1 >= self.settings.steps and key not in self._reported:
                    self._reported.add(key)
                    dead.setdefault(layer, []).append(expert)
                    since[layer] = min(since.get(layer, first), first)
        if not dead:
            return None
        message = "; ".join(f"MoE layer {layer}: {experts_text(experts)} received no token for "
                            f"{step - since[layer] + 1} steps since step {since[layer]}"
                            for layer, experts in dead.items())
        layer = next(iter(dead))
        values = {"layer": layer, "experts": dead[layer], "since_step": since[layer], "steps": step - since[layer] + 1,
                  "layers": {str(k): v for k, v in dead.items()}}
        return Signal("critical", message + ": dead experts (their weights no longer train)", values,
                      onset_step=min(since.values()))
