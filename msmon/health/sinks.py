"""Where alerts go: alerts.jsonl, the console log, the backends, a webhook and a command hook.

The webhook and the command run on their own daemon thread behind a bounded queue: a receiver that
is down or hangs costs the training nothing (a full queue drops the alert and says so once).
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Generic, TypeVar

from msmon.health.alert import Alert
from msmon.util.jsonfiles import JsonObject

logger = logging.getLogger("msmon")


class _Stop(Enum):
    """The mark a closing sink puts on its queue."""

    STOP = "stop"


_STOP = _Stop.STOP
#: What an asynchronous sink's queue carries: an alert (the chat robots: also a message of their own).
Item = TypeVar("Item")


def alert_line(alert: Alert) -> str:
    """``HEALTH ALERT [critical] step 120 nonfinite: loss is NaN ...``"""
    return f"HEALTH ALERT [{alert.severity}] step {alert.step} {alert.detector}: {alert.message}"


class AlertFile:
    """Appends one JSON line per alert to ``alerts.jsonl`` and flushes it."""

    quiet = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def handle(self, alert: Alert) -> None:
        line = json.dumps(alert.to_dict()) + "\n"  # NaN/Infinity tokens, like metrics.jsonl
        with self._lock, self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)

    def close(self, deadline: float | None = None) -> None:
        """Nothing to wait for."""


class ConsoleSink:
    """The ``msmon`` logger: ERROR for critical, WARNING for warning, INFO for action ``log``."""

    quiet = True

    def handle(self, alert: Alert) -> None:
        if alert.action == "log":
            level = logging.INFO
        else:
            level = logging.ERROR if alert.severity == "critical" else logging.WARNING
        logger.log(level, alert_line(alert))

    def close(self, deadline: float | None = None) -> None:
        """Nothing to wait for."""


class BackendSink:
    """Hands each alert to the session, which passes it to the backends' ``write_alert``."""

    quiet = False

    def __init__(self, emit: Callable[[JsonObject], None]) -> None:
        self.emit = emit

    def handle(self, alert: Alert) -> None:
        self.emit(alert.to_dict())

    def close(self, deadline: float | None = None) -> None:
        """Nothing to wait for."""


def post_json(url: str, body: str, timeout_s: float, content_type: str = "application/json") -> bytes:
    """POST ``body`` (JSON text) to ``url``; the answer's body. The URLs are the user's webhook and chat robots,
    which validate (MS802, MS809) allows as http(s) only."""
    request = urllib.request.Request(  # noqa: S310 - see the docstring
        url, data=body.encode("utf-8"), method="POST",
        headers={"Content-Type": content_type, "User-Agent": "msmon"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - see the docstring
        return bytes(response.read())


class AsyncSink(Generic[Item]):
    """A daemon thread delivering alerts from a bounded queue; ``deliver`` may block, training never does."""

    quiet = False

    def __init__(self, name: str, queue_size: int, close_timeout_s: float) -> None:
        self.name = name
        self.delivered = 0
        self.failed = 0
        self.dropped = 0
        self._close_timeout = close_timeout_s
        self._queue: queue.Queue[Item | _Stop] = queue.Queue(maxsize=max(queue_size, 1))
        self._warned = False
        self._thread = threading.Thread(target=self._run, name=f"msmon-{name}", daemon=True)
        self._thread.start()

    def handle(self, alert: Item) -> None:
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self.dropped += 1
            self._warn(f"{self.name}: queue full, alert dropped (the receiver is slow or down)")

    def close(self, deadline: float | None = None) -> None:
        """Deliver what is queued until ``deadline`` (monotonic; default: ``close_timeout_s`` from now); a
        receiver still busy then is abandoned."""
        deadline = time.monotonic() + self._close_timeout if deadline is None else deadline
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:  # the receiver has not taken an alert for a while: it hangs
            self._abandon()
            return
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._abandon()

    def _abandon(self) -> None:
        self._warn(f"{self.name}: still busy at close; abandoned")

    def deliver(self, item: Item) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                self.deliver(item)
                self.delivered += 1
            except Exception as exc:  # noqa: BLE001 - report and keep serving
                self.failed += 1
                self._warn(f"{self.name}: delivery failed: {type(exc).__name__}: {exc}")

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("msmon: %s (further problems of this alert hook are not shown)", message)


class WebhookSink(AsyncSink[Alert]):
    """POSTs each alert as strict JSON (``Content-Type: application/json``)."""

    def __init__(self, url: str, timeout_s: float, queue_size: int = 100) -> None:
        self.url = url
        self.timeout_s = timeout_s
        super().__init__("webhook", queue_size, close_timeout_s=timeout_s + 1.0)

    def deliver(self, alert: Alert) -> None:
        post_json(self.url, alert.to_json(), self.timeout_s)


class CommandSink(AsyncSink[Alert]):
    """Runs ``argv`` (no shell) with the alert's JSON on stdin."""

    def __init__(self, argv: list[str], timeout_s: float, queue_size: int = 100) -> None:
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self._process: subprocess.Popen[str] | None = None
        super().__init__("command hook", queue_size, close_timeout_s=timeout_s + 1.0)

    def deliver(self, alert: Alert) -> None:
        started = time.monotonic()
        process = subprocess.Popen(  # noqa: S603 - argv list from the user's config, no shell
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self._process = process
        try:
            _, stderr = process.communicate(alert.to_json() + "\n", timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise RuntimeError(f"{self.argv[0]} killed after its timeout of {self.timeout_s:g} s") from None
        finally:
            self._process = None
        if process.returncode != 0:
            tail = (stderr or "").strip().splitlines()[-1:] or [""]
            raise RuntimeError(f"{self.argv[0]} exited {process.returncode} after "
                               f"{time.monotonic() - started:.1f} s {tail[0]}".rstrip())

    def _abandon(self) -> None:
        """A command still running when the run ends is killed: nothing of the run outlives it."""
        process = self._process
        if process is not None:
            process.kill()
        super()._abandon()
