"""`msmon replay` and the replay reader: one code path with the live monitor, strict input errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from msmon.config.health import HealthSettings
from msmon.errors import MsmonError
from msmon.health.monitor import HealthMonitor
from msmon.health.replay import replay
from msmon.records import parse_record, read_records

TRACES = Path(__file__).resolve().parent.parent / "bench" / "traces"
MSMON = [sys.executable, "-m", "msmon"]


def msmon(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*MSMON, *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_nonfinite_tokens_and_strings_are_floats():
    record = parse_record('{"step": 3, "loss": NaN, "grad_norm": "Infinity", "lr": "-Infinity", "x": Infinity}', "f:1")
    assert record["step"] == 3 and math.isnan(record["loss"])
    assert record["grad_norm"] == math.inf and record["lr"] == -math.inf and record["x"] == math.inf


@pytest.mark.parametrize(
    ("line", "expected"),
    [('{"step": 1, "loss": ', "not valid JSON"), ("[1, 2]", "expected a JSON object"),
     ('{"loss": 1.0}', "'step' must be an integer"), ('{"step": true}', "'step' must be an integer"),
     ('{"step": 1, "time": "noon"}', "'time' must be unix seconds")],
)
def test_bad_lines_name_the_line(tmp_path, line, expected):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n\n' + line + '\n{"step": 9}\n', encoding="utf-8")
    with pytest.raises(MsmonError) as info:
        list(read_records(path))
    assert f"{path}:3:" in info.value.message and expected in info.value.message


def test_half_written_last_line_is_skipped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo', encoding="utf-8")
    assert [r["step"] for r in read_records(path)] == [1]


def test_replay_equals_the_live_listener():
    path = TRACES / "dead_lr10000_seed0.jsonl"
    live = HealthMonitor(HealthSettings())
    for line in path.read_text(encoding="utf-8").splitlines():
        live.on_record(json.loads(line))
    alerts, count, _ = replay(path)
    assert count == 320
    assert [a.to_dict() for a in alerts] == [a.to_dict() for a in sorted(live.alerts, key=lambda a: a.step)]
    assert [(a.detector, a.step) for a in alerts][:2] == [("grad_norm_bound", 4), ("dead_series", 6)]


def test_run_directory_uses_its_own_settings_and_schedule(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    records = [{"step": s, "time": 1000.0 + s, "loss": 1.0 + 0.01 * (s % 3), "learning_rate": 1e-3}
               for s in range(1, 11)]
    records[5]["learning_rate"] = 5e-3
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (run / "config.yaml").write_text("peak: 1.e-3\nlr_schedule:\n  type: ConstantWarmUpLR\n  learning_rate: ${peak}\n")
    (run / "monitor_config.resolved.yaml").write_text("health:\n  learning_rate:\n    action: stop\n")
    alerts, _, _ = replay(run)
    assert [(a.detector, a.step, a.action, a.values["check"]) for a in alerts] == [
        ("learning_rate", 6, "stop", "above_peak")]
    (run / "monitor_config.resolved.yaml").write_text("health:\n  learning_rate:\n    action: halt\n")
    with pytest.raises(MsmonError, match="action"):
        replay(run)


def test_a_run_directory_is_replayed_with_the_config_it_trained_with(tmp_path):
    """A run started with lr_schedule.learning_rate=50 on the command line was replayed against its YAML's peak
    ("learning rate 22.5 is above the configured peak 0.005"); the run's mindformers.yaml holds what it trained with."""
    run = tmp_path / "run"
    run.mkdir()
    records = [{"step": s, "time": 1000.0 + s, "loss": 1.0 + 0.01 * (s % 3), "learning_rate": 22.5}
               for s in range(1, 11)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (run / "config.yaml").write_text("lr_schedule:\n  type: ConstantWarmUpLR\n  learning_rate: 5.e-3\n")
    alerts, _, _ = replay(run)
    assert [a.values["check"] for a in alerts] == ["above_peak"]  # the control: the YAML alone
    (run / "mindformers.yaml").write_text("lr_schedule:\n  type: ConstantWarmUpLR\n  learning_rate: 50\n")
    alerts, _, _ = replay(run)
    assert alerts == []


def test_cli_prints_alerts_in_step_order_and_json(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"step": 1, "loss": 2.0, "grad_norm": 1.0}\n{"step": 2, "loss": NaN, "grad_norm": "Infinity"}\n'
                     '{"step": 3, "loss": 2.0, "grad_norm": 1.0, "learning_rate": -1}\n', encoding="utf-8")
    text = msmon("replay", str(trace), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "step       2" in lines[0] and "nonfinite" in lines[0] and "learning_rate" in lines[1]
    assert lines[-1].startswith("2 alerts in 3 records")
    out = msmon("replay", str(trace), "--json", cwd=tmp_path)
    data = json.loads(out.stdout)
    assert [(a["step"], a["detector"], a["severity"]) for a in data] == [(2, "nonfinite", "critical"),
                                                                       (3, "learning_rate", "critical")]
    assert data[0]["values"]["loss"] == "NaN" and data[0]["message"]


def test_cli_bad_input_is_one_line_exit_1(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"step": 1}\n{oops\n', encoding="utf-8")
    for target, expected in (("bad.jsonl", "bad.jsonl:2: not valid JSON"), ("missing", "no such file"),
                             (".", "no metrics.jsonl")):
        result = msmon("replay", target, cwd=tmp_path)
        assert result.returncode == 1
        assert expected in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_cli_config_tunes_thresholds(tmp_path):
    config = tmp_path / "tune.yaml"
    config.write_text("monitor_config:\n  health:\n    dead_series:\n      enabled: false\n", encoding="utf-8")
    trace = str(TRACES / "dead_lr10000_seed0.jsonl")
    default = json.loads(msmon("replay", trace, "--json", cwd=tmp_path).stdout)
    tuned = json.loads(msmon("replay", trace, "--json", "--config", str(config), cwd=tmp_path).stdout)
    assert "dead_series" in {a["detector"] for a in default}
    assert "dead_series" not in {a["detector"] for a in tuned}
