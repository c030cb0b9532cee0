"""Checks of ``monitor_config.health`` beyond types (MS8xx): the ranges its fields declare, the webhook URL,
the command hook, and whether the learning-rate schedule can be read."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from urllib.parse import urlparse

from msmon.config.coerce import range_findings
from msmon.findings import Finding, error, warning
from msmon.validate.context import CheckContext

BASE = "monitor_config.health"


def check_health(ctx: CheckContext) -> list[Finding]:
    """Findings for values out of range (MS801), a bad webhook URL (MS802), a command hook that cannot
    run (MS803), and a learning-rate check that has no schedule to compare with (MS804, warning)."""
    settings, training = ctx.settings.health, ctx.training
    if not settings.enabled:
        return []
    found = range_findings(settings, BASE, "MS801", "see docs/health.md")
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
