"""Test callbacks that ``msmon run`` loads into every rank through the config, as a user registers one:
``callbacks: [..., {type: SleepOnRank, auto_register: rank_callbacks.SleepOnRank, rank: 1, step: 20}]`` with
``REGISTER_PATH`` = this directory (``OM_MODULES_CACHE`` where mindformers may copy the module).

- ``SleepOnRank``: on one rank, sleeps in ``on_train_step_end`` of one step: a rank stuck in Python code while
  the other ranks wait in the next step's collective.
- ``NanLossOnRank``: on one rank, from one step on, the train step's loss becomes NaN before msmon's callback
  reads it (mindformers' own monitors run before it): a rank whose loss diverges while rank 0 stays finite.
"""

from __future__ import annotations

import os
import time
from typing import Any

from mindspore.train import Callback


def this_rank() -> int:
    return int(os.environ.get("RANK_ID", "0"))


class SleepOnRank(Callback):
    def __init__(self, rank: int = 1, step: int = 20, seconds: float = 30.0, **_: Any) -> None:
        super().__init__()
        self.rank, self.step, self.seconds = rank, step, seconds

    def on_train_step_end(self, run_context: Any) -> None:
        if this_rank() == self.rank and run_context.original_args().cur_step_num == self.step:
            time.sleep(self.seconds)  # the frame the stall alert names


class NanLossOnRank(Callback):
    def __init__(self, rank: int = 1, step: int = 15, **_: Any) -> None:
        super().__init__()
        self.rank, self.step = rank, step

    def on_train_step_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        if this_rank() != self.rank or cb_params.cur_step_num < self.step:
            return
        import mindspore as ms
        import numpy as np

        outputs = list(cb_params.net_outputs)
        outputs[0] = ms.Tensor(np.float32("nan"))
        cb_params.net_outputs = tuple(outputs)
