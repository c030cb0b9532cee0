"""What a step costs, rank by rank, on the real Trainer: on two msrun ranks, one slow in its host time and the other
leaking host memory, each is named (and only it) with its figures, and the clean canonical runs raise neither alert.
The one training here injects both faults from the start; every other check rides on it or on canonical runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from canonical import registered
from conftest import run_msmon
from helpers_ranks import RankRun
from launch import records

from msmon.probe import ProbeState, read_marks
from msmon.probe.purpose import Purpose, read_purposes

pytestmark = pytest.mark.training

COST_DETECTORS = {"slow_rank", "memory_growth"}


def test_a_rank_slow_in_its_host_time_and_one_leaking_host_memory_are_each_named_with_their_figures(
        tmp_path: Path) -> None:
    """Two data-parallel ranks, rank 1 sleeping 60 ms in a step-end callback (as a slow save would; outside the
    train step, which ends at MindSpore's own step-end callback) and rank 0 keeping 2 MiB a step (a leaking callback):
    one slow_rank alert names rank 1 within 100 steps, one memory_growth alert names rank 0 with a rate within 20% of
    2 MiB a step and the time left to the host's limit, the run completes; the ending, `msmon status` and `msmon
    replay` show the same split. With `slow_rank.action: profile` (#45): only rank 1 profiles its next steps after
    the alert (both ranks took the baseline), and the parent's second alert compares them with rank 1's baseline.
    (The leak's fit starts after the baseline profile: ``skip_steps`` 30.)"""
    steps, leak_mb = 120, 2
    run = RankRun.start(tmp_path, steps=steps, log_interval=5,
                        callbacks=[registered("SlowHostOnRank", rank=1, ms=60),
                                   registered("LeakHostMemory", rank=0, mb=leak_mb)],
                        health={"slow_rank": {"action": "profile"}, "profile": {"baseline_step": 20},
                                "memory_growth": {"window_steps": 60, "min_growth_mb": 60, "skip_steps": 30}},
                        track_metrics=["loss", "grad_norm", "learning_rate", "step_time_ms", "host_memory_mb"])
    assert run.finish() == 0, run.stderr[-3000:]
    slow = [a for a in run.alerts() if a["detector"] == "slow_rank"]
    assert [(a["detector"], a["action"]) for a in slow] == [("slow_rank", "profile")] * 2, slow
    alert, compared = slow
    assert (alert["values"]["rank"], alert["values"]["figure"]) == (1, "outside_ms"), alert
    purposes = {p.purpose: p.request for p in read_purposes(run.run_dir)}
    assert sorted(read_marks(run.run_dir, purposes[Purpose.BASELINE])) == [0, 1]
    marks = read_marks(run.run_dir, purposes[Purpose.ANOMALY])
    assert list(marks) == [1] and marks[1].state is ProbeState.DONE and marks[1].output, marks
    assert [p.name for p in (run.run_dir / marks[1].output).parent.iterdir()] == ["rank_1"]  # that rank only
    assert alert["message"].endswith(f"; profiling the next 5 steps of rank(s) 1 (probe {purposes[Purpose.ANOMALY]})")
    assert compared["message"].startswith(f"slow_rank at step {alert['step']}, profiled: rank 1, steps "
                                          f"{marks[1].first_step}-{marks[1].last_step} against the baseline"), compared
    print(f"measured: {compared['message']}")
    # the ratio is the other rank's host time on a busy 2-core machine too (2.84 seen with the suite beside it):
    # above the detector's 1.5 with room, the 60 ms itself in "ms"
    assert alert["step"] <= 100 and alert["values"]["ms"] >= 55.0 and alert["values"]["ratio"] >= 2.0
    assert f"rank 1 on {run.heartbeat(1)['host']}" in alert["message"]
    print(f"measured: named at step {alert['step']}: {alert['message']}")
    assert "step time: rank 0" in run.stderr and "; rank 1 " in run.stderr  # the ending, rank by rank
    assert "  ranks: 2 ranks on 1 machine: 2 completed\n" in run.stderr  # and its ranks counted
    beats = [run.heartbeat(rank)["costs"][-1] for rank in (0, 1)]
    assert beats[1]["outside_ms"] >= 55.0 > beats[0]["outside_ms"] and beats[0]["inside_ms"] > beats[1]["inside_ms"]

    status = run_msmon("status", str(run.run_dir), "--json")
    assert status.code == 0, status.stderr
    ranks = {row["rank"]: row["cost"] for row in json.loads(status.stdout)["ranks"]}
    assert ranks[1]["outside_ms"] >= 55.0 and ranks[0]["outside_ms"] < 55.0
    table = run_msmon("status", str(run.run_dir))
    assert "outside" in table.stdout and "host MiB" in table.stdout, table.stdout

    replayed = run_msmon("replay", str(run.run_dir), "--json")
    found = [a for a in json.loads(replayed.stdout) if a["detector"] in COST_DETECTORS]
    assert sorted((a["detector"], a["values"]["rank"]) for a in found) == [("memory_growth", 0), ("slow_rank", 1)], \
        replayed.stdout

    leaks = [a for a in run.alerts() if a["detector"] == "memory_growth"]
    assert [(a["values"]["rank"], a["values"]["kind"]) for a in leaks] == [(0, "host")], leaks
    values = leaks[0]["values"]
    assert values["mb_per_step"] == pytest.approx(leak_mb, rel=0.2), values
    assert values["seconds_left"] > 0 and "the host's memory limit is reached in about" in leaks[0]["message"]
    print(f"measured: {values['mb_per_step']:.3f} MiB a step (injected {leak_mb}), fit {values['fit']:.3f}")
    rows = records(run.run_dir)  # the writing rank's (rank 0's) memory and time split, tracked
    assert all({"host_memory_mb", "step_inside_ms", "step_outside_ms"} <= set(row) for row in rows)
    assert "device_memory_mb" not in rows[-1]  # CPU: no device memory, no placeholder
    half = rows[len(rows) // 2]
    grown = rows[-1]["host_memory_mb"] - half["host_memory_mb"]
    assert grown == pytest.approx(leak_mb * (rows[-1]["step"] - half["step"]), rel=0.2)




@pytest.mark.parametrize("name", ["completed_legacy", "completed_mcore", "lr_2e_2", "interrupted_legacy"])
def test_the_clean_canonical_runs_raise_no_memory_or_slow_rank_alert(canonical, name: str) -> None:
    run = canonical(name)
    assert [a for a in run.alerts() if a["detector"] in COST_DETECTORS] == []
    costs = [json.loads(line) for line in (run.run_dir / "heartbeats" / "rank_0.jsonl").read_text().splitlines()]
    assert [c["step"] for c in costs] == [r["step"] for r in run.records()]  # one cost per logged step
    assert all(c["host_mb"] > 0 and c["inside_ms"] > 0 for c in costs)
