"""The training of test_engine_trainer.py, in a process of its own (MindSpore and mindformers keep per-process
state, the CPU affinity among it, that a second training in one process refuses): the real mindformers Trainer
on one quickstart, monitored by every backend, one alert emitted at step 20.

    python engine_trainer_driver.py CONFIG RESULT.json

RESULT.json gets what the test reads back: the records the listeners saw, each step's outputs, msmon's log
lines, the session summary and this process's pid.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from engine_support import Capture
from helpers_training import quickstart_parts

from msmon.config.coerce import build
from msmon.config.schema import MonitorSettings
from msmon.engine.session import MonitorSession

ALERT = {"time": 0.0, "step": 20, "detector": "loss_spike", "severity": "warning", "message": "loss spiked",
         "values": {"loss": 9.5}, "action": "alert"}


class LogLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelno, record.getMessage()))


def main(config: Path, result: Path) -> None:
    handler = LogLines()
    logger = logging.getLogger("msmon")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    training, monitor = quickstart_parts(config)
    settings, findings = build(MonitorSettings, monitor, "monitor_config")
    assert not findings, findings
    from mindspore.train import Callback

    outputs: dict[int, list[Any]] = {}
    capture = Capture()
    session = MonitorSession(settings, settings.run_dir(), config=training, listeners=[capture]).start()

    class Outputs(Callback):
        def on_train_step_end(self, run_context: Any) -> None:
            params = run_context.original_args()
            outputs[params.cur_step_num] = [o.asnumpy().item() for o in params.net_outputs]
            if params.cur_step_num == ALERT["step"]:
                session.emit_alert(dict(ALERT, time=time.time()))

    from msmon.runner.trainer import train

    train(training, [session.callback(), Outputs()], config.parent / "logs")
    summary = session.close("completed")
    result.write_text(json.dumps({"records": capture.records, "outputs": outputs, "logs": handler.lines,
                                  "summary": dataclasses.asdict(summary), "pid": os.getpid()},
                                 allow_nan=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
