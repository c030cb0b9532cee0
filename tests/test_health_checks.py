"""The MS8xx checks of monitor_config.health (ranges, webhook URL, command hook, LR schedule)."""

from __future__ import annotations

import sys

from msmon.config.coerce import build
from msmon.config.health import HealthSettings
from msmon.config.loader import config_from_dict
from msmon.config.schema import MonitorSettings
from msmon.validate.context import CheckContext
from msmon.validate.health import check_health

SCHEDULE = {"lr_schedule": {"type": "CosineWithWarmUpLR", "learning_rate": 1e-3}}


def findings(section: dict, training: dict | None = SCHEDULE) -> list[tuple[str, str, str]]:
    settings, problems = build(HealthSettings, section, "monitor_config.health")
    assert not problems
    ctx = CheckContext(config_from_dict(dict(training or {})), dict(training or {}), {},
                       MonitorSettings(health=settings))
    return [(f.code, f.path, f.severity) for f in check_health(ctx)]


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


def test_every_numeric_health_setting_declares_its_range():
    """The ranges live on the fields (doc(..., at_least/above/at_most)): none can be forgotten."""
    import dataclasses
    import typing

    def numeric_fields(cls: type, prefix: str = "") -> list[tuple[str, dict]]:
        found = []
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                found += numeric_fields(hints[f.name], f"{prefix}{f.name}.")
            elif {int, float} & set(typing.get_args(hints[f.name]) or (hints[f.name],)):
                found.append((f"{prefix}{f.name}", dict(f.metadata)))
        return found

    fields = numeric_fields(HealthSettings)
    assert len(fields) > 30
    unbounded = [key for key, meta in fields if all(meta.get(k) is None for k in ("at_least", "above", "at_most"))]
    assert unbounded == []


def test_ranges_that_the_old_table_missed_are_checked():
    got = findings({"grad_explosion": {"t_stat": -1.0, "absolute_threshold": 0.0}, "learning_rate": {"tolerance": -0.1},
                    "throughput_drop": {"warmup": 0}})
    assert [(code, path) for code, path, _ in got] == [
        ("MS801", "monitor_config.health.grad_explosion.t_stat"),
        ("MS801", "monitor_config.health.grad_explosion.absolute_threshold"),
        ("MS801", "monitor_config.health.learning_rate.tolerance"),
        ("MS801", "monitor_config.health.throughput_drop.warmup"),
    ]
