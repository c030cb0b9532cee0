"""Where it breaks, on recorded-style records: the growth, spike and non-finite alerts name the gradient-norm group
that moved against its own baseline, live (HealthMonitor) and in `msmon replay` alike (the same code path)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import run_msmon

from msmon.config.health import HealthSettings
from msmon.health.alert import Signal
from msmon.health.groups import GroupNorms
from msmon.health.monitor import HealthMonitor

GROUPS = ("embedding", "layers.0", "layers.1", "layers.2", "final_norm", "head")
BASE = {"embedding": 0.8, "layers.0": 1.2, "layers.1": 0.9, "layers.2": 0.7, "final_norm": 0.05, "head": 0.6}


def trace(steps: int = 400, grow: dict[str, tuple[int, float]] | None = None, seed: int = 0,
          interval: int = 1) -> list[dict[str, Any]]:
    """Records with per-group norms (noise like a small batch's) whose root sum of squares is grad_norm; a group
    in ``grow`` climbs by its rate per step from its start step."""
    rng = random.Random(seed)
    records = []
    for step in range(interval, steps + 1, interval):
        norms = {}
        for group in GROUPS:
            value = BASE[group] * math.exp(rng.gauss(0.0, 0.25))
            start, rate = (grow or {}).get(group, (steps + 1, 0.0))
            norms[f"grad_norm/{group}"] = value * (1 + rate) ** max(0, step - start)
        total = math.sqrt(sum(v * v for v in norms.values()))
        records.append({"step": step, "time": 1.8e9 + step, "loss": 3.0 - step / 400 + rng.gauss(0, 0.05),
                        "grad_norm": total, "learning_rate": 1e-3, **norms})
    return records


def run(records: list[dict[str, Any]]) -> list[Any]:
    monitor = HealthMonitor(HealthSettings())
    for record in records:
        monitor.observe(dict(record))
    return monitor.alerts


def test_growth_of_one_block_names_that_block_and_its_baseline_step():
    alerts = run(trace(grow={"layers.1": (200, 0.03)}))
    growth = next(a for a in alerts if a.detector == "grad_explosion")
    assert 200 < growth.step < 300
    assert growth.values["groups"]["led_by"] == ["layers.1"]
    assert "led by layers.1 (x" in growth.message and "; other groups <= x" in growth.message
    assert f"since step {growth.values['low_step']}" in growth.message
    ratios = growth.values["groups"]["ratios"]
    assert ratios["layers.1"] > 2.5 and max(v for g, v in ratios.items() if g != "layers.1") < 1.6


def test_the_group_that_doubled_first_is_named_when_another_moved_most():
    groups = GroupNorms()
    for step in range(1, 201):
        layer = 1.0 if step < 120 else 2.5  # doubled at step 120 (the rolling median of 3 logs: step 121)
        head = 1.0 if step < 180 else 10.0
        groups.observe({"step": step, "grad_norm/layers.0": layer, "grad_norm/head": head, "grad_norm/embedding": 1.0})
    signal = Signal("warning", "growing", {"low_step": 100, "window_steps": 60, "ratio": 4.0})
    explained = groups.explain("grad_explosion", signal, {"step": 200})
    assert explained.message == ("growing; grad norm x4.0 since step 100, led by head (x10.0); other groups <= x2.5; "
                                 "layers.0 doubled first (step 121)")
    assert explained.values["groups"]["first"] == {"group": "layers.0", "step": 121}
    assert groups.explain("dead_series", signal, {"step": 200}) is signal
    assert groups.explain("grad_explosion", signal, {"step": 199}) is signal  # not the record it saw last


def test_a_loss_spike_names_the_group_whose_norm_jumped_at_that_step():
    records = trace()
    for record in records:
        if 300 <= record["step"] < 330:
            record["loss"] *= 4
            record["grad_norm/layers.2"] *= 20
    spike = next(a for a in run(records) if a.detector == "loss_spike")
    assert spike.values["groups"]["led_by"][0] == "layers.2"
    assert "grad norms at this step against their previous 10 logs: led by layers.2 (x" in spike.message
    assert spike.onset_step == 300  # kept through the explanation (a rollback goes back to it)
    assert spike.values["first_mover"] == {"group": "layers.2", "signal": "grad_norm", "step": 300, "lead_steps": 0,
                                           "shown_by": "the loss", "shown_step": 300}


def test_a_non_finite_gradient_names_the_groups_that_are_not_finite():
    records = trace(100)
    records[60]["grad_norm"] = records[60]["grad_norm/layers.1"] = math.nan
    (alert,) = [a for a in run(records) if a.detector == "nonfinite"]
    assert "non-finite gradient norm in layers.1 (NaN); the other groups are finite" in alert.message
    assert alert.values["groups"]["nonfinite"] == ["layers.1"]


def test_records_without_groups_give_the_same_alerts_as_before():
    with_groups = trace(grow={"layers.1": (200, 0.03)})
    plain = [{k: v for k, v in r.items() if not k.startswith("grad_norm/")} for r in with_groups]
    alerts = run(plain)
    assert alerts and all("groups" not in a.values and "led by" not in a.message for a in alerts)
    assert [(a.step, a.detector) for a in alerts] == [(a.step, a.detector) for a in run(with_groups)]


@pytest.mark.parametrize("interval", [10])
def test_replay_names_the_same_group_as_the_live_monitor(tmp_path: Path, interval: int):
    records = trace(600, grow={"layers.0": (300, 0.02)}, interval=interval)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    live = [a.to_dict() for a in run(records)]
    result = run_msmon("replay", str(path), "--json", cwd=tmp_path)
    assert result.code == 0, result.stderr
    replayed = json.loads(result.stdout)
    assert [(a["step"], a["message"]) for a in replayed] == [(a["step"], a["message"]) for a in live]
    growth = next(a for a in replayed if a["detector"] == "grad_explosion")
    assert growth["values"]["groups"]["led_by"][0] == "layers.0"
