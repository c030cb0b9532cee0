"""Slack incoming webhooks: Block Kit (a header, a section of fields, a context line); ``text`` is the fallback
notifications show. The webhook URL is the secret; Slack has no signature for incoming webhooks."""

from __future__ import annotations

from msmon.health.chat import ChatMessage
from msmon.util.jsonfiles import JsonObject

MIN_INTERVAL_S = 1.0  # one message a second per webhook


def request(url: str, message: ChatMessage, secret: str | None, now: float) -> tuple[str, JsonObject]:
    blocks: list[JsonObject] = [
        {"type": "header", "text": {"type": "plain_text", "text": message.title[:150]}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{label}*\n{value}"}
                                       for label, value in message.lines[:10]]},
    ]
    if message.command:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"`{message.command}`"}]})
    return url, {"text": message.text(), "blocks": blocks}
