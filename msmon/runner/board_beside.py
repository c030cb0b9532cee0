"""The board beside the training of ``msmon run``: started on a thread, checked while training, stopped at the end."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from msmon.ops.board import BoardHandle, start_board
from msmon.runner.plan import RunPlan

logger = logging.getLogger("msmon")

BOARD_JOIN_TIMEOUT_S = 90.0


class BoardBeside:
    """The board beside the training, started on a thread so training does not wait for it."""

    def __init__(self, plan: RunPlan, say: Callable[[str], None]) -> None:
        self.plan, self.say = plan, say
        self.handle: BoardHandle | None = None
        self._died = False
        self.thread = threading.Thread(target=self._start, name="msmon-board", daemon=True)

    def start(self) -> None:
        if self.plan.board_backend is None:
            self.say("board: not started (monitor_type has neither mindinsight nor tensorboard)")
            return
        self.thread.start()

    def _start(self) -> None:
        try:
            self.handle = start_board(
                self.plan.board_dir(), port=self.plan.request.port, backend=self.plan.board_backend or "mindinsight",
                detach=self.plan.request.keep_board,
            )
        except Exception as exc:  # the board never takes training down
            logger.warning("msmon: board not started: %s", exc)
            return
        self.say(f"board: {self.handle.url}  ({self.plan.board_backend}, pid {self.handle.pid})")

    def check(self) -> None:
        """Warn once when the board died during the run (the training goes on)."""
        if self.handle is not None and not self._died and not self.handle.alive():
            self._died = True
            logger.warning("msmon: the board exited during the run (see its log: %s); training goes on",
                           self.handle.record.log)

    def stop(self) -> None:
        if self.thread.is_alive():
            self.thread.join(BOARD_JOIN_TIMEOUT_S)
        if self.handle is None:
            return
        if self.plan.request.keep_board:
            self.say(f"board kept running: {self.handle.url} (stop it with: msmon board stop)")
            return
        try:
            self.handle.stop()
        except Exception as exc:
            logger.warning("msmon: could not stop the board (pid %s): %s", self.handle.pid, exc)
