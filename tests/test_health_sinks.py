"""Alert sinks (alerts.jsonl, console, a real webhook on 127.0.0.1, command hook), attach."""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from msmon.anomaly import StopRequest
from msmon.config.health import AlertSettings, HealthSettings
from msmon.engine.record import StepProgress
from msmon.health import HealthHandle, attach
from msmon.health.alert import Alert
from msmon.health.sinks import AlertFile, CommandSink, ConsoleSink, WebhookSink

ALERT = Alert(1000.0, 7, "nonfinite", "critical", "loss is NaN", {"loss": float("nan")}, "alert")


@pytest.fixture
def webhook_server():
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"type": self.headers["Content-Type"], "body": json.loads(body)})
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()
    server.server_close()


def test_webhook_delivers_strict_json(webhook_server):
    url, received = webhook_server
    sink = WebhookSink(url, timeout_s=2.0)
    sink.handle(ALERT)
    sink.close()
    assert sink.delivered == 1
    assert received[0]["type"] == "application/json"
    assert received[0]["body"]["step"] == 7 and received[0]["body"]["values"]["loss"] == "NaN"


def test_a_down_or_hanging_webhook_never_blocks_the_caller():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        down_port = probe.getsockname()[1]
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)  # accepts connections, never answers
    try:
        for url in (f"http://127.0.0.1:{down_port}/", f"http://127.0.0.1:{hung.getsockname()[1]}/"):
            sink = WebhookSink(url, timeout_s=1.0, queue_size=2)
            started = time.monotonic()
            for _ in range(20):
                sink.handle(ALERT)
            assert time.monotonic() - started < 0.05
            sink.close()
            assert time.monotonic() - started < 2.0 + 0.5  # close waits at most timeout + 1 s
            assert sink.delivered == 0 and sink.dropped + sink.failed >= 17
    finally:
        hung.close()


def test_command_hook_gets_the_alert_on_stdin(tmp_path):
    out = tmp_path / "got.json"
    script = f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())"
    sink = CommandSink([sys.executable, "-c", script], timeout_s=20.0)
    sink.handle(ALERT)
    sink.close()
    assert json.loads(out.read_text())["detector"] == "nonfinite"
    failing = CommandSink([sys.executable, "-c", "import sys; sys.exit(3)"], timeout_s=20.0)
    failing.handle(ALERT)
    failing.close()
    assert failing.failed == 1


def test_alert_file_and_console(tmp_path, caplog):
    AlertFile(tmp_path / "alerts.jsonl").handle(ALERT)
    AlertFile(tmp_path / "alerts.jsonl").handle(ALERT)
    lines = (tmp_path / "alerts.jsonl").read_text().splitlines()
    assert len(lines) == 2 and set(json.loads(lines[0])) == {"time", "step", "detector", "severity", "message",
                                                               "values", "action"}
    with caplog.at_level(logging.INFO, logger="msmon"):
        ConsoleSink().handle(ALERT)
        ConsoleSink().handle(Alert(1.0, 8, "loss_spike", "warning", "spike", {}, "alert"))
        ConsoleSink().handle(Alert(1.0, 9, "loss_spike", "warning", "quiet", {}, "log"))
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.WARNING, logging.INFO]
    assert caplog.records[0].getMessage().startswith("HEALTH ALERT [critical] step 7 nonfinite: loss is NaN")


class Progress(StepProgress):
    """The session's StepProgress, stepped by the test."""

    def step(self, seconds: float) -> None:
        time.sleep(seconds)
        now = time.monotonic()
        self.recent_step_seconds.append(now - self.last_end_monotonic)
        self.last_end_monotonic, self.last_step = now, self.last_step + 1


class FakeSession:
    """The MonitorSession surface attach uses (listeners, alerts to backends, stop requests, progress)."""

    def __init__(self) -> None:
        self.progress = Progress()
        self.listeners: list = []
        self.backend_alerts: list[dict] = []
        self.stop: StopRequest | None = None

    def add_listener(self, listener) -> None:
        self.listeners.append(listener)

    def emit_alert(self, alert: dict) -> None:
        self.backend_alerts.append(alert)

    def request_stop(self, request: StopRequest) -> None:
        self.stop = self.stop or request


def test_attach_wires_every_sink_and_the_stop_action(tmp_path, webhook_server):
    from msmon.config.health import NonFiniteSettings
    from msmon.config.schema import MonitorSettings

    url, received = webhook_server
    settings = MonitorSettings(health=HealthSettings(nonfinite=NonFiniteSettings(action="stop"),
                                                     alerts=AlertSettings(webhook_url=url)))
    session = FakeSession()
    handle = attach(session, settings, tmp_path, {})
    assert isinstance(handle, HealthHandle) and len(session.listeners) == 1
    session.listeners[0].on_record({"step": 10, "time": 1.0, "loss": float("inf")})
    session.listeners[0].close()
    handle.close()
    assert handle.alert_count == 1
    assert json.loads((tmp_path / "alerts.jsonl").read_text())["action"] == "stop"
    assert session.backend_alerts[0]["detector"] == "nonfinite"
    assert received and received[0]["body"]["step"] == 10
    assert session.stop is not None and (session.stop.detector, session.stop.step) == ("nonfinite", 10)
    assert session.stop.reason.startswith("nonfinite at step 10")
    disabled = attach(FakeSession(), MonitorSettings(health=HealthSettings(enabled=False)), tmp_path, None)
    assert disabled.alert_count == 0
