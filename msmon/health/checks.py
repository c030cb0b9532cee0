"""Checks of ``monitor_config.health`` beyond types (MS8xx), for `msmon validate`: ranges, the webhook
URL, the command hook, and whether the learning-rate schedule can be read."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from msmon.findings import Finding, error, warning
from msmon.health.settings import HealthSettings

BASE = "monitor_config.health"

#: (dotted key under health, lowest allowed, highest allowed, inclusive low)
RANGES: tuple[tuple[str, float, float, bool], ...] = (
    ("loss_spike.ratio", 1.0, float("inf"), False),
    ("loss_spike.z_score", 0.0, float("inf"), False),
    ("loss_spike.warmup", 3, float("inf"), True),
    ("loss_spike.level_window", 1, float("inf"), True),
    ("loss_spike.window", 3, float("inf"), True),
    ("loss_spike.patience", 1, float("inf"), True),
    ("loss_spike.span_steps", 0, float("inf"), True),
    ("grad_explosion.ratio", 1.0, float("inf"), True),
    ("grad_explosion.level_ratio", 1.0, float("inf"), False),
    ("grad_explosion.growth_per_step", 0.0, float("inf"), False),
    ("grad_explosion.min_points", 3, float("inf"), True),
    ("grad_explosion.window_steps", 1, float("inf"), True),
    ("grad_explosion.settle_steps", 0, float("inf"), True),
    ("grad_explosion.patience", 1, float("inf"), True),
    ("dead_series.window", 2, float("inf"), True),
    ("dead_series.zero_patience", 1, float("inf"), True),
    ("learning_rate.constant_window", 2, float("inf"), True),
    ("learning_rate.zero_grace_steps", 0, float("inf"), True),
    ("throughput_drop.fraction", 0.0, 1.0, False),
    ("throughput_drop.window", 1, float("inf"), True),
    ("throughput_drop.patience", 1, float("inf"), True),
    ("throughput_drop.min_steps", 0, float("inf"), True),
    ("stall.factor", 1.0, float("inf"), True),
    ("stall.floor_s", 0.0, float("inf"), False),
    ("stall.first_step_timeout_s", 0.0, float("inf"), False),
    ("stall.slow_step_timeout_s", 0.0, float("inf"), True),
    ("stall.poll_s", 0.05, float("inf"), True),
    ("stall.recent", 1, float("inf"), True),
    ("alerts.webhook_timeout_s", 0.0, float("inf"), False),
    ("alerts.command_timeout_s", 0.0, float("inf"), False),
    ("alerts.queue_size", 1, float("inf"), True),
    ("alerts.rate_limit_s", 0.0, float("inf"), True),
)


def _get(settings: HealthSettings, dotted: str) -> Any:
    node: Any = settings
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def check_health(settings: HealthSettings, training: Mapping[str, Any] | None = None) -> list[Finding]:
    """Findings for values out of range (MS801), a bad webhook URL (MS802), a command hook that cannot
    run (MS803), and a learning-rate check that has no schedule to compare with (MS804, warning)."""
    if not settings.enabled:
        return []
    found: list[Finding] = []
    for key, low, high, inclusive in RANGES:
        value = _get(settings, key)
        too_low = value < low if inclusive else value <= low
        if too_low or value > high:
            bound = f"{'>=' if inclusive else '>'} {low:g}" + (f" and <= {high:g}" if high != float("inf") else "")
            found.append(error("MS801", f"{BASE}.{key}", f"{key} must be {bound}, got {value}", "see docs/health.md"))
    timeout = settings.stall.timeout_s
    if timeout is not None and timeout <= 0:
        found.append(error("MS801", f"{BASE}.stall.timeout_s", f"stall.timeout_s must be > 0, got {timeout}",
                           "leave it null to calibrate from step times"))
    url = settings.alerts.webhook_url
    if url is not None:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            found.append(error("MS802", f"{BASE}.alerts.webhook_url", f"webhook_url {url!r} is not an http(s) URL",
                               "write e.g. https://hooks.example.com/msmon"))
    command = settings.alerts.command
    if command is not None:
        if not command or not command[0].strip():
            found.append(error("MS803", f"{BASE}.alerts.command", "command is empty", "write an argv list"))
        elif shutil.which(command[0]) is None:
            found.append(warning("MS803", f"{BASE}.alerts.command", f"command {command[0]!r} is not found on PATH",
                                 "give the full path of the program"))
    lr = settings.learning_rate
    schedule = (training or {}).get("lr_schedule")
    if lr.enabled and lr.peak is None and not (isinstance(schedule, Mapping) and schedule.get("learning_rate")):
        found.append(warning("MS804", f"{BASE}.learning_rate", "no lr_schedule.learning_rate: the learning-rate "
                             "checks can only catch negative or non-finite values", "set learning_rate.peak"))
    return found
