"""WeCom (企业微信) group robots: markdown. The robot's key is in its URL; WeCom has no signature."""

from __future__ import annotations

from msmon.health.chat import ChatMessage
from msmon.util.jsonfiles import JsonObject

MIN_INTERVAL_S = 3.0  # 20 messages a minute per robot
COLOURS = {"critical": "warning", "warning": "warning", "info": "info"}  # WeCom's font colours


def request(url: str, message: ChatMessage, secret: str | None, now: float) -> tuple[str, JsonObject]:
    colour = COLOURS.get(message.severity, "info")
    lines = [f'**<font color="{colour}">{message.title}</font>**',
             *(f"> {label}: {value}" for label, value in message.lines)]
    if message.command:
        lines.append(f"`{message.command}`")
    return url, {"msgtype": "markdown", "markdown": {"content": "\n".join(lines)}}
