"""The rollback's logic without a training: each detector's onset, the data position over several rollbacks, the
checkpoint chosen before the onset, the superseded checkpoints set aside, and the rollback's result crossing the
process boundary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers_checkpoints import checkpoint_tree, iteration_tree

from msmon.anomaly import Anomaly, Rollback, StopRequest, data_position, in_effect, rollbacks_of
from msmon.config.health import GradExplosionSettings, HealthSettings, LossSpikeSettings, RollbackSettings
from msmon.health.detectors.grad_explosion import GradExplosionDetector
from msmon.health.detectors.loss_spike import LossSpikeDetector
from msmon.health.detectors.nonfinite import NonFiniteDetector
from msmon.health.monitor import HealthMonitor
from msmon.runner import rollback
from msmon.runner.protocol import RankResult
from msmon.runner.resume import resume_overrides
from msmon.status import RunStatus


def made(attempt: int, checkpoint: int, skip_to: int, alert: int = 0) -> Rollback:
    return Rollback(attempt, "loss_spike", alert, alert, checkpoint, f"ckpt_{checkpoint}", checkpoint, skip_to,
                    None, 0.0)


def test_the_data_position_follows_the_rollbacks_of_the_surviving_curve() -> None:
    assert data_position([], 120) == 120
    first = made(2, checkpoint=100, skip_to=182)
    assert [data_position([first], s) for s in (99, 100, 101, 130)] == [99, 182, 183, 212]
    later = made(3, checkpoint=150, skip_to=300)  # a second rollback, to a checkpoint of the second attempt
    assert [data_position([first, later], s) for s in (120, 150, 151)] == [202, 300, 301]
    back = made(4, checkpoint=100, skip_to=400)  # back to the first checkpoint again: the second one no longer counts
    assert in_effect([first, later, back]) == [back]
    assert data_position([first, later, back], 160) == 460
    earlier = made(5, checkpoint=50, skip_to=70)
    assert in_effect([first, earlier]) == [earlier] and data_position([first, earlier], 120) == 140


def test_a_rollback_survives_run_json() -> None:
    one = Rollback(2, "nonfinite", 150, 152, 100, "/c/rank_0/x.ckpt", 100, 182, 164, 1.5, 8.5)
    assert Rollback.from_json(one.to_json()) == one and one.to_json()["skipped_steps"] == 82
    assert rollbacks_of({"rollbacks": [one.to_json(), {"attempt": "x"}]}) == [one]


def test_each_rollback_detector_reports_where_the_anomaly_began() -> None:
    spike = LossSpikeDetector(LossSpikeSettings(warmup=5, patience=2, span_steps=0))
    signals = [spike.observe({"step": step, "loss": loss})
               for step, loss in zip(range(10, 200, 10), [3.0, 2.9, 2.8, 2.9, 2.8, 2.7, 2.8, 9.0, 9.5], strict=False)]
    fired = [s for s in signals if s is not None]
    assert len(fired) == 1 and fired[0].onset_step == 71  # the first step after the last normal log (70)

    nan = NonFiniteDetector(HealthSettings().nonfinite)
    assert nan.observe({"step": 10, "loss": 1.0}) is None
    found = nan.observe({"step": 20, "loss": math.nan})
    assert found is not None and found.onset_step == 11

    cap = GradExplosionDetector(GradExplosionSettings(), absolute_threshold=10.0)
    assert cap.observe({"step": 5, "grad_norm": 1.0}) is None
    over = cap.observe({"step": 10, "grad_norm": 50.0})
    assert over is not None and over.onset_step == 6


def test_a_rollback_action_stops_with_the_anomaly_and_a_stop_action_without() -> None:
    stops: list[StopRequest] = []
    settings = HealthSettings(nonfinite=HealthSettings().nonfinite.__class__(action="rollback"))
    monitor = HealthMonitor(settings, request_stop=stops.append)
    monitor.observe({"step": 10, "loss": 1.0, "time": 1.0})
    monitor.observe({"step": 20, "loss": math.nan, "time": 2.0})
    anomaly = Anomaly("nonfinite", 11, 20, monitor.alerts[0].message)
    assert stops == [StopRequest(monitor.alerts[0].message, "nonfinite", 20, anomaly)] and monitor.stop == stops[0]
    assert stops[0].reason == f"nonfinite at step 20: {monitor.alerts[0].message}"
    assert monitor.alerts[0].to_dict()["onset_step"] == 11
    monitor.resumed()
    assert monitor.stop is None
    plain = HealthMonitor(HealthSettings(nonfinite=HealthSettings().nonfinite.__class__(action="stop")))
    plain.observe({"step": 20, "loss": math.nan, "time": 2.0})
    assert plain.stop is not None and plain.stop.detector == "nonfinite" and plain.stop.anomaly is None


def test_the_anomaly_crosses_in_the_rank_result() -> None:
    found = Anomaly("loss_spike", 150, 152, "loss spike")
    stop = StopRequest("x", "loss_spike", 152, found)
    result = RankResult(0, RunStatus.STOPPED_BY_MONITOR, stop.reason, stop=stop)
    assert RankResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    assert RankResult.from_json(RankResult(1, RunStatus.INTERRUPTED).to_json()).stop is None
    signalled = RankResult(1, RunStatus.INTERRUPTED, stop=StopRequest("signal SIGINT"))
    assert RankResult.from_json(json.loads(json.dumps(signalled.to_json()))) == signalled


def test_the_checkpoint_chosen_lies_before_the_onset_by_the_margin(tmp_path: Path) -> None:
    checkpoint_tree(tmp_path, [50, 100, 150], ranks=2, prefix="m")
    spike = Anomaly("loss_spike", 151, 153, "x")
    training = {"runner_config": {"batch_size": 2}}
    point, one = rollback.choose(tmp_path, spike, RollbackSettings(skip_steps=30), [], training, 2, None)
    assert point.step == 150 and (one.skip_from, one.skip_to, one.skipped_samples) == (150, 183, 66)
    point, _ = rollback.choose(tmp_path, spike, RollbackSettings(margin_steps=1), [], training, 2, None)
    assert point.step == 100  # 150 is not 1 step before the onset
    with pytest.raises(rollback.NoCheckpoint, match="no complete checkpoint before step 50"):
        rollback.choose(tmp_path, Anomaly("nonfinite", 50, 60, "x"), RollbackSettings(), [], training, 2, None)


def test_a_rollback_never_skips_past_the_end_of_the_data(tmp_path: Path) -> None:
    """The margin past the bad window is shortened to what the data holds (one batch stays: MindSpore refuses a
    reset at its end); a bad window that reaches the end leaves nothing: DataExhausted, naming the checkpoint."""
    checkpoint_tree(tmp_path, [50, 100, 150], ranks=1, prefix="m")
    training = {"runner_config": {"batch_size": 2}}
    _, near = rollback.choose(tmp_path, Anomaly("loss_spike", 171, 173, "x"), RollbackSettings(skip_steps=100), [],
                              training, 2, 200)
    assert (near.skip_from, near.skip_to) == (150, 199)  # not 273: the data ends at batch 200
    earlier = [near]  # a second spike after it: the data position counts from the first rollback's skip
    exhausted = ("reaches batch 200 of the data's 200, so nothing is left to train after it; the newest checkpoint "
                 "before its onset: step 100")
    with pytest.raises(rollback.DataExhausted, match=exhausted):
        rollback.choose(tmp_path, Anomaly("loss_spike", 150, 151, "x"), RollbackSettings(), earlier, training, 3, 200)
    _, inside = rollback.choose(tmp_path, Anomaly("loss_spike", 171, 173, "x"), RollbackSettings(skip_steps=10), [],
                                training, 2, 400)
    assert inside.skip_to == 183  # inside the data: the margin as configured


def test_checkpoints_after_the_rollback_step_move_aside_and_no_longer_count(tmp_path: Path) -> None:
    checkpoint_tree(tmp_path, [50, 100, 150, 157], ranks=2, prefix="m")
    assert rollback.set_aside_checkpoints(tmp_path, 100, attempt=1) == 4
    aside = tmp_path / "logs/output/checkpoint.superseded/attempt-1"
    assert sorted(p.name for p in aside.rglob("*.ckpt")) == ["m_rank_0-1_150.ckpt", "m_rank_0-1_157.ckpt",
                                                               "m_rank_1-1_150.ckpt", "m_rank_1-1_157.ckpt"]
    point, _ = rollback.choose(tmp_path, Anomaly("loss_spike", 400, 402, "x"), RollbackSettings(), [], {}, 2, None)
    assert point.step == 100



def test_iteration_directories_after_the_rollback_step_move_aside_whole(tmp_path: Path) -> None:
    """mindformers 1.9's iteration layout: each directory after the step moves aside as one (its common.json and
    every rank's files with it), and the rollback's resume skips the data as for the rank layout."""
    iteration_tree(tmp_path, [50, 100, 150], ranks=2)
    assert rollback.set_aside_checkpoints(tmp_path, 100, attempt=1) == 1
    moved = tmp_path / "logs/output/checkpoint.superseded/attempt-1/iteration_00000150"
    assert {p.name for p in moved.iterdir()} >= {"common.json", "llama_tiny-opt-0000001-0000002.safetensors"}
    point, _ = rollback.choose(tmp_path, Anomaly("loss_spike", 400, 402, "x"), RollbackSettings(), [], {}, 2, None)
    assert (point.step, point.path.name) == (100, "iteration_00000100")
    keys = resume_overrides(point, tmp_path, {}, data_position=182)
    assert f"checkpoint.load_path='{point.path}'" in keys and "data_skip_steps=182" in keys

def test_a_resume_after_a_rollback_skips_the_same_data(tmp_path: Path) -> None:
    checkpoint_tree(tmp_path, [100])
    point = rollback.latest_checkpoint(tmp_path)
    assert point is not None
    keys = resume_overrides(point, tmp_path, {}, data_position=182)
    assert "data_skip_steps=182" in keys and "ignore_data_skip=false" in [k.lower() for k in keys]
    assert not any(key.startswith("data_skip_steps") for key in resume_overrides(point, tmp_path, {}, 100))


def test_replay_forecasts_where_each_rollback_would_have_gone() -> None:
    from msmon.config.health import LossSpikeSettings
    from msmon.health.alert import Alert
    from msmon.health.rollback_forecast import RollbackTarget, forecast

    settings = HealthSettings(loss_spike=LossSpikeSettings(action="rollback"),
                              rollback=RollbackSettings(max_rollbacks=2, skip_steps=30))
    config = {"callbacks": [{"type": "CheckpointMonitor", "save_checkpoint_steps": 50, "keep_checkpoint_max": 5}]}

    def spike(step: int, onset: int, detector: str = "loss_spike") -> Alert:
        return Alert(1.0, step, detector, "warning", "x", {}, "rollback", onset_step=onset)

    alerts = [spike(152, 150), spike(170, 168), spike(152, 150, "grad_explosion"), spike(260, 255), spike(402, 400),
              spike(30, 25)]
    found = {(f.alert_step, f.detector): f for f in forecast(alerts, settings, config)}
    assert set(found) == {(30, "loss_spike"), (152, "loss_spike"), (170, "loss_spike"), (260, "loss_spike"),
                          (402, "loss_spike")}  # grad_explosion's action is alert
    assert "no checkpoint kept before step 25" in str(found[30, "loss_spike"].outcome)
    assert found[152, "loss_spike"].outcome == RollbackTarget(checkpoint_step=100, skip_to=182)
    assert found[152, "loss_spike"].describe() == "rollback to step 100, skipping the data of steps 101-182"
    assert found[152, "loss_spike"].to_json() == {"onset_step": 150, "checkpoint_step": 100, "skip_to": 182,
                                                  "refused": None}
    assert found[170, "loss_spike"].outcome == "its data would have been skipped by the rollback before"
    assert found[260, "loss_spike"].outcome == RollbackTarget(checkpoint_step=250, skip_to=290)
    assert found[402, "loss_spike"].outcome == "no rollback left (2 of 2)"
    assert found[402, "loss_spike"].to_json() == {"onset_step": 400, "checkpoint_step": None, "skip_to": None,
                                                  "refused": "no rollback left (2 of 2)"}
    sparse = {"callbacks": [{"type": "CheckpointMonitor", "save_checkpoint_steps": 100, "keep_checkpoint_max": 1}]}
    assert "no checkpoint kept" in str(forecast([spike(152, 150)], settings, sparse)[0].outcome)
    assert forecast([spike(152, 150)], settings, {})[0].outcome == "the config saves no checkpoint"

@pytest.mark.parametrize(("callbacks", "rollback", "codes"), [
    ([{"type": "MFLossMonitor"}], {}, {"MS810"}),
    ([{"type": "CheckpointMonitor", "save_checkpoint_steps": 100, "keep_checkpoint_max": 3}], {}, set()),
    ([{"type": "CheckpointMonitor", "save_checkpoint_steps": 100, "keep_checkpoint_max": 2}], {}, {"MS811"}),
    ([{"type": "CheckpointMonitor", "save_checkpoint_steps": 100, "keep_checkpoint_max": 3}],
     {"margin_steps": 200}, {"MS811"}),
    ([{"type": "CheckpointMonitor", "save_checkpoint_steps": 100}], {"max_rollbacks": 0}, {"MS811"}),
])
def test_validate_says_whether_the_checkpoints_can_carry_a_rollback(callbacks: list, rollback: dict,
                                                                     codes: set[str]) -> None:
    from validate_base import base_config

    from msmon.validate import validate_config

    config = base_config()
    config["callbacks"] = callbacks
    config["monitor_config"]["health"] = {"loss_spike": {"action": "rollback"}, "rollback": rollback}
    found = {f.code for f in validate_config(config).findings} & {"MS810", "MS811"}
    assert found == codes


def test_what_a_checkpoint_monitor_keeps() -> None:
    from msmon.compat.template import CheckpointSaving, checkpoint_saving

    saving = CheckpointSaving(every_steps=50, keep=5)
    assert [saving.newest_before(step) for step in (1, 50, 51, 150)] == [0, 0, 50, 100]
    assert saving.oldest_kept(152) == 0 and saving.oldest_kept(302) == 150  # nothing rotated yet; then 4 + the stop's
    assert saving.reaches_back(150) and not saving.reaches_back(151)
    assert checkpoint_saving({"callbacks": [{"type": "CheckpointMonitor"}]}) == CheckpointSaving(1, 5)
    assert checkpoint_saving({"callbacks": "x"}) is None


def test_the_ending_report_and_pngs_show_a_rollback(tmp_path: Path) -> None:
    """The stretch trained again after the rollback is marked on the report's plots (and PNGs) with what was
    skipped; the ending and the report's summary count it."""
    import json

    from msmon.view.ending import summary_lines
    from msmon.view.png import write_pngs
    from msmon.view.report import build_report
    from msmon.view.series import load_run

    one = Rollback(2, "loss_spike", 150, 152, 100, "/c/rank_0/x.ckpt", 100, 182, 164, 1.5, 8.5)
    (tmp_path / "run.json").write_text(json.dumps({
        "status": "completed", "last_step": 218, "total_steps": 300, "rollbacks": [one.to_json()],
        "start_time": "2026-12-03T10:00:00+00:00", "end_time": "2026-12-03T10:01:00+00:00"}))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "time": float(s), "loss": 1.0 / s}) + "\n"
                                                    for s in range(1, 219)))
    run = load_run(tmp_path)
    lines = summary_lines(run)
    assert lines[0].startswith("  218 of 300 steps (82 skipped by rollbacks) in 1m")
    assert "    loss_spike from step 150 (alert at 152) -> back to step 100, the data of 82 steps skipped (batches " \
           "101-182), 164 samples, 8.5s lost" in lines
    page = build_report(run)
    assert '"rollbacks":[{"step":100,"until":152,"label":"rollback: loss_spike from step 150 (alert at 152)' in page
    assert "1 rollback (the data of 82 steps skipped)" in page
    assert [p.name for p in write_pngs([run], tmp_path / "png")][:1] == ["loss.png"]


def test_only_the_detectors_that_bad_data_sets_off_may_roll_back() -> None:
    from msmon.config.coerce import build
    from msmon.config.health import ROLLBACK_DETECTORS

    assert ROLLBACK_DETECTORS == ("nonfinite", "loss_spike", "grad_explosion", "moe_collapse", "moe_dead_experts",
                                  "moe_imbalance_growth")
    for name in ROLLBACK_DETECTORS:
        settings, findings = build(HealthSettings, {name: {"action": "rollback"}}, "monitor_config.health")
        assert findings == [] and getattr(settings, name).action == "rollback"
    settings, findings = build(HealthSettings, {"stall": {"action": "rollback"}}, "monitor_config.health")
    assert [(f.code, f.path) for f in findings] == [("MS002", "monitor_config.health.stall.action")]
    assert settings.stall.action == "alert"
