"""``tensorboard`` backend: event files written with tensorboardX (readable by TensorBoard's reader)."""

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
        import tensorboardX  # noqa: F401

    def open(self) -> None:
        from tensorboardX import SummaryWriter

        # tensorboardX warns on every non-finite value; msmon records NaN/Inf on purpose
        logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(logdir=str(self.run_dir), flush_secs=max(1, int(self.flush_interval_s)))

    def write(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            step, walltime = int(record["step"]), record.get("time")
            for key, value in metric_items(record):
                self._writer.add_scalar(key, value, global_step=step, walltime=walltime)

    def write_alert(self, alert: dict[str, Any]) -> None:
        text = f"**{alert.get('severity', 'warning')}** {alert.get('detector', '')}: {alert.get('message', '')}"
        values = alert.get("values")
        if values:
            text += f"\n\n`{json.dumps(values, default=str)}`"
        self._writer.add_text("alerts", text, global_step=int(alert.get("step") or 0), walltime=alert.get("time"))

    def flush(self) -> None:
        self._writer.flush()

    def close(self, status: str) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
