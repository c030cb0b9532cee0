"""``mindinsight`` backend: MindSpore SummaryRecord files in the run directory (one scalar tag per metric)."""

from __future__ import annotations

from typing import Any

from msmon.engine.backends.base import Backend, metric_items


class MindInsightBackend(Backend):
    """``mindinsight start --summary-base-dir <save_dir>`` lists the run as ``./<project>/<run>``."""

    name = "mindinsight"
    heavy = True

    _summary: Any = None

    def prepare(self) -> None:
        import mindspore.train.summary  # noqa: F401

    def open(self) -> None:
        from mindspore.train.summary import SummaryRecord

        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._summary = SummaryRecord(str(self.run_dir), raise_exception=True)

    def write(self, records: list[dict[str, Any]]) -> None:
        import mindspore
        from mindspore import Tensor

        for record in records:
            for key, value in metric_items(record):
                # float32 scalars; NaN and +-Inf are stored as such (MindInsight shows them as NaN/Infinity)
                self._summary.add_value("scalar", key, Tensor(value, mindspore.float32))
            self._summary.record(int(record["step"]))

    def flush(self) -> None:
        self._summary.flush()

    def close(self, status: str) -> None:
        summary, self._summary = self._summary, None
        if summary is not None:
            summary.close()
