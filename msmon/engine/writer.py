"""The off-path writer: a dispatcher thread fans records out to one isolated worker per backend.

Queues are bounded and drop the oldest item when full (counted). A backend that raises gets one
warning; network backends are retried with backoff, others are disabled after repeated failures.
Nothing raised by a backend or a listener ever reaches the training thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from msmon.engine.backends.base import Backend

logger = logging.getLogger("msmon")

MAX_FAILURES = 3  # consecutive failures before a local backend is disabled
MAX_BACKOFF_S = 30.0
LISTENER_MAX_FAILURES = 10
POLL_S = 0.2  # the dispatcher polls the callback's queue this often


def describe(exc: BaseException) -> str:
    """A one-line reason for an exception."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class DropQueue:
    """A bounded FIFO that drops its oldest item when full and counts the drops."""

    def __init__(self, maxsize: int, notify: bool = True) -> None:
        self.maxsize = max(1, maxsize)
        self.notify = notify  # False: the consumer polls, ``put`` never wakes a thread
        self.dropped = 0
        self._items: deque[Any] = deque()
        self._lock = threading.Lock()
        self._ready = threading.Event()

    def put(self, item: Any) -> None:
        self.put_many((item,))

    def put_many(self, items: Sequence[Any]) -> None:
        """Append several items under one lock and one wake-up."""
        with self._lock:
            for item in items:
                if len(self._items) >= self.maxsize:
                    self._items.popleft()
                    self.dropped += 1
                self._items.append(item)
        if self.notify:
            self._ready.set()

    def put_front(self, items: list[Any]) -> None:
        """Put items back at the head (a failed batch to retry), keeping the bound."""
        with self._lock:
            for item in reversed(items):
                if len(self._items) >= self.maxsize:
                    self.dropped += 1
                    continue
                self._items.appendleft(item)

    def drain(self) -> list[Any]:
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def clear(self) -> int:
        """Drop everything queued; return how many items were dropped."""
        with self._lock:
            count = len(self._items)
            self._items.clear()
        return count

    def wait(self, timeout: float) -> None:
        self._ready.wait(timeout)
        self._ready.clear()

    def wake(self) -> None:
        self._ready.set()

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class BackendStats:
    """What happened to one backend during the run."""

    name: str
    status: str = "pending"  # pending, ok, failing, retrying (network), disabled, suspended, failed_to_close
    written: int = 0
    dropped: int = 0  # records pushed out of its full queue
    lost: int = 0  # records given up after a failure, on disable or on suspension
    failures: int = 0
    reason: str | None = None


class BackendRunner:
    """One backend on its own thread with its own bounded queue; every call isolated."""

    def __init__(self, backend: Backend, queue_size: int) -> None:
        self.backend = backend
        self.stats = BackendStats(backend.name)
        self._queue = DropQueue(queue_size)
        self._flush_interval = backend.flush_interval_s
        self._opened = False
        self._warned = False
        self._consecutive = 0
        self._retry_at = 0.0
        self._next_write = 0.0
        self._write_interval = backend.write_interval_s
        self._closing: str | None = None
        self._suspend: str | None = None
        self._dirty = False
        self._last_flush = time.monotonic()
        self.on_failure: Callable[[BackendRunner, BaseException], None] | None = None
        self._thread = threading.Thread(target=self._run, name=f"msmon-{backend.name}", daemon=True)

    @property
    def active(self) -> bool:
        return self.stats.status not in ("disabled", "suspended")

    def start(self) -> None:
        self._thread.start()

    def put(self, item: tuple[str, dict[str, Any]]) -> None:
        """Queue ("record", record) or ("alert", alert); ignored once the backend is off."""
        if self.active:
            self._queue.put(item)

    def put_many(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        if self.active and items:
            self._queue.put_many(items)

    def suspend(self, reason: str) -> None:
        """Stop writing (disk guard): what was written is flushed and closed, later records ignored."""
        self._suspend = reason
        self._queue.wake()

    def close(self, status: str) -> None:
        """Ask the worker to write what is queued, flush and close (see ``join``)."""
        self._closing = status
        self._queue.wake()

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.stats.status = "failed_to_close"
            self.stats.lost += len(self._queue)
            return False
        return True

    # -- worker thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._queue.wait(0.5)
            if self._suspend is not None and self.active:
                self._stop_writing("suspended", self._suspend)
            closing = self._closing is not None
            now = time.monotonic()
            if self.active and (closing or (now >= self._retry_at and now >= self._next_write)):
                self._cycle(final=closing)
            if closing:
                break
        if self._opened:
            self._call("close", self._closing or "completed")
        self.stats.lost += sum(1 for kind, _ in self._queue.drain() if kind == "record")
        self.stats.dropped = self._queue.dropped

    def _cycle(self, final: bool) -> None:
        if not self._opened:
            if not self._call("open"):
                return
            self._opened = True
            self.stats.status = "ok"
        items = self._queue.drain()
        start = 0
        for index, (kind, payload) in enumerate([*items, ("end", None)]):
            if kind == "record":
                continue
            if index > start and not self._write(items[start:index], items[index:]):
                return
            if kind == "alert":
                self._call("write_alert", payload)
            start = index + 1
        if self._dirty and (final or time.monotonic() - self._last_flush >= self._flush_interval):
            if self._call("flush"):
                self._dirty = False
                self._last_flush = time.monotonic()

    def _write(self, chunk: list[Any], rest: list[Any]) -> bool:
        """Write the records of ``chunk``; on failure keep what can be retried and count the rest lost."""
        batch = [payload for _, payload in chunk]
        self._next_write = time.monotonic() + self._write_interval
        if self._call("write", batch):
            self.stats.written += len(batch)
            self._dirty = True
            return True
        if self.backend.network and self.active:
            self._queue.put_front([*chunk, *rest])  # retried after the backoff
            return False
        self.stats.lost += len(batch)
        if self.active:
            self._queue.put_front(rest)
        else:
            self.stats.lost += sum(1 for kind, _ in rest if kind == "record")
        return False

    def _call(self, method: str, *args: Any) -> bool:
        try:
            getattr(self.backend, method)(*args)
        except Exception as exc:  # isolation is the point
            self._failed(method, exc)
            return False
        if self._consecutive and self.stats.status in ("retrying", "failing"):
            logger.info("msmon: backend '%s' works again", self.backend.name)
            self.stats.status = "ok"
        self._consecutive = 0
        return True

    def _failed(self, method: str, exc: BaseException) -> None:
        name = self.backend.name
        reason = f"{method} failed: {describe(exc)}"
        self.stats.failures += 1
        self.stats.reason = reason
        self._consecutive += 1
        if self.on_failure is not None:
            try:
                self.on_failure(self, exc)
            except Exception:
                logger.debug("msmon: failure hook of '%s' failed", name)
        if not self._warned:
            self._warned = True
            then = (
                "retrying with backoff" if self.backend.network else f"disabled after {MAX_FAILURES} failures in a row"
            )
            logger.warning("msmon: backend '%s' %s (%s; training continues)", name, reason, then)
        else:
            logger.debug("msmon: backend '%s' %s", name, reason)
        if method == "close":
            return
        if self.backend.network:
            self.stats.status = "retrying"
            self._retry_at = time.monotonic() + min(MAX_BACKOFF_S, 2.0 ** (self._consecutive - 1))
        elif self._consecutive >= MAX_FAILURES:
            self._stop_writing("disabled", reason)
        else:
            self.stats.status = "failing"
            self._retry_at = time.monotonic() + 0.5 * self._consecutive

    def _stop_writing(self, status: str, reason: str) -> None:
        self.stats.status = status
        self.stats.reason = reason
        self.stats.lost += self._queue.clear()
        if self._opened:
            self._opened = False
            self._call("close", status)
        if status == "disabled":
            logger.info("msmon: backend '%s' is disabled for the rest of the run (%s)", self.backend.name, reason)


class Writer:
    """The dispatcher: drains the callback's queue, feeds backend workers and listeners, ticks."""

    def __init__(
        self,
        runners: Iterable[BackendRunner],
        listeners: Iterable[Any] = (),
        queue_size: int = 1000,
        tick: Callable[[], None] | None = None,
        on_record: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.runners = list(runners)
        self.listeners: list[Any] = list(listeners)
        self.queue = DropQueue(queue_size, notify=False)  # polled: ``put`` on the training thread wakes nobody
        self.records_seen = 0
        self.last_record: dict[str, Any] | None = None
        self._tick = tick
        self._on_record = on_record
        self._listener_failures: dict[int, int] = {}
        self._listener_warned: set[int] = set()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="msmon-writer", daemon=True)

    def start(self) -> None:
        for runner in self.runners:
            runner.start()
        self._thread.start()

    def put(self, record: dict[str, Any]) -> None:
        """Training thread: hand over one record (never blocks)."""
        self.queue.put(record)

    def add_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def emit_alert(self, alert: dict[str, Any]) -> None:
        for runner in self.runners:
            runner.put(("alert", alert))

    def close(self, status: str, timeout: float) -> None:
        """Deliver everything queued, then let every backend flush and close within ``timeout``."""
        self._closing = True
        self.queue.wake()
        deadline = time.monotonic() + timeout
        self._thread.join(max(0.0, deadline - time.monotonic()))
        for listener in self.listeners:  # first: a listener may still emit alerts while closing
            self._listener_call(listener, "close")
        for runner in self.runners:
            runner.close(status)
        for runner in self.runners:
            if not runner.join(max(0.0, deadline - time.monotonic())):
                logger.warning(
                    "msmon: backend '%s' did not finish closing within %.0f s; its last records may be missing",
                    runner.backend.name, timeout,
                )

    def _run(self) -> None:
        while True:
            self.queue.wait(POLL_S)
            closing = self._closing
            records = self.queue.drain()
            if records:
                items = [("record", record) for record in records]
                for runner in self.runners:
                    runner.put_many(items)
                for record in records:
                    self._dispatch(record)
            self._safe_tick()
            if closing:
                return

    def _dispatch(self, record: dict[str, Any]) -> None:
        self.records_seen += 1
        self.last_record = record
        if self._on_record is not None:
            try:
                self._on_record(record)
            except Exception as exc:  # a monitor never breaks training
                logger.debug("msmon: record hook failed: %s", describe(exc))
        for listener in self.listeners:
            self._listener_call(listener, "on_record", record)

    def _listener_call(self, listener: Any, method: str, *args: Any) -> None:
        key = id(listener)
        failures = self._listener_failures.get(key, 0)
        if failures >= LISTENER_MAX_FAILURES:
            return
        try:
            getattr(listener, method)(*args)
        except Exception as exc:
            if key not in self._listener_warned:
                self._listener_warned.add(key)
                logger.warning(
                    "msmon: listener %s %s failed: %s (training continues)",
                    type(listener).__name__, method, describe(exc),
                )
            self._listener_failures[key] = failures + 1
        else:
            self._listener_failures[key] = 0

    def _safe_tick(self) -> None:
        if self._tick is None:
            return
        try:
            self._tick()
        except Exception as exc:
            logger.debug("msmon: writer tick failed: %s", describe(exc))
