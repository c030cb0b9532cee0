"""The MS8xx checks of monitor_config.health (ranges, webhook URL, command hook, LR schedule)."""

from __future__ import annotations

import sys

from msmon.config.coerce import build
from msmon.health.checks import check_health
from msmon.health.settings import HealthSettings

SCHEDULE = {"lr_schedule": {"type": "CosineWithWarmUpLR", "learning_rate": 1e-3}}


def findings(section: dict, training: dict | None = SCHEDULE) -> list[tuple[str, str, str]]:
    settings, problems = build(HealthSettings, section, "monitor_config.health")
    assert not problems
    return [(f.code, f.path, f.severity) for f in check_health(settings, training)]


def test_defaults_are_clean():
    assert findings({}) == []
    assert findings({"enabled": False}, None) == []


def test_ranges_url_command_and_schedule():
    got = findings({
        "loss_spike": {"ratio": 1.0}, "throughput_drop": {"fraction": 1.5}, "stall": {"timeout_s": 0.0},
        "alerts": {"webhook_url": "ftp://x", "command": ["no-such-program-msmon"]},
    }, {})
    assert got == [
        ("MS801", "monitor_config.health.loss_spike.ratio", "error"),
        ("MS801", "monitor_config.health.throughput_drop.fraction", "error"),
        ("MS801", "monitor_config.health.stall.timeout_s", "error"),
        ("MS802", "monitor_config.health.alerts.webhook_url", "error"),
        ("MS803", "monitor_config.health.alerts.command", "warning"),
        ("MS804", "monitor_config.health.learning_rate", "warning"),
    ]
    assert findings({"alerts": {"webhook_url": "http://127.0.0.1:9/h", "command": [sys.executable]}}) == []
    assert findings({"alerts": {"command": []}})[0][:2] == ("MS803", "monitor_config.health.alerts.command")
    assert findings({"learning_rate": {"peak": 1e-3}}, {}) == []
