"""Feishu / Lark custom robots: an interactive card; signed with the robot's secret when it has one.

Signature (open.feishu.cn, "custom bot"): ``timestamp`` (unix seconds) and ``sign`` =
base64(HMAC-SHA256(key = f"{timestamp}\\n{secret}", message = b"")) in the body.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from msmon.health.chat import ChatMessage
from msmon.util.jsonfiles import JsonObject

MIN_INTERVAL_S = 1.0  # 100 messages a minute, 5 a second per robot
TEMPLATES = {"critical": "red", "warning": "orange", "info": "blue"}


def sign(timestamp: int, secret: str) -> str:
    digest = hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def request(url: str, message: ChatMessage, secret: str | None, now: float) -> tuple[str, JsonObject]:
    fields = [{"is_short": True, "text": {"tag": "lark_md", "content": f"**{label}**\n{value}"}}
              for label, value in message.lines]
    elements: list[JsonObject] = [{"tag": "div", "fields": fields}]
    if message.command:
        elements.append({"tag": "note", "elements": [{"tag": "plain_text", "content": message.command}]})
    body: JsonObject = {"msg_type": "interactive", "card": {
        "header": {"title": {"tag": "plain_text", "content": message.title},
                   "template": TEMPLATES.get(message.severity, "blue")},
        "elements": elements}}
    if secret:
        timestamp = int(now)
        body.update(timestamp=str(timestamp), sign=sign(timestamp, secret))
    return url, body
