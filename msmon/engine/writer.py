"""The off-path writer: a dispatcher thread fans records out to the backend runners and the listeners.

The callback's ``put`` (a logging step's record) wakes it; records that arrive faster than one cycle per
``MIN_CYCLE_S`` go out together, and with none arriving it still wakes every ``TICK_S`` (the disk guard, the
listeners' status). Each cycle hands every backend runner one batch (their worker threads write it:
msmon/engine/backend_thread.py) and calls the listeners (msmon.listener: ``on_record``, ``on_alert``,
``on_status``) on its own thread. Nothing raised by a backend or a listener ever reaches the
training thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from msmon.engine.backend_thread import BackendThread
from msmon.engine.drop_queue import DropQueue
from msmon.foreign import Passed
from msmon.listener import Listener, SessionStatus
from msmon.status import RunStatus
from msmon.util import internal_errors
from msmon.util.jsonfiles import JsonObject

logger = logging.getLogger("msmon")

LISTENER_MAX_FAILURES = 10
MIN_CYCLE_S = 0.2  # at most one dispatch cycle this often: faster records are batched
TICK_S = 1.0  # with no record arriving, a cycle this often (the listeners' status: the disk guard, the views)
DISPATCH_CLOSE_S = 2.0  # the dispatcher's last cycle: hand what is queued to the backends
LISTENER_CLOSE_S = 10.0  # listeners (the health monitor's webhook and command hooks) close beside the backends


class Writer:
    """The dispatcher: drains the callback's queue, feeds backend workers and listeners, ticks."""

    def __init__(
        self,
        backend_threads: Iterable[BackendThread],
        listeners: Iterable[Listener] = (),
        queue_size: int = 1000,
        status: Callable[[], SessionStatus] | None = None,
    ) -> None:
        self.backend_threads = list(backend_threads)
        self.runners = [runner for thread in self.backend_threads for runner in thread.runners]
        self.listeners: list[Listener] = list(listeners)
        self.queue: DropQueue[JsonObject] = DropQueue(queue_size)
        self.records_seen = 0
        self.last_record: JsonObject | None = None
        self._status = status
        self._alerts: deque[JsonObject] = deque()
        self._listener_failures: dict[int, int] = {}
        self._closing = False
        self._closed = threading.Event()  # ends a batching pause at once
        self._thread = threading.Thread(target=self._run, name="msmon-writer", daemon=True)

    def start(self) -> None:
        for thread in self.backend_threads:
            thread.start()
        self._thread.start()

    def put(self, record: JsonObject) -> None:
        """Training thread: hand over one record (never blocks)."""
        self.queue.put(record)

    def add_listener(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def emit_alert(self, alert: JsonObject) -> None:
        """Any thread: the backends show the alert; listeners get ``on_alert`` on the writer thread."""
        for runner in self.runners:
            runner.put(("alert", alert))
        self._alerts.append(alert)
        self.queue.wake()

    def close(self, status: RunStatus, budget_cap_s: float | None = None) -> list[str]:
        """Hand everything queued to the backends, then close them all at once, each within its own budget
        (``Backend.close_budget_s``; ``budget_cap_s`` shortens every budget), while the listeners close on
        their own thread with their own budget: a slow webhook or tracking server costs the JSONL file nothing.
        Returns the names of the backends that missed their budget."""
        cap = budget_cap_s if budget_cap_s is not None else float("inf")
        started = time.monotonic()
        self._closing = True
        self._closed.set()
        self.queue.wake()
        self._thread.join(min(DISPATCH_CLOSE_S, cap))
        for runner in self.runners:
            runner.close(status)
        closer = threading.Thread(target=self._close_listeners, name="msmon-close-listeners", daemon=True)
        closer.start()
        late = []
        for runner in self.runners:
            budget = min(runner.backend.close_budget_s, cap)
            if not runner.join(max(0.0, started + budget - time.monotonic())):
                late.append(runner.backend.name)
                logger.warning(
                    "msmon: backend '%s' did not finish closing within %.0f s; its last records may be missing",
                    runner.backend.name, budget,
                )
        closer.join(max(0.0, started + min(LISTENER_CLOSE_S, cap) - time.monotonic()))
        return late

    def _close_listeners(self) -> None:
        for listener in self.listeners:
            self._listener_call(listener, "close")

    def _run(self) -> None:
        next_cycle = 0.0
        while True:
            self.queue.wait(TICK_S)
            early = next_cycle - time.monotonic()
            if early > 0:
                self._closed.wait(early)  # what arrives meanwhile joins this cycle's batch
            next_cycle = time.monotonic() + MIN_CYCLE_S
            closing = self._closing
            records = self.queue.drain()
            if records:
                items = [("record", record) for record in records]
                for runner in self.runners:
                    runner.put_many(items)
                for record in records:
                    self._dispatch(record)
            while self._alerts:
                alert = self._alerts.popleft()
                for listener in self.listeners:
                    self._listener_call(listener, "on_alert", alert)
            if self._status is not None:
                status = self._status()
                for listener in self.listeners:
                    self._listener_call(listener, "on_status", status)
            if closing:
                return

    def _dispatch(self, record: JsonObject) -> None:
        self.records_seen += 1
        self.last_record = record
        for listener in self.listeners:
            self._listener_call(listener, "on_record", record)

    def _listener_call(self, listener: Listener, method: str, *args: Passed) -> None:
        key = id(listener)
        failures = self._listener_failures.get(key, 0)
        if failures >= LISTENER_MAX_FAILURES:
            return
        try:
            getattr(listener, method)(*args)
        except Exception as exc:
            internal_errors.report(f"listener {type(listener).__name__}.{method}", exc)
            self._listener_failures[key] = failures + 1
        else:
            self._listener_failures[key] = 0
