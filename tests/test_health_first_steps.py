"""The from-step-1 detectors judged against physics, not the run's past: grad_norm_bound (a grad norm absurd against
the initialised model's) and flat_start (a loss that never leaves the chance level). chance_level's tests are in
test_health_detectors.py, the real lr-50 runs in test_health_e2e.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from msmon.config.health import FlatStartSettings, GradNormBoundSettings, HealthSettings
from msmon.health.monitor import HealthMonitor

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "bench" / "traces"
QUICKSTART = OmegaConf.to_container(OmegaConf.load(ROOT / "msmon" / "config" / "quickstarts" / "quickstart.yaml"))
FIRST_STEP_DETECTORS = ("chance_level", "grad_norm_bound", "flat_start")


def alerts(records: list[dict], config=QUICKSTART, total: int | None = None, **settings) -> list:
    monitor = HealthMonitor(HealthSettings(**settings), config)
    monitor.set_total_steps(total or records[-1]["step"])
    for record in records:
        monitor.observe({"time": 1000.0 * record["step"], **record})  # beyond the alerts' rate limit
    return [a for a in monitor.alerts if a.detector in FIRST_STEP_DETECTORS]


def trace(name: str) -> list[dict]:
    return [json.loads(line) for line in (TRACES / name).read_text().splitlines()]


@pytest.mark.parametrize("every", [1, 5, 10, 20])
def test_the_first_step_detectors_are_silent_on_every_clean_recorded_trace(every):
    """Real quickstart traces at learning rates 1e-3 to 2e-2 (the largest first rises 3% above ln(1000)), read at
    four log intervals: no from-step-1 alert."""
    for path in sorted(TRACES.glob("clean_*.jsonl")):
        records = [r for r in trace(path.name) if r["step"] % every == 0]
        assert alerts(records) == [], path.name


def test_a_grad_norm_absurd_against_the_initialised_model_alerts_from_the_first_logs():
    """The real lr-1e4 trace: grad_norm 1.0 at step 1, 1.6e8 at step 4; at log_interval 10 the first log carries
    step 1's value as grad_norm_initial (the callback reads it from the held steps)."""
    dead = trace("dead_lr10000_seed0.jsonl")
    found = [a for a in alerts(dead) if a.detector == "grad_norm_bound"]
    assert [(a.step, a.severity) for a in found][:1] == [(4, "critical")]
    assert "above 100 x its value at step 1" in found[0].message and found[0].values["grad_norm_initial"] == (
        pytest.approx(dead[0]["grad_norm"]))
    sparse = [{"step": 10, "grad_norm": 3315.0, "grad_norm_initial": 1.0}, {"step": 20, "grad_norm": 1.5,
              "grad_norm_max": 101820.0}, {"step": 30, "grad_norm": 800.0}]  # the lr-50 run's kind of values
    assert [a.step for a in alerts(sparse) if a.detector == "grad_norm_bound"] == [20]  # a step between logs counts
    without = [r for r in dead if r["step"] % 10 == 0]  # older records: the first logged value is the base
    assert [a for a in alerts(without) if a.detector == "grad_norm_bound"] == []  # at most as strict, never more


def test_the_grad_norm_bound_rearms_and_ignores_non_finite_values():
    records = [{"step": s, "grad_norm": g} for s, g in enumerate([1.0, 150.0, 2.0, 150.0, 150.0, 1.0, math.nan,
                                                                  math.inf, 500.0, 500.0], start=1)]
    found = alerts(records, config=None)
    assert [a.step for a in found] == [5, 10]  # 2 consecutive logs each time; one log above is noise
    assert alerts(records, config=None, grad_norm_bound=GradNormBoundSettings(factor=1000.0)) == []


def flat(level: float, steps: int = 200, noise: float = 0.01) -> list[dict]:
    """A loss that moves with the batches (+-noise) around ``level`` and never falls: a learning rate of 0."""
    return [{"step": s, "loss": level + noise * math.sin(1.7 * s)} for s in range(1, steps + 1)]


def test_a_loss_that_never_leaves_the_chance_level_alerts_after_the_warm_up():
    """The quickstart: warm-up 5% of 200 steps = 10; the judgement at step 10 + 100."""
    found = alerts(flat(math.log(1000)))
    assert [(a.detector, a.step, a.severity) for a in found] == [("flat_start", 110, "critical")]
    assert "has not left the chance level ln(1000) = 6.908" in found[0].message
    sparse = [r for r in flat(math.log(1000)) if r["step"] % 10 == 0]
    assert [a.step for a in alerts(sparse)] == [110]
    assert [a.step for a in alerts(flat(math.log(1000)), flat_start=FlatStartSettings(steps=20))] == [30]


def test_flat_start_judges_only_a_run_trained_from_scratch_that_never_moved():
    assert alerts(flat(2.0)) == []  # a fine-tuning run starts far below the chance level: not judged
    assert alerts(flat(math.log(1000)), config=None) == []  # no vocabulary size
    moved_up = flat(math.log(1000))
    moved_up[20:30] = [{**r, "loss": 7.2} for r in moved_up[20:30]]  # up 4%, then back: it moved
    assert alerts(moved_up) == []
    assert alerts(flat(math.log(1000), steps=100)) == []  # the run ended before the judgement
