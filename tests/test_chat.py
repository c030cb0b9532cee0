"""Alerts in the team chat: each service's exact message and signature, checked by a local stand-in of its robot
endpoint (tests/helpers_chat.py: the signature by the service's documented rule); the rate limit and the summary
of what it held back; a hanging endpoint never holds the caller beyond the budget. (The run-ended message after a
SIGKILL, sent by the real `msmon run` parent: test_resume.py.)"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from helpers_chat import RobotServer

from msmon.config.health import ChatTarget
from msmon.health.alert import Alert
from msmon.health.chat.sink import ChatSink, ended_message, send_ended
from msmon.status import RunStatus

SECRETS = {"feishu": "SEC-feishu-1", "dingtalk": "SECdingtalk2"}
ALERT = Alert(1000.0, 120, "grad_explosion", "warning", "grad_norm grew 3x in 40 steps while the loss fell",
              {"grad_norm": 9.5}, "alert")
RUN = Path("/runs/quickstart/llama_tiny_1")


@pytest.fixture
def robots(monkeypatch: pytest.MonkeyPatch):
    for service, secret in SECRETS.items():
        monkeypatch.setenv(f"MSMON_TEST_{service.upper()}_SECRET", secret)
    server = RobotServer(SECRETS)
    yield server
    server.close()


def target(server: RobotServer, service: str, **kwargs) -> ChatTarget:
    secret = f"MSMON_TEST_{service.upper()}_SECRET" if service in SECRETS else None
    return ChatTarget(service=service, url=server.url(service), secret_env=secret, **kwargs)  # type: ignore[arg-type]


def send_one(server: RobotServer, service: str) -> tuple[dict, dict]:
    sink = ChatSink(target(server, service), RUN, timeout_s=5.0)
    sink.handle(ALERT)
    sink.close()
    assert sink.delivered == 1 and sink.failed == 0, service
    ((query, body),) = server.received[service]
    return query, body


def test_feishu_gets_a_signed_card(robots: RobotServer) -> None:
    _, body = send_one(robots, "feishu")
    assert body["msg_type"] == "interactive" and set(body) == {"msg_type", "card", "timestamp", "sign"}
    card = body["card"]
    assert card["header"] == {"title": {"tag": "plain_text", "content":
                                        "msmon warning: grad_explosion at step 120 (llama_tiny_1)"},
                              "template": "orange"}
    fields = [f["text"]["content"] for f in card["elements"][0]["fields"]]
    assert fields[:3] == ["**run**\nllama_tiny_1", "**step**\n120", "**detector**\ngrad_explosion"]
    assert fields[-1] == "**values**\ngrad_norm 9.5"
    assert card["elements"][1]["elements"][0]["content"] == f"msmon status {RUN}"


def test_dingtalk_gets_signed_markdown_in_its_url(robots: RobotServer) -> None:
    query, body = send_one(robots, "dingtalk")
    assert query["access_token"] == ["t0ken"] and {"timestamp", "sign"} <= set(query)
    assert body["msgtype"] == "markdown" and body["markdown"]["title"].startswith("msmon warning: grad_explosion")
    text = body["markdown"]["text"]
    assert text.startswith("### msmon warning") and "- **step**: 120" in text and f"`msmon status {RUN}`" in text


def test_wecom_gets_markdown_and_slack_blocks(robots: RobotServer) -> None:
    query, body = send_one(robots, "wecom")
    assert query["key"] == ["k3y"] and body["msgtype"] == "markdown"
    assert body["markdown"]["content"].startswith('**<font color="warning">msmon warning: grad_explosion')
    assert "> step: 120" in body["markdown"]["content"]
    _, slack = send_one(robots, "slack")
    assert slack["text"].startswith("msmon warning: grad_explosion at step 120") and "step: 120" in slack["text"]
    header, section, context = slack["blocks"]
    assert header["type"] == "header" and section["fields"][1] == {"type": "mrkdwn", "text": "*step*\n120"}
    assert context["elements"][0]["text"] == f"`msmon status {RUN}`"


def test_a_wrong_secret_is_refused_by_the_robot_and_said_once(robots: RobotServer, monkeypatch, caplog) -> None:
    """The control of the two signature tests: the stand-in refuses a message signed with another secret, as the
    service does (a 200 answer with an error code), and msmon says so."""
    monkeypatch.setenv("MSMON_TEST_DINGTALK_SECRET", "not-the-secret")
    monkeypatch.setenv("MSMON_TEST_FEISHU_SECRET", "not-the-secret")
    for service in ("dingtalk", "feishu"):
        sink = ChatSink(target(robots, service), RUN, timeout_s=5.0)
        sink.handle(ALERT)
        sink.close()
        assert sink.failed == 1 and service not in robots.received
    assert robots.refused == 2 and "the robot refused the message (310000: sign not match)" in caplog.text


def test_the_rate_limit_holds_alerts_back_and_the_next_message_counts_them(robots: RobotServer) -> None:
    sink = ChatSink(target(robots, "slack", min_interval_s=2.0), RUN, timeout_s=5.0)
    sink.handle(ALERT)
    for step in (121, 122, 123):
        sink.handle(Alert(1001.0, step, "loss_spike", "warning", "spike", {}, "alert"))
    sink.handle(Alert(1002.0, 124, "nonfinite", "critical", "loss is NaN", {}, "alert"))
    sink.close(time.monotonic() + 10)
    texts = [body["text"] for _, body in robots.received["slack"]]
    assert len(texts) == 2 and "grad_explosion at step 120" in texts[0]  # the rest came within 2 s
    assert "msmon: alerts held back" in texts[1]
    assert "held back (rate limit): loss_spike x3, nonfinite x1" in texts[1]


def test_a_hanging_endpoint_never_holds_the_caller_beyond_the_budget() -> None:
    server = RobotServer(hang=True)
    try:
        sink = ChatSink(ChatTarget(service="slack", url=server.url("slack")), RUN, timeout_s=1.0)
        began = time.monotonic()
        for step in range(50):  # the caller (the writer thread) never waits for a message
            sink.handle(Alert(1000.0, step, "loss_spike", "warning", "spike", {}, "alert"))
        assert time.monotonic() - began < 0.5
        sink.close()
        started = time.monotonic()
        send_ended([ChatTarget(service="slack", url=server.url("slack"))], RUN,
                   ended_message(RUN, RunStatus.FAILED, 3, 50, 400, 1, "the training process exited with code -9"), 1.0)
        assert time.monotonic() - started < 1.0 + 1.0 + 0.5  # the documented budget: timeout_s + 1 s
    finally:
        server.close()


def test_the_run_ended_message_says_how_it_ended() -> None:
    killed = ended_message(RUN, RunStatus.FAILED, 3, 57, 400, 2,
                           "the training process exited with code -9 without a result", killed_by=signal.SIGKILL)
    assert killed.title == "msmon: run llama_tiny_1 killed (SIGKILL or the OOM killer)"
    assert killed.severity == "critical"
    assert ("last step", "57 of 400") in killed.lines and killed.command == f"msmon report {RUN}"
    stopped = ended_message(RUN, RunStatus.STOPPED_BY_MONITOR, 4, 120, 400, 1, "stall at step 120: ...")
    assert stopped.title.endswith("stopped by monitor") and stopped.severity == "warning"
    assert ended_message(RUN, RunStatus.COMPLETED, 0, 400, 400, 0, None).severity == "info"
    assert ended_message(RUN, RunStatus.FAILED, 3, 9, 400, 0, "x", killed_by=signal.SIGTERM).title.endswith(
        "killed (SIGTERM)")
    assert ended_message(RUN, RunStatus.FAILED, 1, 9, 400, 0, "a Python error").title.endswith(" failed")
