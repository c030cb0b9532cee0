"""``tensorboard`` backend: event files written with tensorboardX (readable by TensorBoard's reader).

One event per record holds every metric (tensorboardX computes its CRCs in pure Python unless the
``crc32c`` package is installed: one event instead of one per metric costs a fraction of the CPU).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from msmon.engine.backends.base import Backend, metric_items


class TensorBoardBackend(Backend):
    """One scalar per metric at the record's step and wall time; alerts as text under ``alerts``."""

    name = "tensorboard"
    heavy = True

    _writer: Any = None

    @property
    def flush_interval_s(self) -> float:
        return self.settings.tensorboard.flush_secs

    def prepare(self) -> None:
        import tensorboardX.summary  # noqa: F401

    def open(self) -> None:
        from tensorboardX import FileWriter

        # tensorboardX warns on every non-finite value; msmon records NaN/Inf on purpose
        logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._writer = FileWriter(str(self.run_dir), flush_secs=max(1, int(self.flush_interval_s)))

    def write(self, records: list[dict[str, Any]]) -> None:
        from tensorboardX.proto.summary_pb2 import Summary

        for record in records:
            values = [Summary.Value(tag=key, simple_value=value) for key, value in metric_items(record)]
            self._writer.add_summary(Summary(value=values), int(record["step"]), record.get("time"))

    def write_alert(self, alert: dict[str, Any]) -> None:
        text = f"**{alert.get('severity', 'warning')}** {alert.get('detector', '')}: {alert.get('message', '')}"
        values = alert.get("values")
        if values:
            text += f"\n\n`{json.dumps(values, default=str)}`"
        from tensorboardX.summary import text as text_summary

        self._writer.add_summary(text_summary("alerts", text), int(alert.get("step") or 0), alert.get("time"))

    def flush(self) -> None:
        self._writer.flush()

    def close(self, status: str) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
