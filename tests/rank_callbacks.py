"""Test callbacks that ``msmon run`` loads into every rank through the config, as a user registers one:
``callbacks: [..., {type: SleepOnRank, auto_register: rank_callbacks.SleepOnRank, rank: 1, step: 20}]`` with
``REGISTER_PATH`` = this directory (``OM_MODULES_CACHE`` where mindformers may copy the module). They run
before msmon's own callback (mindformers runs the config's callbacks first).

- ``SleepOnRank``: on one rank, sleeps in ``on_train_step_end`` of one step (until ``release`` exists, at most
  ``seconds``): a rank stuck in Python code while the other ranks wait in the next step's collective.
- ``NanLossOnRank``: on one rank, from one step on, the train step's loss becomes NaN before msmon's callback
  reads it: a rank whose loss diverges while rank 0 stays finite.
- ``DumpOutputs``: writes each step's train-step outputs (as floats) to ``logs/outputs.jsonl`` of the run directory
  (JSON lines, rank 0), the optimizer's parameter names first, with each weight's squared sum and that of its change
  since the previous step (numpy, float64): what msmon must record, read independently of msmon.
- ``SlowHostOnRank``: on one rank, sleeps ``ms`` milliseconds in ``on_train_step_end`` of every step (as a slow
  checkpoint write would): host work outside the train step that holds the other ranks back at the next collective.
- ``LeakHostMemory``: keeps ``mb`` MiB of written bytes at every step end: host memory that grows by exactly that
  much a step.
- ``BusyCoreFrom``: from one step on, every thread of the process shares one core with ``hashers`` threads that hash
  without the GIL (CPU-bound neighbours on the host): the training keeps at most 1 / (hashers + 1) of one core, so the
  drop stays several-fold when a busy machine has already slowed the steps before it.
- ``GrowBlock``: from one step on, makes block ``block``'s gradients grow by ``factor`` per step without changing
  what the network computes: it divides some of the block's weights by the factor and multiplies the weights that
  undo it (the legacy attention's wq/wk and wv/wo and its ffn's w3/w2; the mcore linear_qkv, whose query and key
  are normalised by the qk layer norms, and linear_proj). A weight divided by c has c times its gradient.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from mindspore.train import Callback


def this_rank() -> int:
    return int(os.environ.get("RANK_ID", "0"))


class SleepOnRank(Callback):
    """At the end of ``step`` on ``rank``: wait ``seconds`` or until the file ``release`` exists (``entered``: a file
    written when the wait begins)."""

    def __init__(self, rank: int = 1, step: int = 20, seconds: float = 30.0, release: str = "", entered: str = "",
                 **_: Any) -> None:
        super().__init__()
        self.rank, self.step, self.seconds, self.release, self.entered = rank, step, seconds, release, entered

    def on_train_step_end(self, run_context: Any) -> None:
        if this_rank() != self.rank or run_context.original_args().cur_step_num != self.step:
            return
        if self.entered:
            Path(self.entered).write_text(str(os.getpid()))
        end = time.monotonic() + self.seconds
        while time.monotonic() < end and not (self.release and os.path.exists(self.release)):
            time.sleep(0.1)  # the frame the stall alert names


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


class SlowHostOnRank(Callback):
    def __init__(self, rank: int = 1, ms: float = 40.0, **_: Any) -> None:
        super().__init__()
        self.rank, self.seconds = rank, ms / 1000.0

    def on_train_step_end(self, run_context: Any) -> None:
        if this_rank() == self.rank:
            time.sleep(self.seconds)


class BusyCoreFrom(Callback):
    def __init__(self, step: int = 60, hashers: int = 3, **_: Any) -> None:
        super().__init__()
        self.step, self.hashers, self.started = step, hashers, False

    def on_train_step_end(self, run_context: Any) -> None:
        if self.started or run_context.original_args().cur_step_num < self.step - 1:
            return
        self.started = True
        for _ in range(self.hashers):
            threading.Thread(target=_hash_forever, name="busy-core", daemon=True).start()
        core = min(os.sched_getaffinity(0))
        for task in os.listdir("/proc/self/task"):  # every thread (MindSpore's pools too), the hashing ones included
            try:
                os.sched_setaffinity(int(task), {core})
            except OSError:
                continue  # a thread that has just ended


def _hash_forever() -> None:
    block = os.urandom(1 << 22)
    while True:
        hashlib.sha256(block).digest()  # hashlib lets the GIL go for large inputs: the training's threads run on


class LeakHostMemory(Callback):
    def __init__(self, mb: int = 2, rank: int | None = None, **_: Any) -> None:
        super().__init__()
        self.size, self.rank, self.kept = mb * 2**20, rank, []

    def on_train_step_end(self, run_context: Any) -> None:
        if self.rank is None or this_rank() == self.rank:
            self.kept.append(b"x" * self.size)  # written, so resident


class DumpOutputs(Callback):
    def __init__(self, **_: Any) -> None:
        super().__init__()
        # msmon points mindformers' outputs at <run dir>/logs/output: the file goes beside them
        self.path = Path(os.environ["LOCAL_DEFAULT_PATH"]).parent / "outputs.jsonl"
        self.named = False
        self.previous: list[Any] | None = None

    def on_train_step_end(self, run_context: Any) -> None:
        if this_rank() != 0:
            return
        params = run_context.original_args()
        with self.path.open("a", encoding="utf-8") as handle:
            if not self.named:
                self.named = True
                names = [p.name for p in params.train_network.optimizer.parameters]
                handle.write(json.dumps({"names": names}) + "\n")
            outputs = [_floats(o) for o in params.net_outputs]
            squares, changes = self._weights(params.train_network.optimizer.parameters)
            handle.write(json.dumps({"step": params.cur_step_num, "outputs": outputs, "weight_squares": squares,
                                     "change_squares": changes}) + "\n")

    def _weights(self, weights: Any) -> tuple[list[float], list[float] | None]:
        """Each weight's squared sum and that of its change since the previous step (float64, numpy)."""
        import numpy as np

        now = [w.asnumpy().astype(np.float64) for w in weights]
        squares = [float(np.sum(w * w)) for w in now]
        changes = None if self.previous is None else [
            float(np.sum((w - p) ** 2)) for w, p in zip(now, self.previous, strict=True)]
        self.previous = now  # astype copies: the parameter's own memory moves on
        return squares, changes


def _floats(value: Any) -> list[float]:
    """A Tensor (or a tuple of them) as a flat list of floats."""
    if isinstance(value, (tuple, list)):
        return [x for item in value for x in _floats(item)]
    if isinstance(value, (int, float)):
        return [float(value)]
    return [float(x) for x in value.asnumpy().reshape(-1)]


#: (divided, multiplied) weight pairs of a block whose product the network computes with.
GROW_PAIRS = {
    "legacy": [("attention.wq", "attention.wk"), ("attention.wv", "attention.wo"),
               ("feed_forward.w3", "feed_forward.w2")],
    "mcore": [("self_attention.linear_qkv", "self_attention.linear_proj")],
}
GROW_PREFIX = {"legacy": "model.layers.{block}.", "mcore": "decoder.layers.{block}."}


class GrowBlock(Callback):
    """From ``step`` on (``once``: at that step only), block ``block``'s weight pairs rescaled by ``factor``: the
    network computes the same while the divided weights' gradients grow by ``factor`` a step (or jump once)."""

    def __init__(self, model: str = "legacy", block: int = 1, step: int = 150, factor: float = 1.04,
                 once: bool = False, **_: Any) -> None:
        super().__init__()
        self.model, self.block, self.step, self.factor, self.once = model, block, step, factor, once

    def on_train_step_end(self, run_context: Any) -> None:
        params = run_context.original_args()
        if params.cur_step_num < self.step or (self.once and params.cur_step_num > self.step):
            return
        import mindspore as ms

        weights = {p.name: p for p in params.train_network.optimizer.parameters}
        prefix = GROW_PREFIX[self.model].format(block=self.block)
        for divided, multiplied in GROW_PAIRS[self.model]:
            for name, scale in ((divided, 1 / self.factor), (multiplied, self.factor)):
                weight = weights[f"{prefix}{name}.weight"]
                weight.set_data(ms.Tensor(weight.asnumpy() * scale))
