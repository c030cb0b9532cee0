"""A bounded FIFO that drops its oldest item when full, counts the drops, and never blocks the producer."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class DropQueue(Generic[T]):
    """A bounded FIFO that drops its oldest item when full and counts the drops."""

    def __init__(
        self, maxsize: int, ready: threading.Event | None = None, counted: Callable[[T], bool] | None = None,
    ) -> None:
        """``ready``: the event a put or ``wake`` sets (several queues read by one thread share one); ``counted``:
        which dropped items ``dropped`` counts (None: all)."""
        self.maxsize = max(1, maxsize)
        self.dropped = 0
        self._counted = counted
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._ready = ready or threading.Event()

    def put(self, item: T) -> None:
        self.put_many((item,))

    def put_many(self, items: Sequence[T]) -> None:
        """Append several items under one lock and one wake-up."""
        with self._lock:
            for item in items:
                if len(self._items) >= self.maxsize:
                    self._drop(self._items.popleft())
                self._items.append(item)
        self._ready.set()

    def put_front(self, items: list[T]) -> None:
        """Put items back at the head (a failed batch to retry), keeping the bound."""
        with self._lock:
            for item in reversed(items):
                if len(self._items) >= self.maxsize:
                    self._drop(item)
                    continue
                self._items.appendleft(item)

    def _drop(self, item: T) -> None:
        if self._counted is None or self._counted(item):
            self.dropped += 1

    def drain(self) -> list[T]:
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def wait(self, timeout: float | None) -> None:
        """Sleep until woken (``put``, ``wake``) or ``timeout`` seconds (None: no limit)."""
        self._ready.wait(timeout)
        self._ready.clear()

    def wake(self) -> None:
        self._ready.set()

    def __len__(self) -> int:
        return len(self._items)
