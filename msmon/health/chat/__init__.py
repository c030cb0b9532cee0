"""Alerts in the team chat: Feishu/Lark, DingTalk, WeCom and Slack robots (``health.alerts.chat``).

One module per service (``feishu``, ``dingtalk``, ``wecom``, ``slack``) turns a ``ChatMessage`` into that
service's request: its message format and, where the service has one, its signature. ``msmon.health.chat.sink``
sends them off the training thread, at most one message per target every ``min_interval_s`` (the services' own
limits: DingTalk about 20 a minute per robot), and summarises what it held back in the next message. Signing
secrets are read from the environment variable a target names, at send time, and never written anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChatMessage:
    """What every service shows: a title, ``(label, value)`` lines, a severity and the command to look further."""

    title: str
    lines: tuple[tuple[str, str], ...]
    severity: str  # warning | critical | info
    command: str | None = None

    def text(self) -> str:
        """The plain text of the message (the services without rich formatting, and the tests)."""
        body = [self.title, *(f"{label}: {value}" for label, value in self.lines)]
        return "\n".join([*body, *([f"next: {self.command}"] if self.command else [])])
