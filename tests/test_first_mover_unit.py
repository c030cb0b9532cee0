"""The layer that moved first (msmon.health.first_mover) on records of a simulated AdamW training: four groups of
weights, one group's gradients made to grow smoothly, to burst for three steps between two logs, or to jump and
stay; every 10th step logged with the records msmon writes (grad_norm/<group>, weight_norm/<group>,
update_ratio/<group> of the logging step's own update, the loss, the global grad norm).

Measured here (docs/health.md): a smooth growth shows in the group's grad norm first (AdamW's m / sqrt(v) takes the
growth in partly: the update ratio follows a log later); a burst between two logs shows in the update ratio only
(v keeps it for hundreds of steps, the grad norm at the logging steps never sees it); a jump that stays shows in
both at the first log after it, the grad norm further beyond its band."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from msmon.config.health import HealthSettings
from msmon.health.first_mover import Departure, FirstMovers, departure
from msmon.health.monitor import HealthMonitor
from msmon.health.replay import replay

GROUPS = ("embedding", "layers.0", "layers.1", "head")
FAULTY = "layers.1"
INTERVAL = 10


def adamw_records(scale: Callable[[int], float], steps: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """The logged records of an AdamW training (lr 1e-3, betas 0.9 / 0.999, weight decay 0.01) of four groups of 512
    weights pulled towards targets, with noisy gradients; ``scale(step)`` multiplies the faulty group's gradients."""
    rng = np.random.default_rng(seed)
    weights = {g: rng.normal(0, 0.05, 512) for g in GROUPS}
    targets = {g: w + rng.normal(0, 0.01, 512) for g, w in weights.items()}
    first = {g: np.zeros(512) for g in GROUPS}
    second = {g: np.zeros(512) for g in GROUPS}
    records = []
    for step in range(1, steps + 1):
        grads = {g: (rng.normal(0, 0.02, 512) + 0.2 * (weights[g] - targets[g])) * (scale(step) if g == FAULTY else 1)
                 for g in GROUPS}
        before = {g: w.copy() for g, w in weights.items()}
        for g in GROUPS:
            first[g] = 0.9 * first[g] + 0.1 * grads[g]
            second[g] = 0.999 * second[g] + 0.001 * grads[g] ** 2
            update = (first[g] / (1 - 0.9 ** step)) / (np.sqrt(second[g] / (1 - 0.999 ** step)) + 1e-8)
            weights[g] = weights[g] - 1e-3 * (update + 0.01 * weights[g])
        if step % INTERVAL:
            continue
        record: dict[str, Any] = {"step": step, "time": 1.8e9 + step, "loss": 3.0 + 0.05 * rng.normal(),
                                  "learning_rate": 1e-3,
                                  "grad_norm": float(math.sqrt(sum(float((v ** 2).sum()) for v in grads.values())))}
        for g in GROUPS:
            norm = float(np.linalg.norm(weights[g]))
            record[f"grad_norm/{g}"] = float(np.linalg.norm(grads[g]))
            record[f"weight_norm/{g}"] = norm
            record[f"update_ratio/{g}"] = float(np.linalg.norm(weights[g] - before[g])) / norm
        records.append(record)
    return records


def smooth(step: int) -> float:
    return 1.04 ** max(0, step - 100)


def burst(step: int) -> float:
    return 30.0 if 95 <= step <= 97 else 1.0


def jump(step: int) -> float:
    return 10.0 if step >= 100 else 1.0


def departures(records: list[dict[str, Any]]) -> dict[str, Departure]:
    steps = [r["step"] for r in records]
    found = {key: departure(steps, [r.get(key) for r in records], upward=key in ("loss", "grad_norm"))
             for key in records[-1] if key not in ("step", "time", "learning_rate")}
    return {key: d for key, d in found.items() if d is not None}


def first_of(records: list[dict[str, Any]]) -> Any:
    movers = FirstMovers()
    for record in records:
        movers.observe(record)
    return movers.first()


def test_a_smooth_growth_is_found_by_the_groups_grad_norm_before_the_global_norm():
    found = departures(adamw_records(smooth))
    assert found[f"grad_norm/{FAULTY}"].step == 110  # the first log after the growth began
    assert found[f"update_ratio/{FAULTY}"].step == 120  # AdamW normalises the growth partly: a log later
    assert found["grad_norm"].step == 120 and "loss" not in found
    assert not {key for key in found if key.endswith(("embedding", "layers.0", "head"))}  # the others stay
    mover = first_of(adamw_records(smooth))
    assert (mover.group, mover.signal, mover.step) == (FAULTY, "grad_norm", 110)
    assert (mover.shown_by, mover.shown_step, mover.lead_steps) == ("the global grad norm", 120, 10)


def test_a_burst_between_two_logs_is_found_by_the_update_ratio_only():
    records = adamw_records(burst)
    found = departures(records)
    assert set(found) == {f"update_ratio/{FAULTY}"}  # the grad norms at the logging steps never saw it
    assert found[f"update_ratio/{FAULTY}"].step == 120  # v holds the burst: the updates stay small
    before, after = records[8][f"update_ratio/{FAULTY}"], records[15][f"update_ratio/{FAULTY}"]
    assert after < before / 2
    mover = first_of(records)
    assert (mover.group, mover.signal, mover.step, mover.shown_by) == (FAULTY, "update_ratio", 120, "the alert")
    assert mover.lead_steps == 80


def test_a_jump_that_stays_shows_in_the_grad_norm_and_the_update_ratio_at_the_same_log():
    found = departures(adamw_records(jump))
    assert found[f"grad_norm/{FAULTY}"].step == found[f"update_ratio/{FAULTY}"].step == 100
    assert found[f"grad_norm/{FAULTY}"].strength > found[f"update_ratio/{FAULTY}"].strength
    mover = first_of(adamw_records(jump))
    assert (mover.group, mover.signal, mover.step, mover.lead_steps) == (FAULTY, "grad_norm", 100, 0)
    assert mover.text() == f"{FAULTY}'s grad_norm left its baseline first (step 100; the global grad norm showed it " \
                           "at step 100)"


def test_a_move_that_came_back_before_the_alert_or_a_step_the_baseline_took_in_is_no_departure():
    steps = list(range(10, 610, 10))
    back = [1.0] * 20 + [3.0, 3.0] + [1.0] * 38
    assert departure(steps, back) is None
    stayed = [1.0] * 20 + [3.0] * 40  # a level change that stays: departed since it came
    assert departure(steps, stayed).step == 210  # type: ignore[union-attr]
    recent = [1.0] * 50 + [3.0] * 10
    assert departure(steps, recent) == Departure(510, departure(steps, recent).strength)  # type: ignore[union-attr]
    assert departure(steps, [1.0] * 59 + [math.nan]).step == 600  # type: ignore[union-attr]
    assert departure(steps[:4], [1.0, 1.0, 1.0, 9.0]) is None  # too short a baseline
    assert departure(steps, [3.0] * 50 + [1.0] * 10, upward=True) is None  # the loss falling is no alarm


def test_the_alert_live_and_replayed_names_the_group_and_the_signal(tmp_path: Path):
    records = adamw_records(smooth, steps=300)
    monitor = HealthMonitor(HealthSettings())
    for record in records:
        monitor.observe(dict(record))
    growth = next(a for a in monitor.alerts if a.detector == "grad_explosion")
    mover = growth.values["first_mover"]
    assert (mover["group"], mover["signal"], mover["step"]) == (FAULTY, "grad_norm", 110)
    assert mover["lead_steps"] > 0 and mover["shown_by"] == "the global grad norm"
    assert f"{FAULTY}'s grad_norm left its baseline first (step 110, " in growth.message
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    replayed = next(a for a in replay(path).alerts if a.detector == "grad_explosion")
    assert (replayed.step, replayed.message, replayed.values) == (growth.step, growth.message, growth.values)


def test_a_replay_split_over_two_processes_names_the_group_as_one_process_does(tmp_path: Path, monkeypatch):
    """The second process of a long replay keeps the groups and first movers (its share holds the explained
    detectors); the first does not need them."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in adamw_records(smooth, steps=300)))
    whole = [alert.to_dict() for alert in replay(path).alerts]
    monkeypatch.setattr("msmon.util.split_read.MIN_PART_BYTES", 1)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    parted = [alert.to_dict() for alert in replay(path).alerts]
    assert parted == whole
    assert any(f"{FAULTY}'s grad_norm left its baseline first" in alert["message"] for alert in parted)


def test_no_group_series_no_first_mover():
    monitor = HealthMonitor(HealthSettings())
    for record in adamw_records(smooth, steps=300):
        monitor.observe({k: v for k, v in record.items() if "/" not in k})
    growth = next(a for a in monitor.alerts if a.detector == "grad_explosion")
    assert "first_mover" not in growth.values and "left its baseline" not in growth.message
