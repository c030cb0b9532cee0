"""Unit tests of the health detectors and the monitor's alert logic, on synthetic records."""

from __future__ import annotations

import math
import random

import pytest

from msmon.anomaly import StopRequest
from msmon.config.coerce import build
from msmon.config.health import (
    DeadSeriesSettings,
    GradExplosionSettings,
    HealthSettings,
    LearningRateSettings,
    LossSpikeSettings,
    NonFiniteSettings,
    StallSettings,
    ThroughputDropSettings,
)
from msmon.config.schedule import schedule_from_config
from msmon.config.schema import MonitorSettings
from msmon.health.detectors import build_detectors
from msmon.health.detectors.dead_series import DeadSeriesDetector
from msmon.health.detectors.grad_explosion import GradExplosionDetector
from msmon.health.detectors.learning_rate import LearningRateDetector
from msmon.health.detectors.loss_spike import LossSpikeDetector
from msmon.health.detectors.nonfinite import NonFiniteDetector
from msmon.health.detectors.stall import StallDetector, calibrate
from msmon.health.detectors.throughput_drop import ThroughputDropDetector
from msmon.health.monitor import HealthMonitor


def healthy(steps: int = 300, seed: int = 0, interval: int = 1) -> list[dict]:
    """A healthy-looking run: falling noisy loss, noisy flat grad norm, steady throughput, 1 s steps."""
    rng = random.Random(seed)
    out = []
    for step in range(interval, steps + 1, interval):
        out.append({
            "step": step, "time": 1000.0 + step,
            "loss": 2.0 + 4.0 * math.exp(-step / 80) + rng.gauss(0, 0.05),
            "grad_norm": math.exp(rng.gauss(0, 0.1)), "learning_rate": 1e-3,
            "throughput": 5000 * math.exp(rng.gauss(0, 0.05)),
        })
    return out


def fired(detector, records) -> list[tuple[int, object]]:
    return [(r["step"], s) for r in records if (s := detector.observe(dict(r))) is not None]


def test_nonfinite_fires_once_per_episode_and_ignores_overflow_steps():
    det = NonFiniteDetector(NonFiniteSettings())
    records = [{"step": 1, "loss": 2.0, "grad_norm": 1.0}, {"step": 2, "loss": math.nan, "grad_norm": 1.0},
               {"step": 3, "loss": math.nan}, {"step": 4, "loss": 2.0, "grad_norm": 1.0},
               {"step": 5, "loss": 2.0, "grad_norm": math.inf, "overflow": 1},
               {"step": 6, "loss": 2.0, "grad_norm": -math.inf}]
    hits = fired(det, records)
    assert [step for step, _ in hits] == [2, 6]
    assert hits[0][1].severity == "critical" and "loss is NaN" in hits[0][1].message
    assert "-Inf" in hits[1][1].message


def test_loss_spike_quiet_on_bumps_and_fires_after_patience():
    records = healthy()
    bumped = [{**r, "loss": r["loss"] * 1.15} if r["step"] % 40 < 5 else r for r in records]
    assert fired(LossSpikeDetector(LossSpikeSettings()), bumped) == []
    spiked = [{**r, "loss": r["loss"] * 3} if 150 <= r["step"] < 170 else r for r in records]
    hits = fired(LossSpikeDetector(LossSpikeSettings()), spiked)
    assert [step for step, _ in hits] == [152]  # 2 logs spanning 2 steps: the third spiking log at interval 1
    assert hits[0][1].values["since_step"] == 150
    assert hits[0][1].values["ratio"] > 2.5


def test_loss_spike_at_a_sparse_interval_needs_two_logs():
    records = [{**r, "loss": r["loss"] * 3} if 150 <= r["step"] < 180 else r for r in healthy(400, interval=10)]
    assert [step for step, _ in fired(LossSpikeDetector(LossSpikeSettings()), records)] == [160]


def test_loss_spike_waits_for_warmup():
    records = [{"step": s, "loss": 1.0 + 0.01 * (s % 2)} for s in range(1, 6)] + [{"step": 6, "loss": 50.0}]
    assert fired(LossSpikeDetector(LossSpikeSettings(patience=1)), records) == []


@pytest.mark.parametrize("interval", [1, 10])
def test_grad_growth_of_one_percent_per_step_found_within_100_steps_while_loss_is_fine(interval):
    start = 150
    records = [{**r, "grad_norm": r["grad_norm"] * 1.01 ** max(0, r["step"] - start)}
               for r in healthy(400, interval=interval)]
    hits = fired(GradExplosionDetector(GradExplosionSettings()), records)
    assert hits, "growth not found"
    step, signal = hits[0]
    assert start < step <= start + 100
    assert signal.values["loss"] < 3.0  # the loss still looks fine
    assert fired(GradExplosionDetector(GradExplosionSettings()), healthy(400, interval=interval)) == []


def test_grad_early_rise_during_lr_warmup_is_not_an_explosion():
    schedule = schedule_from_config({"lr_schedule": {"type": "CosineWithWarmUpLR", "learning_rate": 1e-3,
                                                     "warmup_steps": 50, "total_steps": 400}},
                                    LearningRateSettings())
    records = [{**r, "grad_norm": r["grad_norm"] * 1.03 ** min(r["step"], 50)} for r in healthy(400)]
    assert fired(GradExplosionDetector(GradExplosionSettings(), schedule), records) == []


def test_grad_absolute_threshold_from_mindformers_key():
    config = {"monitor_config": {"global_norm_spike_threshold": 3.0}}
    det = next(d for d in build_detectors(HealthSettings(), config) if isinstance(d, GradExplosionDetector))
    hits = fired(det, [{"step": 1, "grad_norm": 1.0}, {"step": 2, "grad_norm": 3.5}, {"step": 3, "grad_norm": 4.0}])
    assert [step for step, _ in hits] == [2]
    assert hits[0][1].values["threshold"] == 3.0


def test_dead_series_zero_grad_and_constant_loss_reported_once():
    records = [{"step": s, "loss": 6.907755, "grad_norm": 0.0 if s > 1 else 0.8} for s in range(1, 12)]
    hits = fired(DeadSeriesDetector(DeadSeriesSettings()), records)
    assert [step for step, _ in hits] == [3, 5]  # grad_norm 0 twice at step 3; loss constant 5 logs at step 5
    assert hits[0][1].severity == "critical" and "grad_norm is exactly 0" in hits[0][1].message
    assert "loss is exactly 6.908" in hits[1][1].message
    assert fired(DeadSeriesDetector(DeadSeriesSettings()), healthy()) == []


COSINE = {"lr_schedule": {"type": "CosineWithWarmUpLR", "learning_rate": 1e-3, "lr_end": 1e-5,
                          "warmup_ratio": 0.1, "total_steps": 300}}


def cosine(step: int) -> float:
    if step < 30:
        return 1e-3 * step / 30
    return 1e-5 + 0.5 * (1e-3 - 1e-5) * (1 + math.cos(math.pi * (step - 30) / 270))


def lr_hits(records, config=COSINE):
    settings = LearningRateSettings()
    return fired(LearningRateDetector(settings, schedule_from_config(config, settings)), records)


def test_learning_rate_schedule_read_from_config():
    schedule = schedule_from_config(COSINE, LearningRateSettings())
    assert (schedule.peak, schedule.warmup_end, schedule.decay_end, schedule.moves) == (1e-3, 30, 300, True)
    assert schedule_from_config({"lr_schedule": {"learning_rate": "5.e-3"}}, LearningRateSettings(peak=1.0)).peak == 1.0
    assert schedule_from_config({"lr_schedule": {"learning_rate": "5.e-3"}}, LearningRateSettings()).peak == 5e-3
    scaled = {"lr_scale": True, "lr_schedule": {"learning_rate": 5e-3}}  # mindformers scales by devices x batch
    assert schedule_from_config(scaled, LearningRateSettings()).peak is None


def test_learning_rate_checks():
    clean = [{"step": s, "learning_rate": cosine(s)} for s in range(1, 301)]
    assert lr_hits(clean) == []
    checks = {
        "invalid": [{**r, "learning_rate": -1e-4} if r["step"] == 100 else r for r in clean],
        "above_peak": [{**r, "learning_rate": 5e-3} if r["step"] == 100 else r for r in clean],
        "zero": [{**r, "learning_rate": 0.0} if r["step"] >= 100 else r for r in clean],
        "frozen": [{**r, "learning_rate": cosine(100)} if r["step"] >= 100 else r for r in clean],
    }
    for check, records in checks.items():
        hits = lr_hits(records)
        assert [s.values["check"] for _, s in hits][:1] == [check], check
        assert 100 <= hits[0][0] <= 110, check
    assert lr_hits([{**r, "learning_rate": math.nan} if r["step"] == 50 else r for r in clean])[0][1].severity == (
        "critical"
    )
    constant = {"lr_schedule": {"type": "ConstantWarmUpLR", "learning_rate": 1e-3, "warmup_steps": 10}}
    assert lr_hits([{"step": s, "learning_rate": 1e-3} for s in range(11, 300)], constant) == []
    # a schedule that decays to 0 ends with one exact zero: no alert
    assert lr_hits(clean[:-1] + [{"step": 300, "learning_rate": 0.0}]) == []


def test_throughput_drop_needs_a_lasting_slowdown():
    records = healthy()
    dip = [{**r, "throughput": r["throughput"] * 0.3} if 100 <= r["step"] < 120 else r for r in records]
    assert fired(ThroughputDropDetector(ThroughputDropSettings()), dip) == []
    drop = [{**r, "throughput": r["throughput"] * 0.3} if r["step"] >= 100 else r for r in records]
    hits = fired(ThroughputDropDetector(ThroughputDropSettings()), drop)
    assert len(hits) == 1 and hits[0][0] == 252  # min_steps 150 after the slowness began
    assert hits[0][1].values["since_step"] == 100 + 2  # the median of the last 5 turns slow on the 3rd
    lasting = [{**r, "throughput": r["throughput"] * 0.6} if r["step"] >= 100 else r for r in records]
    assert [step for step, _ in fired(ThroughputDropDetector(ThroughputDropSettings()), lasting)] == [252]
    mild = [{**r, "throughput": r["throughput"] * 0.75} if r["step"] >= 100 else r for r in records]
    assert fired(ThroughputDropDetector(ThroughputDropSettings()), mild) == []


def test_stall_calibration_and_gap_check():
    settings = StallSettings(floor_s=60.0, factor=10.0)
    assert calibrate([1.0, 2.0, 0.5], settings) == 60.0
    assert calibrate([1.0, 9.0], settings) == 90.0
    assert calibrate([], settings) == 3600.0
    assert calibrate([1.0], StallSettings(timeout_s=5.0)) == 5.0
    records = [{"step": s, "time": 1000.0 + s} for s in range(1, 51)]
    gapped = [{**r, "time": r["time"] + (100.0 if r["step"] >= 30 else 0.0)} for r in records]
    hits = fired(StallDetector(settings), gapped)
    assert [step for step, _ in hits] == [30]
    assert hits[0][1].values["last_step"] == 29 and hits[0][1].values["stalled_s"] == pytest.approx(101.0)
    assert fired(StallDetector(settings), records) == []


def test_checkpoint_and_eval_steps_get_the_slow_step_timeout():
    config = {"callbacks": [{"type": "MFLossMonitor"}, {"type": "CheckpointMonitor", "save_checkpoint_steps": 100}],
              "do_eval": True, "eval_step_interval": 250}
    det = next(d for d in build_detectors(HealthSettings(stall=StallSettings(floor_s=2.0)), config)
               if isinstance(d, StallDetector))
    assert det.slow_every == (100, 250)
    assert det.check(60.0, 250, 1000.0, [0.1] * 5) is None
    assert det.check(60.0, 100, 1000.0, [0.1] * 5) is None  # saving after step 100: 1800 s allowed
    assert det.check(60.0, 99, 1000.0, [0.1] * 5) is None  # the save may run before msmon's step end
    assert det.check(60.0, 57, 1000.0, [0.1] * 5) is not None
    records = [{"step": s, "time": 1000.0 + s + (300.0 if s > 100 else 0.0)} for s in range(90, 111)]
    assert fired(det, records) == []  # a 300 s save between steps 100 and 101 is no time gap
    assert StallDetector(StallSettings(), slow_every=(1,)).slow_every == ()  # a save every step: calibrated


def test_the_live_check_reports_a_stall_once_with_the_last_step():
    det = StallDetector(StallSettings(floor_s=2.0))
    assert det.check(1.0, 7, 1000.0, [0.1] * 5) is None
    signal = det.check(2.5, 7, 1000.0, [0.1] * 5)
    assert signal is not None and signal.values["last_step"] == 7 and signal.values["last_step_time"] == 1000.0
    assert "1970-01-01T00:16:40Z" in signal.message
    assert det.check(9.0, 7, 1000.0, [0.1] * 5) is None  # the same stall is not reported twice
    assert det.check(2.5, 8, 1001.0, [0.1] * 5) is not None


def test_before_the_first_step_only_the_first_step_timeout_applies():
    """Issue 12 (5): timeout_s 5 on the 2-rank quickstart fired a critical stall at step 0 while the graph
    compiled. Until a step has ended, timeout_s and the calibration do not apply."""
    det = StallDetector(StallSettings(timeout_s=5.0, first_step_timeout_s=100.0))
    assert det.check(30.0, None, None, []) is None
    late = det.check(101.0, None, None, [])
    assert late is not None and late.values["timeout_s"] == 100.0 and "no step has ended yet" in late.message
    assert det.check(6.0, 1, 1000.0, []) is not None  # once a step has ended: timeout_s


class Collect:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.got = []

    def handle(self, alert):
        self.got.append(alert)

    def close(self, deadline=None):
        return None


def nan_records(times):
    return [{"step": i + 1, "time": t, "loss": math.nan if i % 2 else 1.0} for i, t in enumerate(times)]


def test_monitor_rate_limits_per_detector_and_critical_beats_warning():
    monitor = HealthMonitor(HealthSettings())
    for record in nan_records([0, 10, 20, 30, 400, 410]):
        monitor.observe(record)
    assert [a.step for a in monitor.alerts if a.detector == "nonfinite"] == [2, 6]  # step 4: within 300 s of 2
    assert monitor.suppressed == 1
    monitor._last["nonfinite"] = (1000.0, "warning")
    assert monitor._allowed("nonfinite", "critical", 1001.0)
    assert not monitor._allowed("nonfinite", "warning", 1002.0)


def test_monitor_actions_log_alert_stop():
    stops: list[StopRequest] = []
    settings = HealthSettings(nonfinite=NonFiniteSettings(action="stop"),
                              dead_series=DeadSeriesSettings(action="log", window=2))
    loud, quiet = Collect(quiet=False), Collect(quiet=True)
    monitor = HealthMonitor(settings, sinks=[loud, quiet], request_stop=stops.append)
    for record in [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 1.0}, {"step": 3, "loss": math.inf},
                   {"step": 4, "loss": 1.0}, {"step": 5, "loss": math.nan}]:
        monitor.observe(record)
    assert [(a.detector, a.action) for a in quiet.got] == [("dead_series", "log"), ("nonfinite", "stop"),
                                                           ("nonfinite", "stop")]
    assert [a.detector for a in loud.got] == ["nonfinite", "nonfinite"]
    assert len(stops) == 1 and stops[0].reason.startswith("nonfinite at step 3") and stops[0].step == 3


class Broken:
    """A detector that raises on every record."""

    name = "loss_spike"

    def observe(self, record):
        raise ValueError("boom")


def test_monitor_disables_a_broken_detector_and_keeps_the_others():
    monitor = HealthMonitor(HealthSettings())
    monitor.detectors.insert(0, Broken())
    monitor.observe({"step": 1, "loss": math.nan})
    monitor.observe({"step": 2, "loss": 1.0})
    assert [a.detector for a in monitor.alerts] == ["nonfinite"]
    assert not any(isinstance(d, Broken) for d in monitor.detectors)


def test_a_detector_failing_on_the_history_of_a_resumed_run_is_counted_not_hidden():
    from msmon.util import internal_errors

    monitor = HealthMonitor(HealthSettings())
    monitor.detectors.insert(0, Broken())
    internal_errors.forget()
    assert monitor.warm([{"step": 1, "loss": 1.0}, {"step": 2, "loss": 1.0}]) == 2
    seen = internal_errors.seen()
    assert seen.count == 2 and "health detector loss_spike (the run's history)" in (seen.first or "")
    internal_errors.forget()


def test_health_settings_are_validated_strictly():
    _, findings = build(MonitorSettings, {"health": {"loss_spike": {"ratio": "big", "patienc": 3},
                                                     "stall": {"action": "halt"}}}, "monitor_config")
    codes = sorted((f.code, f.path) for f in findings)
    assert codes == [("MS001", "monitor_config.health.loss_spike.patienc"),
                     ("MS002", "monitor_config.health.loss_spike.ratio"),
                     ("MS002", "monitor_config.health.stall.action")]
    built, findings = build(MonitorSettings, {"health": {"alerts": {"command": ["notify", "x"]},
                                                         "grad_explosion": {"absolute_threshold": 5}}}, "m")
    assert not findings and built.health.alerts.command == ["notify", "x"]
    assert built.health.grad_explosion.absolute_threshold == 5.0


def test_grad_explosion_judges_the_interval_mean_when_the_record_has_it():
    start = 150
    base = healthy(400, interval=10)
    growing_mean = [{**r, "grad_norm_mean": 1.01 ** max(0, r["step"] - start) * math.exp(0.02 * (r["step"] % 20 == 0)),
                     "grad_norm": 1.0 + 0.01 * (r["step"] % 3)} for r in base]
    hits = fired(GradExplosionDetector(GradExplosionSettings()), growing_mean)
    assert hits and start < hits[0][0] <= start + 100
    assert "interval mean" in hits[0][1].message and hits[0][1].values["grad_norm_mean"] > 1.1
    growing_single = [{**r, "grad_norm": r["grad_norm"] * 1.01 ** max(0, r["step"] - start), "grad_norm_mean": 1.0
                       + 0.01 * (r["step"] % 3)} for r in base]
    assert fired(GradExplosionDetector(GradExplosionSettings()), growing_single) == []  # the mean is the input


def test_grad_explosion_without_interval_keys_behaves_as_before():
    start = 150
    records = [{**r, "grad_norm": r["grad_norm"] * 1.01 ** max(0, r["step"] - start)}
               for r in healthy(400, interval=10)]
    plain = fired(GradExplosionDetector(GradExplosionSettings()), records)
    same = fired(GradExplosionDetector(GradExplosionSettings()),
                 [{**r, "grad_norm_mean": r["grad_norm"], "grad_norm_max": r["grad_norm"]} for r in records])
    assert [(s, x.values["growth_per_step"]) for s, x in plain] == [(s, x.values["growth_per_step"]) for s, x in same]
    assert "interval mean" not in plain[0][1].message and "grad_norm_mean" not in plain[0][1].values


def test_grad_absolute_threshold_counts_any_step_of_the_interval():
    config = {"monitor_config": {"global_norm_spike_threshold": 3.0}}
    det = next(d for d in build_detectors(HealthSettings(), config) if isinstance(d, GradExplosionDetector))
    records = [{"step": 10, "grad_norm": 1.0, "grad_norm_mean": 1.0, "grad_norm_max": 1.2},
               {"step": 20, "grad_norm": 1.0, "grad_norm_mean": 1.3, "grad_norm_max": 3.5},  # one step above
               {"step": 30, "grad_norm": 1.0, "grad_norm_mean": 1.0, "grad_norm_max": math.inf},  # an overflow
               {"step": 40, "grad_norm": 3.2, "grad_norm_mean": 1.2, "grad_norm_max": math.nan}]
    hits = fired(det, records)
    assert [step for step, _ in hits] == [20, 40]  # a non-finite max falls back to the logging step's value
    assert hits[0][1].values["grad_norm"] == 3.5 and "largest grad_norm since the previous log" in hits[0][1].message


def test_nonfinite_finds_a_nan_loss_between_two_logs():
    det = NonFiniteDetector(NonFiniteSettings())
    records = [{"step": 10, "loss": 2.0, "loss_mean": 2.1, "grad_norm": 1.0},
               {"step": 20, "loss": 2.0, "loss_mean": math.nan, "grad_norm": 1.0},  # NaN at a non-logging step
               {"step": 30, "loss": math.nan, "loss_mean": math.nan, "grad_norm": 1.0}]
    hits = fired(det, records)
    assert [step for step, _ in hits] == [20]
    assert "a step since the previous log had a non-finite loss" in hits[0][1].message
    again = fired(NonFiniteDetector(NonFiniteSettings()), records[2:])
    assert "loss is NaN" in again[0][1].message and "loss_mean" not in again[0][1].message


QUICKSTART_VOCAB = {"model": {"model_config": {"vocab_size": 1000}}}


def chance_alerts(losses: list[float], config: dict | None = QUICKSTART_VOCAB, **settings) -> list:
    from msmon.config.health import ChanceLevelSettings

    monitor = HealthMonitor(HealthSettings(chance_level=ChanceLevelSettings(**settings)), config)
    for step, loss in enumerate(losses, start=1):
        monitor.observe({"step": 2 * step, "loss": loss, "time": 1000.0 * step})  # beyond the alerts' rate limit
    return [a for a in monitor.alerts if a.detector == "chance_level"]


def test_a_loss_worse_than_chance_alerts_from_the_first_logs_with_no_warm_up():
    """lr 50 on the quickstart (its 1,000 tokens: ln(1000) = 6.91, the limit 10.36): thousands from the first log."""
    found = chance_alerts([3315.0, 139710.0, 1729.0, 900.0])
    assert [(a.step, a.severity) for a in found] == [(4, "critical")]  # the second log, once
    assert "above 1.5 x the chance level ln(1000) = 6.908" in found[0].message and "since step 2" in found[0].message
    assert found[0].values["vocab_size"] == 1000 and found[0].values["limit"] == pytest.approx(1.5 * math.log(1000))


def test_the_chance_level_is_silent_on_a_healthy_start_and_rearms_after_a_recovery():
    healthy = [6.92, 6.90, 6.85, 6.5, 5.9, 4.2, 3.1]  # the quickstart's first logs: within hundredths of ln(1000)
    assert chance_alerts(healthy) == []
    assert chance_alerts([6.9, 11.0, 6.9, 11.0, 6.9]) == []  # one noisy log at a time is no run of breaches
    again = chance_alerts([20.0, 20.0, 20.0, 5.0, 30.0, 30.0])
    assert [a.step for a in again] == [4, 12]  # once per excursion above the limit
    assert chance_alerts([math.nan, math.inf, 50.0]) == []  # non-finite values are the nonfinite detector's
    assert chance_alerts([3315.0, 3315.0], config=None) == []  # no vocabulary size: nothing to judge against
    assert [a.step for a in chance_alerts([13.0, 9.0], factor=1.2, patience=1)] == [2]


def test_the_vocabulary_is_the_model_configs_or_the_one_given():
    from msmon.health.detectors import vocab_size

    assert vocab_size({"model": {"model_config": {"vocab_size": 151936}}}) == 151936
    assert vocab_size({"model": {"model_config": {"padded_vocab_size": 32000}}}) == 32000
    assert vocab_size(None) is None and vocab_size({"model": {}}, given=500) == 500
    from msmon.config.coerce import range_findings

    settings, findings = build(MonitorSettings, {"health": {"chance_level": {"vocab_size": 1, "factor": 1.0}}},
                               "monitor_config")
    assert findings == []
    out = range_findings(settings.health, "monitor_config.health", "MS801")
    assert sorted(f.path for f in out) == ["monitor_config.health.chance_level.factor",
                                           "monitor_config.health.chance_level.vocab_size"]
