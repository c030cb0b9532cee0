"""``mindinsight`` backend: MindSpore summary files in the run directory (one scalar tag per metric), and the run's
lineage beside them (hyperparameters at the start; loss, results and status at the end: msmon/engine/backends/
lineage.py).

Both files are written with MindSpore's own writers (the C++ ``EventWriter`` behind ``SummaryRecord``) on the
backend's worker thread; the scalars' events are encoded by msmon/engine/backends/summary_event.py.
``SummaryRecord`` itself is not used: it forks a writer process that busy-polls its queue and keeps a whole CPU
core busy for the entire run.
"""

from __future__ import annotations

import time
from pathlib import Path

from msmon.engine.backends.base import Backend, metric_items
from msmon.engine.backends.lineage import (
    TRAIN_LINEAGE_FIELDS,
    LineageFile,
    custom_lineage,
    eval_lineage,
    train_lineage,
)
from msmon.engine.backends.summary_event import scalars_event
from msmon.foreign import BackendClient
from msmon.status import RunStatus
from msmon.util.jsonfiles import JsonObject


class MindInsightBackend(Backend):
    """``mindinsight start --summary-base-dir <save_dir>/<project>`` lists the run as ``./<run>``."""

    name = "mindinsight"
    heavy = True
    in_run_dir = True
    keeps_run_facts = True  # the lineage's hyperparameters at the start, its results and status at the end

    _writer: BackendClient = None
    _lineage: LineageFile | None = None

    def prepare(self) -> None:
        import mindspore.train.lineage_pb2  # noqa: F401
        import mindspore.train.summary._lineage_adapter  # noqa: F401
        import mindspore.train.summary._summary_adapter  # noqa: F401
        import mindspore.train.summary.writer  # noqa: F401

    def open(self) -> None:
        from mindspore.train.summary._summary_adapter import get_event_file_name
        from mindspore.train.summary.writer import SummaryWriter

        self.run_dir.mkdir(parents=True, exist_ok=True)
        stamp = str(int(time.time()))
        if self._lineage is None:
            self._open_lineage(self.run_dir / get_event_file_name("events", "_lineage", stamp))
        name = get_event_file_name("events", "_MS", stamp)  # events.out.events.summary.<t>...
        self._writer = SummaryWriter(str(self.run_dir / name))

    def _open_lineage(self, path: Path) -> None:
        facts = self.facts
        lineage = LineageFile(path)
        custom = {k: v for k, v in facts.hyperparameters.items() if k not in TRAIN_LINEAGE_FIELDS}
        lineage.write("custom_lineage_data", custom_lineage({**custom, "status": RunStatus.RUNNING.value}))
        lineage.write("train_lineage", train_lineage(facts.hyperparameters, None))
        lineage.flush()
        self._lineage = lineage

    def write(self, records: list[JsonObject]) -> None:
        for record in records:  # float32 scalars; NaN and +-Inf are stored as such
            event = scalars_event(int(record["step"]), float(record["time"]), metric_items(record))
            self._writer.write("summary", event)

    def flush(self) -> None:
        self._writer.flush()

    def close(self, status: RunStatus | None) -> None:
        """At the run's end (any final status) the lineage gets its results; a backend stopped before it (the disk
        guard, failures) only closes its files: the lineage still says ``running``."""
        lineage, self._lineage = self._lineage, None
        writer, self._writer = self._writer, None
        try:
            if lineage is not None and status is not None:
                facts = self.facts
                results = facts.results(status)
                final = results.get("final_loss")
                lineage.write("custom_lineage_data", custom_lineage({"status": self.status_name(status)}))
                lineage.write("train_lineage", train_lineage(facts.hyperparameters, final if isinstance(
                    final, float) else None))
                lineage.write("eval_lineage", eval_lineage(results))
        finally:
            if lineage is not None:
                lineage.close()
            if writer is not None:
                writer.flush()
                writer.close()
