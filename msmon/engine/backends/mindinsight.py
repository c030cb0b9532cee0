"""``mindinsight`` backend: MindSpore summary files in the run directory (one scalar tag per metric).

The file is written with MindSpore's own summary writer (the C++ ``EventWriter`` behind
``SummaryRecord``) on the backend's worker thread. ``SummaryRecord`` itself is not used: it forks a
writer process that busy-polls its queue and keeps a whole CPU core busy for the entire run.
"""

from __future__ import annotations

import time
from typing import Any

from msmon.engine.backends.base import Backend, metric_items


class MindInsightBackend(Backend):
    """``mindinsight start --summary-base-dir <save_dir>/<project>`` lists the run as ``./<run>``."""

    name = "mindinsight"
    heavy = True

    _writer: Any = None

    def prepare(self) -> None:
        import mindspore.train.summary._summary_adapter  # noqa: F401
        import mindspore.train.summary.writer  # noqa: F401

    def open(self) -> None:
        from mindspore.train.summary._summary_adapter import get_event_file_name
        from mindspore.train.summary.writer import SummaryWriter

        self.run_dir.mkdir(parents=True, exist_ok=True)
        name = get_event_file_name("events", "_MS", str(int(time.time())))  # events.out.events.summary.<t>...
        self._writer = SummaryWriter(str(self.run_dir / name))

    def write(self, records: list[dict[str, Any]]) -> None:
        import numpy as np
        from mindspore.train.summary._summary_adapter import package_summary_event

        for record in records:
            # float32 scalars; NaN and +-Inf are stored as such
            values = [{"_type": "Scalar", "name": key, "data": np.asarray(value, np.float32)}
                      for key, value in metric_items(record)]
            event = package_summary_event(values, int(record["step"]), float(record["time"]))
            self._writer.write("summary", event.SerializeToString())

    def flush(self) -> None:
        self._writer.flush()

    def close(self, status: str) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.flush()
            writer.close()
