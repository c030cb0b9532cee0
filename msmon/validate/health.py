"""Checks of ``monitor_config.health`` beyond types (MS8xx): the ranges its fields declare, the webhook URL,
the chat robots, the command hook, and whether the learning-rate schedule can be read."""

from __future__ import annotations

import os
import shutil
from urllib.parse import urlparse

from msmon.config.coerce import range_findings
from msmon.config.health import ChatTarget
from msmon.config.schedule import schedule_from_config
from msmon.findings import Finding, error, warning
from msmon.util.mapping import dotted_get
from msmon.validate.context import CheckContext

BASE = "monitor_config.health"


def check_health(ctx: CheckContext) -> list[Finding]:
    """Findings for values out of range (MS801), a bad webhook URL (MS802), a command hook that cannot
    run (MS803), and a learning-rate check that has no schedule to compare with (MS804, warning)."""
    settings, training = ctx.settings.health, ctx.training
    if not settings.enabled:
        return []
    found = range_findings(settings, BASE, "MS801")
    url = settings.alerts.webhook_url
    if url is not None and not is_http_url(url):
        found.append(error("MS802", f"{BASE}.alerts.webhook_url", f"webhook_url {url!r} is not an http(s) URL",
                           "write e.g. https://hooks.example.com/msmon"))
    found += _chat_findings(settings.alerts.chat)
    command = settings.alerts.command
    if command is not None:
        if not command or not command[0].strip():
            found.append(error("MS803", f"{BASE}.alerts.command", "command is empty", "write an argv list"))
        elif shutil.which(command[0]) is None:
            found.append(warning("MS803", f"{BASE}.alerts.command", f"command {command[0]!r} is not found on PATH",
                                 "give the full path of the program"))
    lr = settings.learning_rate
    schedule = schedule_from_config(training, lr)
    written = dotted_get(training, f"{schedule.path}.learning_rate")
    if lr.enabled and schedule.peak is None and not isinstance(written, str):  # text: MS025 names it
        found.append(warning("MS804", f"{BASE}.learning_rate", f"no {schedule.path}.learning_rate to compare with "
                             "(absent, or scaled by lr_scale): the learning-rate checks can only catch negative or "
                             "non-finite values", f"set {BASE}.learning_rate.peak"))
    return found


def is_http_url(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme in ("http", "https") and bool(parsed.netloc)


def _chat_findings(targets: list[ChatTarget]) -> list[Finding]:
    """MS809: a chat robot's URL, and the secret it signs with."""
    found = []
    for index, target in enumerate(targets):
        where = f"{BASE}.alerts.chat[{index}]"
        if not is_http_url(target.url):
            found.append(error("MS809", f"{where}.url", f"{target.service} url {target.url!r} is not an http(s) URL",
                               "write the robot's webhook URL, as ${oc.env:NAME}"))
        if target.secret_env and target.service in ("wecom", "slack"):
            found.append(warning("MS809", f"{where}.secret_env", f"{target.service} robots are not signed: "
                                 "secret_env is not used", "remove secret_env"))
        elif target.secret_env and not os.environ.get(target.secret_env):
            found.append(warning("MS809", f"{where}.secret_env", f"{target.secret_env} is not set here: messages "
                                 "go unsigned and a signed robot refuses them", f"export {target.secret_env}=..."))
    return found
