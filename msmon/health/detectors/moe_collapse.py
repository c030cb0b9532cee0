"""Router collapse: an MoE layer that routes nearly every token to the same expert(s), sustained over logs."""

from __future__ import annotations

from msmon.config.health import MoeCollapseSettings
from msmon.health.alert import Signal
from msmon.health.detectors.moe_layers import LogSteps, RoutedTokens, experts_text
from msmon.util.jsonfiles import JsonObject


class MoeCollapseDetector:
    """Each expert's fraction of a layer's tokens (its tokens x top-k / the routed slots); uniform routing gives each
    ``top_k / num_experts``. A layer with an expert above ``fraction`` on ``patience`` consecutive logs has
    collapsed; reported once, until the layer recovers. Silent without ``top_k`` and where every expert is chosen."""

    name = "moe_collapse"

    def __init__(self, settings: MoeCollapseSettings, top_k: int | None) -> None:
        self.settings = settings
        self.top_k = top_k
        self._logs = LogSteps()
        self._routed = RoutedTokens()
        self._streak: dict[int, tuple[int, int]] = {}  # layer -> (consecutive logs collapsed, the onset step)
        self._reported: set[int] = set()

    def observe(self, record: JsonObject) -> Signal | None:
        step = record.get("step")
        layers = self._routed(record)
        if not layers or self.top_k is None or not isinstance(step, int):
            return None
        onset = self._logs.onset(step)
        found = []
        for layer, tokens in layers.items():
            total = sum(tokens)
            if total <= 0 or self.top_k >= len(tokens):
                continue
            shares = [t * self.top_k / total for t in tokens]
            busy = [e for e, share in enumerate(shares) if share > self.settings.fraction]
            if not busy:
                self._streak.pop(layer, None)
                self._reported.discard(layer)
                continue
            logs, since = self._streak.get(layer, (0, onset))
            self._streak[layer] = (logs + 1, since)
            if logs + 1 >= self.settings.patience and layer not in self._reported:
                self._reported.add(layer)
                found.append((layer, busy, shares, since, logs + 1))
        return self._signal(found) if found else None

    def _signal(self, found: list[tuple[int, list[int], list[float], int, int]]) -> Signal:
        parts = []
        for layer, busy, shares, since, logs in found:
            uniform = self.top_k / len(shares) if self.top_k else 0.0
            taken = ", ".join(f"{shares[e]:.0%}" for e in busy)
            parts.append(f"MoE layer {layer} collapsed onto {experts_text(busy)}: {taken} of its tokens (uniform "
                         f"routing: {uniform:.0%} each) for {logs} logs since step {since}")
        layer, busy, shares, since, logs = found[0]
        values = {"layer": layer, "experts": busy, "fractions": [round(shares[e], 4) for e in busy],
                  "uniform": round((self.top_k or 0) / len(shares), 4), "top_k": self.top_k, "since_step": since,
                  "logs": logs, "layers": [item[0] for item in found]}
        message = "; ".join(parts) + ": its other experts starve (the router no longer spreads the load)"
        return Signal("critical", message, values, onset_step=min(item[3] for item in found))
