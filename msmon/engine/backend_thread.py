"""The worker threads that run the backends: one thread for every backend that writes only in the run directory
(file, mindinsight, tensorboard), one thread for each other backend (a tracking server, a registered plug-in).

A thread sleeps until one of its runners' queues wakes it (a record batch, an alert, a suspend, a close: they share
the thread's event) or a runner's next open, write, flush or retry falls due, then gives each runner one pass.
A backend that raises costs its thread-mates nothing (its runner isolates every call); one that blocks delays them,
which for backends writing to one disk changes little: a stalled disk stalls each of them anyway. A network
backend's timeouts and retries never hold up metrics.jsonl. What one thread per backend
cost beside MindSpore's own threads on 2 cores: docs/backends.md, "One thread for the local backends".
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from msmon.engine.backend_runner import BackendRunner
from msmon.engine.backends.base import Backend
from msmon.util import internal_errors

LOCAL_THREAD = "msmon-backends"


class BackendThread:
    """One worker thread and the runners it serves, in the order given (their passes and their closes)."""

    def __init__(self, name: str, backends: Iterable[Backend], queue_size: int) -> None:
        self._ready = threading.Event()
        self.runners = [BackendRunner(backend, queue_size, self._ready) for backend in backends]
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        pending = self.runners
        while pending:
            due = [sleep for sleep in (runner.sleep_s() for runner in pending) if sleep is not None]
            self._ready.wait(min(due) if due else None)
            self._ready.clear()
            pending = [runner for runner in pending if not self._step(runner)]

    @staticmethod
    def _step(runner: BackendRunner) -> bool:
        """The runner's pass; a failure of msmon's own runner code stops that backend alone, never silently."""
        try:
            return runner.step()
        except Exception as exc:
            internal_errors.report(f"the runner of backend '{runner.backend.name}'", exc)
            runner.abandon(exc)
            return True


def backend_threads(backends: Iterable[Backend], queue_size: int) -> list[BackendThread]:
    """The threads for ``backends``: the local ones together first, then one thread for each other backend."""
    backends = list(backends)
    local = [backend for backend in backends if backend.in_run_dir]
    threads = [BackendThread(LOCAL_THREAD, local, queue_size)] if local else []
    return threads + [BackendThread(f"msmon-{b.name}", [b], queue_size) for b in backends if not b.in_run_dir]
