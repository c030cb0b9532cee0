"""What a step costs, rank by rank (logic): the step clock, the StepCost line, the memory-growth and slow-rank
detectors, their alignment across ranks, replay of recorded costs, the ending's time line and msmon status."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from msmon.config.health import HealthSettings, MemoryGrowthSettings, SlowRankSettings
from msmon.engine.step_costs import StepClock
from msmon.health.detectors.memory_growth import MemoryGrowthDetector, fit_growth
from msmon.health.detectors.slow_rank import SlowRankDetector
from msmon.health.rank_costs import RankCosts, RankReport
from msmon.health.replay import attempts_of, replay
from msmon.step_cost import StepCost, read_costs, time_split
from msmon.view.ending import time_lines


def cost(step: int, inside: float = 30.0, outside: float = 2.0, host: float | None = 800.0,
         device: float | None = None, steps: int = 5, time: float | None = None) -> StepCost:
    return StepCost(step, 1000.0 + step * 0.05 if time is None else time, steps, inside, outside, host, device, None)


# -- the step clock ----------------------------------------------------------------------------------
def test_the_step_clock_splits_time_at_the_callback_and_averages_per_step() -> None:
    clock = StepClock()
    clock.train_begin(0.0)
    for start in (1.0, 11.0):  # data 1 s, step 9 s; data 1 s, step 9 s
        clock.begin(start)
        clock.end(start + 9.0)
    assert clock.take(2) == pytest.approx((9000.0, 1000.0))
    assert clock.take(1) == (0.0, 0.0)  # emptied by the take


def test_the_step_ends_where_the_first_step_end_callback_ends_and_its_behaviour_is_kept() -> None:
    from msmon.engine.step_costs import watch_step_end

    calls = []

    class First:
        def on_train_step_end(self, run_context: object) -> str:
            calls.append(run_context)
            return "kept"

    class Slotted:
        __slots__ = ("x",)

        def on_train_step_end(self, run_context: object) -> None: ...

    clock, first, own = StepClock(), First(), object()
    assert watch_step_end([first, own], clock, own) and not watch_step_end([first, own], clock, own)  # once
    assert not watch_step_end([own, first], clock, own) and not watch_step_end([Slotted(), own], clock, own)
    begun = time.monotonic()
    clock.train_begin(begun - 1.0)
    clock.begin(begun)
    assert first.on_train_step_end("context") == "kept" and calls == ["context"]
    clock.end(begun + 100.0)  # msmon's step end, long after: the other callbacks' step-end work
    inside, outside = clock.take(1)
    assert outside == pytest.approx(1000.0) and 0 <= inside < 50_000  # the step ended at the first callback's end


def test_a_step_cost_survives_its_json_line_and_a_damaged_one_is_none() -> None:
    original = cost(10, host=812.25, device=100.0)
    assert StepCost.from_json(json.loads(json.dumps(original.to_json()))) == original
    assert original.step_ms == pytest.approx(32.0)
    for damaged in ({"step": "10"}, [], {"step": 10, "steps": 5, "time": 1.0, "inside_ms": None, "outside_ms": 1}):
        assert StepCost.from_json(damaged) is None


# -- memory growth -----------------------------------------------------------------------------------
def test_a_straight_line_is_fitted_exactly() -> None:
    growth = fit_growth([(s, 10.0 + s * 0.5, 100.0 + 2.0 * s) for s in range(0, 100, 5)])
    assert growth is not None
    assert growth.per_step == pytest.approx(2.0)
    assert growth.per_s == pytest.approx(4.0)
    assert growth.fit == pytest.approx(1.0)
    assert fit_growth([(s, float(s), 5.0) for s in range(10)]) is None  # flat: nothing to fit


def growing(rank: int, per_step: float, steps: range, noise: float = 0.0) -> list[StepCost]:
    return [cost(s, host=1000.0 + per_step * s + (noise if s % 10 else -noise)) for s in steps]


def test_steady_host_growth_names_the_rank_its_rate_and_the_time_left() -> None:
    detector = MemoryGrowthDetector(MemoryGrowthSettings(), rank=3, host="node-b")
    signals = [detector.observe(c, host_left_mb=6000.0) for c in growing(3, 3.0, range(5, 400, 5), noise=2.0)]
    fired = [s for s in signals if s is not None]
    assert len(fired) == 1  # one alert per episode
    values = fired[0].values
    assert values["rank"] == 3 and values["kind"] == "host"
    assert values["mb_per_step"] == pytest.approx(3.0, rel=0.05)
    assert values["seconds_left"] == pytest.approx(6000.0 / values["mb_per_s"])
    assert "rank 3 on node-b: host memory grows steadily" in fired[0].message
    assert "the host's memory limit is reached in about" in fired[0].message


@pytest.mark.parametrize("series", [
    [cost(s, host=1000.0 + (400.0 if s >= 150 else 0.0)) for s in range(5, 400, 5)],  # one jump: not steady
    [cost(s, host=1000.0 + 0.5 * s) for s in range(5, 400, 5)],  # steady but 50 MiB per 100 steps: below the floor
    [cost(s, host=1000.0 + 3.0 * s * (1 if s < 25 else 0)) for s in range(5, 400, 5)],  # warm-up, then flat
])
def test_a_jump_slow_growth_or_warm_up_is_no_memory_alert(series: list[StepCost]) -> None:
    detector = MemoryGrowthDetector(MemoryGrowthSettings(), rank=0)
    assert [s for s in map(detector.observe, series) if s is not None] == []


def test_device_memory_is_judged_against_the_configured_capacity() -> None:
    detector = MemoryGrowthDetector(MemoryGrowthSettings(device_capacity_gb=64.0), rank=0)
    series = [cost(s, host=900.0, device=30000.0 + 4.0 * s) for s in range(5, 300, 5)]
    fired = [s for s in map(detector.observe, series) if s is not None]
    assert [s.values["kind"] for s in fired] == ["device"]
    assert fired[0].values["left_mb"] == pytest.approx(64 * 1024 - series[len(fired) and -1].device_mb, abs=2000)
    assert "the device's capacity is reached" in fired[0].message


def test_a_restart_starts_the_memory_fit_again() -> None:
    detector = MemoryGrowthDetector(MemoryGrowthSettings(), rank=0)
    for c in growing(0, 3.0, range(5, 100, 5)):
        assert detector.observe(c) is None
    detector.resumed()  # a new process: the points before do not count
    assert [s for s in map(detector.observe, growing(0, 3.0, range(100, 190, 5))) if s] == []


# -- the slow rank -----------------------------------------------------------------------------------
def two_ranks(step: int, slow_outside: float, steps: int = 5) -> dict[int, StepCost]:
    return {0: cost(step, inside=30.0 + slow_outside, outside=2.0, steps=steps),  # waits for rank 1 in the step
            1: cost(step, inside=30.0, outside=2.0 + slow_outside, steps=steps)}


def test_a_rank_slow_outside_the_step_is_named_after_the_window() -> None:
    detector = SlowRankDetector(SlowRankSettings())
    named = {}
    for step in range(5, 200, 5):
        signal = detector.observe(step, two_ranks(step, 40.0 if step >= 40 else 0.0), {1: "node-b"})
        if signal is not None:
            named[step] = signal
    assert list(named) == [85]  # slow from the interval ending at step 40 (steps 36-40), named 50 steps on
    signal = named[85]
    assert signal.values["rank"] == 1 and signal.values["figure"] == "outside_ms"
    assert signal.values["ratio"] == pytest.approx(21.0)
    assert "rank 1 on node-b: 21.0x the other ranks' time outside the step" in signal.message
    assert "for 50 steps since step 35" in signal.message


def test_balanced_ranks_noise_and_the_compiling_start_raise_nothing() -> None:
    detector = SlowRankDetector(SlowRankSettings())
    for step in range(5, 400, 5):
        wobble = 3.0 if step % 10 else 0.0  # a few ms of noise: under min_excess_ms
        costs = {0: cost(step, outside=2.0 + wobble), 1: cost(step, outside=2.0), 2: cost(step, outside=4.0)}
        if step <= 10:  # the first steps compile: a rank far slower is not judged
            costs[1] = cost(step, outside=900.0)
        assert detector.observe(step, costs, {}) is None


def test_a_slow_streak_that_breaks_starts_again() -> None:
    detector = SlowRankDetector(SlowRankSettings())
    fired = [detector.observe(step, two_ranks(step, 0.0 if step % 40 == 0 else 40.0), {})
             for step in range(5, 400, 5)]
    assert not any(fired)  # a fast interval every 40 steps: never slow for 50 steps in a row


def test_unsynchronised_ranks_are_judged_by_their_step_time() -> None:
    detector = SlowRankDetector(SlowRankSettings())
    fired = []
    for step in range(5, 200, 5):
        costs = {r: cost(step, inside=90.0 if r == 2 else 30.0) for r in range(4)}  # rank 2's device is slow
        fired.append(detector.observe(step, costs, {}))
    signal = next(s for s in fired if s is not None)
    assert signal.values["rank"] == 2 and signal.values["figure"] == "step_ms"


@pytest.mark.parametrize(("machines", "per_machine"), [(2, 4), (128, 8)])
def test_a_slow_machine_is_named_once_with_its_ranks(machines: int, per_machine: int) -> None:
    """Every rank of one machine slow outside the step (a slow disk): the machine is named, with its ranks, once;
    at 1,024 ranks too."""
    detector = SlowRankDetector(SlowRankSettings())
    hosts = {rank: f"node-{rank // per_machine}" for rank in range(machines * per_machine)}
    slow_machine = machines - 1
    fired = []
    for step in range(5, 200, 5):
        costs = {rank: cost(step, outside=42.0 if step >= 40 and rank // per_machine == slow_machine else 2.0)
                 for rank in hosts}
        fired += [signal for signal in [detector.observe(step, costs, hosts)] if signal is not None]
    assert len(fired) == 1
    values = fired[0].values
    first = slow_machine * per_machine
    assert values["machine"] == f"node-{slow_machine}" and values["ranks"] == list(range(first, first + per_machine))
    assert fired[0].message.startswith(f"machine node-{slow_machine} (ranks {first}-{first + per_machine - 1}, "
                                       f"all {per_machine} of its ranks): 21.0x the other machines' time outside")


def test_one_slow_rank_on_a_machine_is_the_rank_not_the_machine() -> None:
    detector = SlowRankDetector(SlowRankSettings())
    hosts = {rank: f"node-{rank // 4}" for rank in range(8)}
    fired = [detector.observe(step, {rank: cost(step, outside=42.0 if rank == 5 else 2.0) for rank in hosts}, hosts)
             for step in range(5, 200, 5)]
    named = [signal for signal in fired if signal is not None]
    assert len(named) == 1 and named[0].values["rank"] == 5 and "machine" not in named[0].values
    assert named[0].message.startswith("rank 5 on node-1:")


# -- every rank together -----------------------------------------------------------------------------
def test_rank_costs_judge_a_step_once_every_rank_reported_it() -> None:
    judge = RankCosts(HealthSettings())
    alerts = []
    for step in range(5, 200, 5):
        costs = two_ranks(step, 40.0)
        # rank 1's heartbeat lags one poll behind rank 0's
        alerts += judge.observe({0: RankReport((costs[0],), "a")})
        alerts += judge.observe({0: RankReport((costs[0],), "a"), 1: RankReport((costs[1],), "b")})
    assert [(a.detector, a.signal.values["rank"]) for a in alerts] == [("slow_rank", 1)]


def test_rank_costs_with_both_detectors_off_raise_nothing() -> None:
    settings = HealthSettings(slow_rank=SlowRankSettings(enabled=False),
                              memory_growth=MemoryGrowthSettings(enabled=False))
    judge = RankCosts(settings)
    for step in range(5, 400, 5):
        assert judge.observe({r: RankReport((c,)) for r, c in two_ranks(step, 40.0).items()}) == []


# -- recorded costs: replay, the ending --------------------------------------------------------------
def write_costs(run_dir: Path, rank: int, costs: list[StepCost]) -> None:
    (run_dir / "heartbeats").mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(c.to_json()) + "\n" for c in costs)
    (run_dir / "heartbeats" / f"rank_{rank}.jsonl").write_text(lines + '{"step": 9', encoding="utf-8")


def recorded_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    records = [{"step": s, "time": 1000.0 + s, "loss": 2.0 + 1.0 / s} for s in range(5, 200, 5)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    for rank in (0, 1):
        write_costs(run_dir, rank, [two_ranks(step, 40.0)[rank] for step in range(5, 200, 5)])
    return run_dir


def test_replay_finds_the_slow_rank_in_a_recorded_run(tmp_path: Path) -> None:
    alerts, count, _ = replay(recorded_run(tmp_path))
    assert count == 39
    assert [(a.detector, a.values["rank"], a.step) for a in alerts] == [("slow_rank", 1, 60)]


def test_recorded_costs_are_cut_into_attempts_where_the_step_goes_back() -> None:
    costs = [cost(s) for s in (5, 10, 15, 10, 15, 20)]
    assert [[c.step for c in part] for part in attempts_of(costs)] == [[5, 10, 15], [10, 15, 20]]


def test_the_ending_gives_each_ranks_time_inside_and_outside_the_step(tmp_path: Path) -> None:
    run_dir = recorded_run(tmp_path)
    assert sorted(read_costs(run_dir)) == [0, 1]  # the half-written last line is skipped
    split = time_split(1, read_costs(run_dir)[1])
    assert split is not None and (split.inside_ms, split.outside_ms) == (30.0, 42.0)
    assert time_lines(run_dir) == ["  step time: rank 0 70 ms in the step + 2 ms outside, host 800 MiB; "
                                   "rank 1 30 ms in the step + 42 ms outside, host 800 MiB"]
    for rank in range(2, 6):
        write_costs(run_dir, rank, [cost(s) for s in range(5, 50, 5)])
    many = time_lines(run_dir)
    assert len(many) == 1 and "(6 ranks)" in many[0] and "most outside the step: rank 1 30 ms" in many[0]
    assert time_lines(tmp_path) == []  # no heartbeats: no line
    assert math.isfinite(split.inside_ms)


# -- memory reads ------------------------------------------------------------------------------------
def test_on_cpu_only_host_memory_is_read() -> None:
    from msmon.engine.step_costs import MemoryReads

    host, device, peak = MemoryReads().read()
    assert host is not None and host > 10 and device is None and peak is None


def test_a_device_that_reports_memory_is_read_in_mib_and_a_refusing_runtime_stops_the_reads(monkeypatch) -> None:
    import mindspore

    from msmon.engine.step_costs import MemoryReads

    calls = []

    def allocated() -> int:
        calls.append("allocated")
        if len(calls) > 1:
            raise RuntimeError("the runtime is gone")
        return 3 * 2**30

    monkeypatch.setattr(mindspore, "get_context", lambda key: "Ascend")
    monkeypatch.setattr(mindspore.runtime, "memory_allocated", allocated)
    monkeypatch.setattr(mindspore.runtime, "max_memory_allocated", lambda: 5 * 2**30)
    reads = MemoryReads()
    assert reads.read()[1:] == (3072.0, 5120.0)
    assert reads.read()[1:] == (None, None)  # refused once: not asked again
    assert reads.read()[1:] == (None, None) and len(calls) == 2
