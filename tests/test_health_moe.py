"""Unit tests of the MoE routing-health detectors (moe_collapse, moe_dead_experts, moe_imbalance_growth) on synthetic
routing records, and on the clean MoE quickstart's recorded ones (tests/data/moe_quickstart_routing.jsonl: the 20
logs of `msmon run quickstart-moe`, 2 layers of 4 experts, top-2, 2560 routed slots a log)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from msmon.config.coerce import build, range_findings
from msmon.config.health import (
    HealthSettings,
    MoeCollapseSettings,
    MoeDeadExpertsSettings,
    MoeImbalanceGrowthSettings,
)
from msmon.config.schema import MonitorSettings
from msmon.health.detectors import build_detectors, moe_top_k
from msmon.health.detectors.moe_collapse import MoeCollapseDetector
from msmon.health.detectors.moe_dead_experts import MoeDeadExpertsDetector
from msmon.health.detectors.moe_imbalance_growth import MoeImbalanceGrowthDetector
from msmon.health.detectors.moe_layers import RoutedTokens
from msmon.health.monitor import HealthMonitor

CLEAN = Path(__file__).parent / "data" / "moe_quickstart_routing.jsonl"
CONFIG = {"model": {"model_config": {"num_experts": 4, "num_experts_per_tok": 2}}}
ROUTING = ("moe_collapse", "moe_dead_experts", "moe_imbalance_growth")


def log(step: int, *layers: list[float]) -> dict:
    """One routing record: each layer's tokens per expert, with its cv as msmon.engine.routing writes it."""
    record: dict = {"step": step, "time": 1000.0 + step, "loss": 1.0}
    for index, tokens in enumerate(layers):
        mean = sum(tokens) / len(tokens)
        spread = (sum((t - mean) ** 2 for t in tokens) / len(tokens)) ** 0.5
        record.update({f"moe/layer_{index}/expert_{e}": t for e, t in enumerate(tokens)})
        record[f"moe/layer_{index}/cv"] = spread / mean if mean else 0.0
    return record


BALANCED = [640.0, 650.0, 630.0, 640.0]  # top-2 of 4: 2560 slots of 1280 tokens, each expert half of them
COLLAPSED = [1280.0, 400.0, 440.0, 440.0]  # expert 0 gets every token


def fired(detector, records: list[dict]) -> list[tuple[int, object]]:
    return [(r["step"], s) for r in records if (s := detector.observe(dict(r))) is not None]


def test_the_routing_records_are_read_layer_by_layer_and_incomplete_layers_are_left_out():
    record = log(10, BALANCED, COLLAPSED)
    record["moe/layer_2/expert_1"] = 5.0  # no expert_0: not a whole layer
    record["moe/layer_x/expert_0"] = 1.0
    routed = RoutedTokens()
    assert routed(record) == {0: BALANCED, 1: COLLAPSED}
    assert routed({"step": 1, "loss": 2.0}) == {}
    assert routed(record) == {0: BALANCED, 1: COLLAPSED}  # the keys found again


def test_the_clean_moe_quickstart_raises_no_routing_alert():
    """Its experts get 40-62% of the tokens (uniform: 50%), none ever 0, cv 0.006-0.16: far from every default."""
    records = [json.loads(line) for line in CLEAN.read_text().splitlines()]
    assert len(records) == 20
    fractions = [t * 2 / sum(tokens) for r in records for tokens in RoutedTokens()(r).values() for t in tokens]
    cvs = [r[f"moe/layer_{layer}/cv"] for r in records for layer in (0, 1)]
    assert (round(min(fractions), 2), round(max(fractions), 2)) == (0.40, 0.62)  # docs/health.md
    assert 0.006 < min(cvs) and max(cvs) < 0.16
    monitor = HealthMonitor(HealthSettings(), CONFIG)
    assert set(ROUTING) <= {d.name for d in monitor.detectors}
    for record in records:
        monitor.observe(record)
    assert [a for a in monitor.alerts if a.detector in ROUTING] == []


def test_a_collapse_on_patience_logs_names_the_layer_and_expert_and_its_onset_once():
    det = MoeCollapseDetector(MoeCollapseSettings(), top_k=2)
    records = [log(step, BALANCED, BALANCED) for step in range(10, 60, 10)]
    records += [log(step, BALANCED, COLLAPSED) for step in range(60, 120, 10)]
    hits = fired(det, records)
    assert [step for step, _ in hits] == [80]  # 3 logs (60, 70, 80), once
    signal = hits[0][1]
    assert (signal.values["layer"], signal.values["experts"], signal.onset_step) == (1, [0], 51)
    assert signal.values["fractions"] == [1.0] and signal.values["uniform"] == 0.5
    assert signal.message.startswith("MoE layer 1 collapsed onto expert 0: 100% of its tokens (uniform routing: 50%")
    assert signal.severity == "critical"
    again = fired(det, [log(120, BALANCED, BALANCED)] + [log(s, COLLAPSED, COLLAPSED) for s in (130, 140, 150)])
    assert [(step, s.values["layers"]) for step, s in again] == [(150, [0, 1])]  # re-armed after the recovery


def test_a_collapse_needs_the_top_k_and_more_experts_than_it():
    collapsed = [log(step, COLLAPSED) for step in range(10, 100, 10)]
    assert fired(MoeCollapseDetector(MoeCollapseSettings(), top_k=None), collapsed) == []
    assert fired(MoeCollapseDetector(MoeCollapseSettings(), top_k=4), collapsed) == []  # every expert chosen
    assert moe_top_k(CONFIG) == 2 and moe_top_k({"model": {"model_config": {"moe_router_topk": 8}}}) == 8
    assert moe_top_k(None) is None and moe_top_k(CONFIG, given=1) == 1
    detector = next(d for d in build_detectors(HealthSettings(), CONFIG) if d.name == "moe_collapse")
    assert detector.top_k == 2


def test_an_expert_without_tokens_for_the_window_is_dead_and_named_once():
    det = MoeDeadExpertsDetector(MoeDeadExpertsSettings())
    idle = [0.0, 1280.0, 640.0, 640.0]
    records = [log(10, BALANCED, BALANCED)] + [log(step, BALANCED, idle) for step in range(20, 90, 10)]
    hits = fired(det, records)
    assert [step for step, _ in hits] == [60]  # zero tokens over steps 11-60: 50 steps
    signal = hits[0][1]
    assert (signal.values["layer"], signal.values["experts"], signal.onset_step) == (1, [0], 11)
    assert signal.message.startswith("MoE layer 1: expert 0 received no token for 50 steps since step 11")
    revived = fired(det, [log(90, BALANCED, BALANCED)] + [log(s, BALANCED, idle) for s in range(100, 160, 10)])
    assert [step for step, _ in revived] == [140]
    one_log = MoeDeadExpertsDetector(MoeDeadExpertsSettings(steps=10))
    assert fired(one_log, [log(100, [0.0, 5.0, 5.0, 10.0])]) == []  # a single log is never enough


def test_imbalance_growth_needs_the_layers_own_low_and_a_sustained_rise():
    det = MoeImbalanceGrowthDetector(MoeImbalanceGrowthSettings())
    lopsided = [900.0, 700.0, 500.0, 460.0]  # cv 0.27: a start the aux loss then balances
    records = [log(step, lopsided) for step in range(10, 60, 10)] + [log(s, BALANCED) for s in range(60, 120, 10)]
    assert fired(det, records) == []  # the low falls with the balance, nothing rises above it
    hits = fired(det, [log(step, COLLAPSED) for step in range(120, 170, 10)])
    assert [step for step, _ in hits] == [140]
    signal = hits[0][1]
    assert (signal.values["layer"], signal.values["experts"], signal.onset_step) == (0, [0], 111)
    assert signal.severity == "warning" and "MoE layer 0: load imbalance" in signal.message
    early = MoeImbalanceGrowthDetector(MoeImbalanceGrowthSettings())
    assert fired(early, [log(10, BALANCED)] + [log(s, COLLAPSED) for s in range(20, 60, 10)]) == []  # no low yet


@pytest.mark.parametrize("detector", ROUTING)
def test_each_routing_detector_can_roll_the_run_back_to_its_onset(detector):
    """The same action path as every detector: action rollback stops the run with the onset as the anomaly's."""
    settings = HealthSettings()
    settings = replace(settings, **{detector: replace(getattr(settings, detector), action="rollback")})
    stops = []
    monitor = HealthMonitor(settings, CONFIG, request_stop=stops.append)
    for step in range(10, 60, 10):
        monitor.observe(log(step, BALANCED))
    for step in range(60, 130, 10):
        monitor.observe(log(step, [0.0, 1280.0, 1000.0, 280.0]))  # expert 1 takes every token, expert 0 none
    assert len(stops) == 1 and stops[0].detector == detector and stops[0].anomaly is not None
    assert stops[0].anomaly.onset_step == 51


def test_the_routing_settings_are_checked():
    settings, findings = build(MonitorSettings, {"health": {"moe_collapse": {"fraction": 1.5, "top_k": 0},
                                                            "moe_imbalance_growth": {"ratio": 1.0}}},
                               "monitor_config")
    assert findings == []
    out = range_findings(settings.health, "monitor_config.health", "MS801")
    assert sorted(f.path for f in out) == ["monitor_config.health.moe_collapse.fraction",
                                           "monitor_config.health.moe_collapse.top_k",
                                           "monitor_config.health.moe_imbalance_growth.ratio"]
