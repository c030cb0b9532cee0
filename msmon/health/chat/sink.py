"""Sending chat messages: one ``ChatSink`` per target, off the training thread, rate-limited with a summary.

An alert that comes within ``min_interval_s`` of the last message to that target is held back; the next message
(or, at close, one summary) says how many were held back and of which detectors. The run-ended message is sent
by the ``msmon run`` parent (``send_ended``), which outlives the training process: a training killed by SIGKILL or
the OOM killer is still reported. A slow or failing endpoint costs at most ``timeout_s`` per message on this
sink's own thread, and nothing beyond the close budget.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

from msmon.config.health import ChatTarget
from msmon.health.alert import Alert
from msmon.health.chat import ChatMessage, dingtalk, feishu, slack, wecom
from msmon.health.sinks import AsyncSink, post_json
from msmon.status import RunStatus
from msmon.util.numbers import fmt_number

SERVICES = {"feishu": feishu, "lark": feishu, "dingtalk": dingtalk, "wecom": wecom, "slack": slack}
MESSAGE_CHARS = 600  # an alert's message, cut for a chat line
VALUES_SHOWN = 4  # the first numeric values of an alert


def alert_message(alert: Alert, run_dir: Path) -> ChatMessage:
    lines = [("run", run_dir.name), ("step", str(alert.step)), ("detector", alert.detector),
             ("severity", alert.severity), ("message", alert.message[:MESSAGE_CHARS])]
    numbers = [f"{key} {fmt_number(value)}" for key, value in alert.values.items()
               if isinstance(value, int | float) and not isinstance(value, bool)][:VALUES_SHOWN]
    if numbers:
        lines.append(("values", ", ".join(numbers)))
    return ChatMessage(f"msmon {alert.severity}: {alert.detector} at step {alert.step} ({run_dir.name})",
                       tuple(lines), alert.severity, f"msmon status {run_dir}")


def rejected(service: str, answer: bytes) -> str | None:
    """The service's own refusal in a 200 answer (DingTalk's ``errcode``, Feishu's ``code``), else None."""
    try:
        data = json.loads(answer or b"{}")
    except ValueError:
        return None if service == "slack" or answer.strip() == b"ok" else answer[:200].decode("utf-8", "replace")
    if not isinstance(data, dict):
        return None
    code = data.get("errcode", data.get("code", data.get("StatusCode", 0)))
    return None if code in (0, None) else f"{code}: {data.get('errmsg') or data.get('msg') or data}"


class ChatSink(AsyncSink[Alert | ChatMessage]):
    """One chat target: its message format, signature and rate limit."""

    def __init__(self, target: ChatTarget, run_dir: Path, timeout_s: float, queue_size: int = 100) -> None:
        self.target = target
        self.service = SERVICES[target.service]
        self.run_dir = Path(run_dir)
        self.timeout_s = timeout_s
        self.min_interval_s = (target.min_interval_s if target.min_interval_s is not None
                               else self.service.MIN_INTERVAL_S)
        self.held: Counter[str] = Counter()
        self.sent: list[ChatMessage] = []
        self._last = -float("inf")
        super().__init__(f"{target.service} chat", queue_size, close_timeout_s=timeout_s + self.min_interval_s + 1)

    def send(self, message: ChatMessage) -> None:
        """Queue a message that is not an alert (the run-ended one): never held back."""
        self._queue.put_nowait(message)

    def deliver(self, item: Alert | ChatMessage) -> None:
        if isinstance(item, Alert):
            if time.monotonic() - self._last < self.min_interval_s:
                self.held[item.detector] += 1
                return
            item = alert_message(item, self.run_dir)
        self._post(self._with_summary(item))

    def _with_summary(self, message: ChatMessage) -> ChatMessage:
        if not self.held:
            return message
        held = ", ".join(f"{detector} x{count}" for detector, count in sorted(self.held.items()))
        self.held.clear()
        return ChatMessage(message.title, (*message.lines, ("held back (rate limit)", held)), message.severity,
                           message.command)

    def _post(self, message: ChatMessage) -> None:
        wait = self.min_interval_s - (time.monotonic() - self._last)
        if wait > 0:
            time.sleep(wait)
        secret = os.environ.get(self.target.secret_env) if self.target.secret_env else None
        url, body = self.service.request(self.target.url, message, secret, time.time())
        self._last = time.monotonic()
        answer = post_json(url, json.dumps(body, ensure_ascii=False), self.timeout_s, "application/json; charset=utf-8")
        refusal = rejected(self.target.service, answer)
        if refusal is not None:
            raise RuntimeError(f"the robot refused the message ({refusal})")
        self.sent.append(message)

    def _run(self) -> None:
        super()._run()
        if self.held:  # at close: what the rate limit held back, in one message
            summary = ChatMessage(f"msmon: alerts held back ({self.run_dir.name})", (("run", self.run_dir.name),),
                                  "warning", f"msmon status {self.run_dir}")
            try:
                self._post(self._with_summary(summary))
            except Exception as exc:  # noqa: BLE001 - the receiver's failure, said once
                self._warn(f"{self.name}: delivery failed: {type(exc).__name__}: {exc}")


def ended_message(run_dir: Path, status: RunStatus, exit_code: int, last_step: int | None, total_steps: int | None,
                  alerts: int, error: str | None, killed_by: int | None = None) -> ChatMessage:
    """The run-ended message: completed / failed / stopped by the monitor / interrupted / killed (``killed_by``:
    the signal that ended the training process, runner.results.RunResult)."""
    how = status.value.replace("_", " ")
    if killed_by == signal.SIGKILL:
        how = "killed (SIGKILL or the OOM killer)"
    elif killed_by is not None:
        how = f"killed ({signal.Signals(killed_by).name if killed_by in signal.valid_signals() else killed_by})"
    steps = f"{last_step if last_step is not None else '-'}" + (f" of {total_steps}" if total_steps else "")
    lines = [("run", run_dir.name), ("status", how), ("exit code", str(exit_code)), ("last step", steps),
             ("alerts", str(alerts))]
    if error:
        lines.append(("error", error[:MESSAGE_CHARS]))
    severity = {RunStatus.COMPLETED: "info", RunStatus.FAILED: "critical"}.get(status, "warning")
    return ChatMessage(f"msmon: run {run_dir.name} {how}", tuple(lines), severity, f"msmon report {run_dir}")


def send_ended(targets: tuple[ChatTarget, ...] | list[ChatTarget], run_dir: Path, message: ChatMessage,
               timeout_s: float) -> None:
    """Send ``message`` to every target at once; returns within ``timeout_s`` + 1 s whatever the endpoints do."""
    sinks = [ChatSink(target, run_dir, timeout_s) for target in targets]
    for sink in sinks:
        sink.min_interval_s = 0.0
        sink.send(message)
    deadline = time.monotonic() + timeout_s + 1.0
    for sink in sinks:
        sink.close(deadline)
