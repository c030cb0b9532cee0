"""Where the distributions probe's histograms go, in one directory per rank and window
(``distributions/<from>-<to>/rank_N/``): msmon's own JSON lines file, a TensorBoard event file (histograms, which
TensorBoard lists as the run ``<run>/distributions/<from>-<to>/rank_N``) and a MindSpore summary file (MindInsight's
parameter-distribution page, with that directory as a train job). Tags: ``weights/<group>``, ``updates/<group>``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TextIO

from msmon import layout
from msmon.engine.probe.histograms import Histogram
from msmon.foreign import BackendClient


class DistributionFiles:
    """The three files of one rank's window (opened at the first step written)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lines: TextIO | None = None
        self._board: BackendClient = None
        self._summary: BackendClient = None

    def write(self, step: int, histograms: dict[str, Histogram]) -> None:
        """One logging step's histograms by tag."""
        lines = self._lines if self._lines is not None else self._open()
        now = time.time()
        line = {"step": step, "time": now, "histograms": {tag: h.to_json() for tag, h in histograms.items()}}
        lines.write(json.dumps(line, allow_nan=True) + "\n")
        lines.flush()
        for tag, found in histograms.items():
            if found.counts:
                self._board.add_histogram_raw(tag, found.minimum, found.maximum, sum(found.counts), found.total,
                                              found.squares, list(found.edges[1:]), list(found.counts), step, now)
        self._summary.write("summary", mindinsight_event(step, now, histograms))

    def close(self) -> None:
        for handle in (self._lines, self._board, self._summary):
            if handle is not None:
                handle.close()
        self._lines = self._board = self._summary = None

    def _open(self) -> TextIO:
        """Open the three files; the JSON Lines one returned."""
        from mindspore.train.summary._summary_adapter import get_event_file_name
        from mindspore.train.summary.writer import SummaryWriter as MindSporeWriter
        from tensorboardX import SummaryWriter

        self.directory.mkdir(parents=True, exist_ok=True)
        self._lines = (self.directory / layout.DISTRIBUTIONS_FILE).open("a", encoding="utf-8")
        self._board = SummaryWriter(str(self.directory))
        name = get_event_file_name("events", "_MS", str(int(time.time())))
        self._summary = MindSporeWriter(str(self.directory / name))
        return self._lines


def mindinsight_event(step: int, wall_time: float, histograms: dict[str, Histogram]) -> bytes:
    """A MindSpore summary ``Event`` holding each histogram (``Summary.Value.histogram``: buckets of left, width and
    count; NaN/Inf counts; min, max and sum of the finite values; the count of every value)."""
    from mindspore.train import summary_pb2

    event = summary_pb2.Event(wall_time=wall_time, step=step)
    for tag, found in histograms.items():
        value = event.summary.value.add(tag=tag)
        target = value.histogram
        for left, right, count in zip(found.edges, found.edges[1:], found.counts, strict=False):
            target.buckets.add(left=left, width=right - left, count=count)
        target.nan_count, target.pos_inf_count, target.neg_inf_count = found.nan, found.pos_inf, found.neg_inf
        target.max, target.min, target.sum, target.count = found.maximum, found.minimum, found.total, found.count
    return bytes(event.SerializeToString())
