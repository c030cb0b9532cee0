"""DingTalk custom robots: markdown; signed in the URL when the robot uses "加签" (a secret).

Signature (open.dingtalk.com, "custom robot security settings"): ``timestamp`` (unix milliseconds) and ``sign`` =
urlencode(base64(HMAC-SHA256(key = secret, message = f"{timestamp}\\n{secret}"))) as query parameters.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse

from msmon.health.chat import ChatMessage
from msmon.util.jsonfiles import JsonObject

MIN_INTERVAL_S = 3.0  # about 20 messages a minute per robot; beyond it the robot is throttled for 10 minutes


def sign(timestamp_ms: int, secret: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest).decode())


def request(url: str, message: ChatMessage, secret: str | None, now: float) -> tuple[str, JsonObject]:
    lines = [f"### {message.title}", *(f"- **{label}**: {value}" for label, value in message.lines)]
    if message.command:
        lines.append(f"\n`{message.command}`")
    if secret:
        timestamp_ms = int(now * 1000)
        url = f"{url}{'&' if '?' in url else '?'}timestamp={timestamp_ms}&sign={sign(timestamp_ms, secret)}"
    return url, {"msgtype": "markdown", "markdown": {"title": message.title, "text": "\n".join(lines)}}
