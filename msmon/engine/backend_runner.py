"""One backend's writing: a bounded queue, every call isolated, retries and disabling.

A runner does no work of its own: a worker thread (msmon/engine/backend_thread.py) calls ``step`` when the
runner's queue wakes it or ``sleep_s`` falls due. A backend that raises gets one warning; network backends are
retried with backoff, others are disabled after repeated failures. Nothing raised by a backend ever reaches the
training thread. What became of every record the backend was handed (written, dropped from its full queue, lost)
is counted in one place, its ``BackendStats``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from msmon.engine.backends.base import Backend, PartialWrite
from msmon.engine.drop_queue import DropQueue
from msmon.errors import describe
from msmon.foreign import Passed
from msmon.status import RunStatus
from msmon.util import internal_errors
from msmon.util.jsonfiles import JsonObject

logger = logging.getLogger("msmon")

MAX_FAILURES = 3  # consecutive failures before a local backend is disabled
MAX_BACKOFF_S = 30.0


Item = tuple[str, JsonObject]  # ("record", record) or ("alert", alert)


def is_record(item: Item) -> bool:
    """An alert lost or dropped is not a record lost."""
    return item[0] == "record"


def records_in(items: Iterable[Item]) -> int:
    return sum(1 for item in items if is_record(item))


@dataclass
class BackendStats:
    """What happened to one backend during the run: its status and the ledger of its records.

    ``written``: stored by the backend; ``dropped``: pushed out of its full queue (the queue counts them, taken at
    the close); ``lost``: given up after a failure, on disable or suspension, arriving once it was off, still queued
    when it missed its close budget, or lost by the backend after writing them. ``written`` and ``lost`` change only
    through ``wrote`` and ``lose`` (from the dispatcher and the worker thread alike).
    """

    name: str
    status: str = "pending"  # pending, ok, failing, retrying (network), disabled, suspended, failed_to_close
    written: int = 0
    dropped: int = 0
    lost: int = 0
    failures: int = 0
    reason: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def wrote(self, count: int) -> None:
        with self._lock:
            self.written += count

    def lose(self, items: Iterable[Item] = (), records: int = 0) -> None:
        """Count the records among ``items``, plus ``records``, lost."""
        with self._lock:
            self.lost += records_in(items) + records

    def summary(self) -> JsonObject:
        """The published fields (run.json's ``backends``)."""
        return {"name": self.name, "status": self.status, "written": self.written, "dropped": self.dropped,
                "lost": self.lost, "failures": self.failures, "reason": self.reason}


class BackendRunner:
    """One backend with its own bounded queue, run by a worker thread; every call isolated."""

    def __init__(self, backend: Backend, queue_size: int, ready: threading.Event) -> None:
        """``ready``: the event of the worker thread that runs this backend (set by a put, a suspend, a close)."""
        self.backend = backend
        self.stats = BackendStats(backend.name)
        self._queue: DropQueue[Item] = DropQueue(queue_size, ready, counted=is_record)
        self._closed = threading.Event()
        self._flush_interval = backend.flush_interval_s
        self._opened = False
        self._warned = False
        self._consecutive = 0
        self._retry_at = 0.0
        self._next_write = 0.0
        self._write_interval = backend.write_interval_s
        self._closing: RunStatus | None = None
        self._suspend: str | None = None
        self._dirty = False
        self._last_flush = time.monotonic()
        self.on_failure: Callable[[BackendRunner, BaseException], None] | None = None

    @property
    def dropped(self) -> int:
        """Records pushed out of this backend's full queue so far."""
        return self._queue.dropped

    @property
    def active(self) -> bool:
        return self.stats.status not in ("disabled", "suspended")

    def put(self, item: Item) -> None:
        """Queue ("record", record) or ("alert", alert)."""
        self.put_many([item])

    def put_many(self, items: list[Item]) -> None:
        """Queue items; once the backend is off (disabled, suspended) its records are counted lost."""
        if not self.active:
            self.stats.lose(items)
        elif items:
            self._queue.put_many(items)

    def suspend(self, reason: str) -> None:
        """Stop writing (disk guard): what was written is flushed and closed, later records ignored."""
        self._suspend = reason
        self._queue.wake()

    def close(self, status: RunStatus) -> None:
        """Ask the worker to write what is queued, flush and close (see ``join``)."""
        self._closing = status
        self._queue.wake()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the backend to close; one still closing then is ``failed_to_close``."""
        closed = self._closed.wait(timeout)
        if not closed:
            self.stats.status = "failed_to_close"
            self.stats.lose(self._queue.drain())
        return closed

    # -- worker thread ------------------------------------------------------------------------
    def step(self) -> bool:
        """One pass: stop writing when suspended, write and flush what is due; after ``close`` the last pass, which
        writes what is queued and closes the backend. True once the backend is closed (no more passes)."""
        if self._suspend is not None and self.active:
            self._stop_writing("suspended", self._suspend)
        closing = self._closing
        now = time.monotonic()
        if self.active and (closing is not None or (now >= self._retry_at and now >= self._next_write)):
            self._cycle(final=closing is not None)
        if closing is None:
            return False
        if self._opened:
            self._call("close", closing)
        self.stats.lose(self._queue.drain(), records=self.backend.records_lost)
        self.stats.dropped = self.dropped
        self._closed.set()
        return True

    def abandon(self, exc: BaseException) -> None:
        """msmon's own code failed in a pass: write nothing more, count what is queued lost, let ``join`` return."""
        self.stats.status = "disabled"
        self.stats.reason = f"msmon's own error: {describe(exc)}"
        self.stats.lose(self._queue.drain())
        self._closed.set()

    def sleep_s(self) -> float | None:
        """How long the worker sleeps unless woken (a record, an alert, suspend, close): until the next open, write
        or flush falls due, never before a retry's backoff or the write interval allows it; None: until woken."""
        if not self.active:
            return None
        due = [max(self._retry_at, self._next_write)] if not self._opened or len(self._queue) else []
        if self._dirty:
            due.append(max(self._retry_at, self._next_write, self._last_flush + self._flush_interval))
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _cycle(self, final: bool) -> None:
        if not self._opened:
            if self._call("open") is not None:
                return
            self._opened = True
            self.stats.status = "ok"
        items = self._queue.drain()
        while items:  # runs of records are written as one batch, alerts in their place between them
            kind = items[0][0]
            length = next((i for i, (other, _) in enumerate(items) if other != kind), len(items))
            run, items = items[:length], items[length:]
            if kind != "record":
                for _, alert in run:
                    self._call("write_alert", alert)
            elif not self._write(run, items):
                return
        if self._dirty and (final or time.monotonic() - self._last_flush >= self._flush_interval):
            if self._call("flush") is None:
                self._dirty = False
                self._last_flush = time.monotonic()

    def _write(self, run: list[Item], rest: list[Item]) -> bool:
        """Write the records of ``run``; on failure keep what can be retried and count the rest lost."""
        batch = [payload for _, payload in run]
        self._next_write = time.monotonic() + self._write_interval
        failure = self._call("write", batch)
        if failure is None:
            self._stored(batch)
            return True
        done = failure.written if isinstance(failure, PartialWrite) else 0  # it stored the first records
        self._stored(batch[:done])
        run = run[done:]
        if self.backend.network and self.active:
            self._queue.put_front([*run, *rest])  # retried after the backoff
        elif self.active:
            self.stats.lose(run)
            self._queue.put_front(rest)
        else:
            self.stats.lose([*run, *rest])
        return False

    def _stored(self, records: list[JsonObject]) -> None:
        """Records the backend stored: counted, and followed by the run's facts where it keeps them."""
        if not records:
            return
        self.stats.wrote(len(records))
        self._dirty = True
        if self.backend.keeps_run_facts:
            self.backend.facts.add(records)

    def prepare(self) -> None:
        """The backend's ``prepare`` on the thread that starts the session; a failure counts as the backend's."""
        self._call("prepare")

    def _call(self, method: str, *args: Passed) -> Exception | None:
        """Call the backend's ``method``, isolated; what it raised, or None."""
        try:
            getattr(self.backend, method)(*args)
        except Exception as exc:  # isolation is the point
            self._failed(method, exc)
            return exc
        if method in ("open", "write"):  # only storing records again proves a recovery (an fsync may still pass)
            if self._consecutive and self.stats.status in ("retrying", "failing"):
                logger.info("msmon: backend '%s' works again", self.backend.name)
                self.stats.status = "ok"
            self._consecutive = 0
        return None

    def _failed(self, method: str, exc: BaseException) -> None:
        name = self.backend.name
        reason = f"{method} failed: {describe(exc)}"
        self.stats.failures += 1
        self.stats.reason = reason
        self._consecutive += 1
        if self.on_failure is not None:
            try:
                self.on_failure(self, exc)
            except Exception as hook_exc:
                internal_errors.report(f"the failure hook of backend '{name}'", hook_exc)
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
        self.stats.lose(self._queue.drain())
        if self._opened:
            self._opened = False
            self._call("close", None)  # the run goes on: the backend declares no end
        if status == "disabled":
            logger.info("msmon: backend '%s' is disabled for the rest of the run (%s)", self.backend.name, reason)
