"""A long run read as a stream: replay finds the alerts a full read finds, the report keeps every injected anomaly
visible through downsampling, and the streamed reader shows one rank and the last record of a step (#47)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from helpers_long_run import EXPLOSION_STEPS, anomaly_steps, long_run

from msmon.health.monitor import HealthMonitor
from msmon.health.replay import replay, run_dir_inputs
from msmon.health.replay_share import SECOND_SHARE, Raised, Share, replay_split
from msmon.records import check_record
from msmon.view.report import build_report
from msmon.view.series import load_run

RECORDS = 20_000


def full_read_alerts(run_dir: Path) -> list[dict]:
    """The alerts of the run as a whole-file read finds them: every line parsed by ``json.loads`` and held, then
    observed (none of the streamed reader's code)."""
    inputs = run_dir_inputs(run_dir)
    monitor = HealthMonitor(inputs.settings, inputs.config)
    monitor.set_total_steps(inputs.total)
    held = [json.loads(line) for line in inputs.metrics.read_text().splitlines()]
    for data in held:
        monitor.observe(check_record(data, str(inputs.metrics)))
    return [alert.to_dict() for alert in sorted(monitor.alerts, key=lambda alert: alert.step)]


def test_streamed_replay_of_a_long_run_finds_the_alerts_of_the_full_read(tmp_path: Path) -> None:
    run_dir = long_run(tmp_path / "p" / "long", RECORDS)
    streamed = replay(run_dir)
    assert streamed.records == RECORDS
    alerts = [alert.to_dict() for alert in streamed.alerts]
    assert alerts == full_read_alerts(run_dir)
    at = anomaly_steps(RECORDS)
    found = {alert["detector"]: alert["step"] for alert in alerts}
    assert set(found) == {"loss_spike", "nonfinite", "grad_explosion", "throughput_drop"}, alerts
    assert found["nonfinite"] == at["nan_loss"]
    assert at["loss_spike"] <= found["loss_spike"] < at["loss_spike"] + 10
    assert at["grad_explosion"] <= found["grad_explosion"] < at["grad_explosion"] + EXPLOSION_STEPS


def test_a_replay_split_over_two_processes_finds_the_alerts_of_the_full_read(tmp_path: Path, monkeypatch) -> None:
    run_dir = long_run(tmp_path / "p" / "long", RECORDS)
    monkeypatch.setattr("msmon.util.split_read.MIN_PART_BYTES", 1)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    shares: list[frozenset[str]] = []

    def split(monitor: HealthMonitor, share: Share) -> tuple[int, Raised]:
        shares.append(share.names)
        return replay_split(monitor, share)

    monkeypatch.setattr("msmon.health.replay.replay_split", split)
    parted = replay(run_dir)
    assert shares == [SECOND_SHARE] and parted.records == RECORDS
    alerts = [alert.to_dict() for alert in parted.alerts]
    # as alerts.jsonl holds them: a NaN from the other process is another float object (NaN != NaN)
    assert json.dumps(alerts) == json.dumps(full_read_alerts(run_dir))
    assert {alert["detector"] for alert in alerts} == {"loss_spike", "nonfinite", "grad_explosion", "throughput_drop"}


def test_the_report_of_a_long_run_keeps_every_anomaly_visible(tmp_path: Path) -> None:
    run_dir = long_run(tmp_path / "p" / "long", RECORDS)
    at = anomaly_steps(RECORDS)
    with (run_dir / "alerts.jsonl").open("w") as handle:
        for alert in replay(run_dir).alerts:
            handle.write(json.dumps(alert.to_dict(), allow_nan=True) + "\n")
    run = load_run(run_dir)
    html = build_report(run)
    assert f"{RECORDS} logged steps drawn as at most" in html and "spikes stay visible" in html
    loss = run.sketch("loss").draw()
    assert len(loss.x) <= 4000 and loss.total == RECORDS
    assert loss.nonfinite == [(at["nan_loss"], "nan")]
    assert loss.x[loss.y.index(max(loss.y))] in range(at["loss_spike"], at["loss_spike"] + 30)
    grad = run.sketch("grad_norm").draw()
    assert max(grad.y) > 1.03 ** (EXPLOSION_STEPS - 2)  # the explosion's peak survives the buckets
    throughput = run.sketch("throughput").draw()
    assert min(throughput.y) < 1000 < max(throughput.y)
    assert run.records.logged == RECORDS and (run.records.first_step, run.records.last_step) == (1, RECORDS)
    assert len(run.alerts) == 4 and '"detector":"throughput_drop"' in html


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_resumed_run_shows_the_last_record_of_each_step_in_step_order(tmp_path: Path) -> None:
    """Attempt 1 logs steps 1-10, attempt 2 resumes from step 5 and logs 6-8 only: 9 and 10 stay attempt 1's."""
    run_dir = tmp_path / "p" / "resumed"
    run_dir.mkdir(parents=True)
    first = [{"step": s, "time": float(s), "loss": 1.0} for s in range(1, 11)]
    second = [{"step": s, "time": 100.0 + s, "loss": 2.0} for s in range(6, 9)]
    write(run_dir / "metrics.jsonl", first + second)
    drawn = load_run(run_dir).sketch("loss").draw()
    assert drawn.x == list(range(1, 11))
    assert drawn.y == [1.0] * 5 + [2.0] * 3 + [1.0] * 2


def test_several_ranks_in_one_file_show_the_rank_with_the_loss(tmp_path: Path) -> None:
    run_dir = tmp_path / "p" / "ranks"
    run_dir.mkdir(parents=True)
    rows = []
    for step in range(1, 6001):  # more than one chunk of the reader, more values than drawn
        rows.append({"step": step, "rank": 0, "grad_norm": 1.0})
        rows.append({"step": step, "rank": 1, "loss": 3.0 if step != 4321 else math.inf, "grad_norm": 2.0})
    write(run_dir / "metrics.jsonl", rows)
    run = load_run(run_dir)
    assert "records of ranks [0, 1] found; showing rank 1" in run.notes
    assert run.records.logged == 6000
    assert set(run.sketch("grad_norm").draw().y) == {2.0}
    assert run.sketch("loss").draw().nonfinite == [(4321, "inf")]


def test_a_file_read_in_parts_by_several_processes_draws_what_one_reader_draws(tmp_path: Path, monkeypatch) -> None:
    run_dir = long_run(tmp_path / "p" / "long", RECORDS)
    whole = load_run(run_dir)
    monkeypatch.setattr("msmon.util.split_read.MIN_PART_BYTES", 1)
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    parted = load_run(run_dir)
    assert parted.records.logged == whole.records.logged == RECORDS
    assert list(parted.records.columns) == list(whole.records.columns)
    for metric in whole.records.columns:
        one, split = whole.sketch(metric).draw(), parted.sketch(metric).draw()
        assert (split.total, split.nonfinite) == (one.total, one.nonfinite), metric
        assert (min(split.y), max(split.y)) == (min(one.y), max(one.y)), metric
        assert (split.x[0], split.x[-1]) == (one.x[0], one.x[-1]) and len(split.x) <= 4000, metric
    assert parted.sketch("throughput").kept().tolist() == whole.sketch("throughput").kept().tolist()


def test_a_resumed_runs_detectors_start_from_the_last_records_before_its_step(tmp_path: Path) -> None:
    from msmon.health.replay import history

    run_dir = long_run(tmp_path / "p" / "long", RECORDS)
    with (run_dir / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": "x"}\n{"step": 7, "loss": 1')  # a bad record and a half-written line: skipped
    kept = history(run_dir, 15_000, limit=100)
    assert [record["step"] for record in kept] == list(range(14_901, 15_001))
    assert history(tmp_path / "missing", 10) == []


def test_the_median_sample_is_every_value_then_an_even_sample_however_it_is_fed() -> None:
    import numpy as np

    from msmon.view.sketch import KEEP_MAX, EvenSample

    small = EvenSample()
    small.add(np.arange(1000.0))
    assert small.values().tolist() == list(range(1000))
    whole, pieces, first, second = EvenSample(), EvenSample(), EvenSample(), EvenSample()
    values = np.arange(300_000.0)
    whole.add(values)
    for start in range(0, len(values), 7777):
        pieces.add(values[start:start + 7777])
    first.add(values[:170_001])
    second.add(values[170_001:])
    first.extend(second)
    assert whole.stride == 4 and len(whole.values()) <= KEEP_MAX
    assert whole.values().tolist() == values[::4].tolist() == pieces.values().tolist() == first.values().tolist()
