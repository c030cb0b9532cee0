"""Child process for the health end-to-end stall test: the real quickstart Trainer, monitored, with a test
callback that blocks training at one step until the watchdog's alert is in alerts.jsonl.

    python health_stall_driver.py WORKDIR STEPS BLOCK_AT [LOG_INTERVAL]

Prints one JSON line: the step it blocked at, when that step ended (monotonic), how long until the
alert appeared while blocked (null if it never did), and the session/health summary.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_training import quickstart_parts, write_quickstart_config  # noqa: E402

from msmon.config.coerce import build  # noqa: E402
from msmon.config.schema import MINDFORMERS_MONITOR_KEYS, MonitorSettings  # noqa: E402

MAX_BLOCK_S = 45.0


def main() -> int:
    work, steps, block_at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    interval = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    os.chdir(work)
    # floor 10 s: a busy CI machine (two test workers on two cores) has stalled a real step for over 3 s
    health = {"stall": {"floor_s": 10.0, "poll_s": 0.1}}
    path = write_quickstart_config(work, steps=steps, log_interval=interval, monitor_type=["file"], health=health)
    training, ours = quickstart_parts(path)
    settings, findings = build(MonitorSettings, ours, "monitor_config", ignore=MINDFORMERS_MONITOR_KEYS)
    assert not findings, findings
    from mindspore.train import Callback

    from msmon.engine.session import MonitorSession
    from msmon.health import attach
    from msmon.runner.trainer import train

    run_dir = settings.run_dir()
    alerts = run_dir / "alerts.jsonl"
    result: dict = {"block_at": block_at, "alert_after_s": None}

    class Blocker(Callback):
        """Blocks on_train_step_end of step ``block_at`` until the stall alert appears (the hang)."""

        def on_train_step_end(self, run_context):
            if run_context.original_args().cur_step_num != block_at:
                return
            started = time.monotonic()
            result["step_end_wall"] = time.time()
            while time.monotonic() - started < MAX_BLOCK_S:
                if alerts.exists() and '"stall"' in alerts.read_text(encoding="utf-8"):
                    result["alert_after_s"] = time.monotonic() - started
                    return
                time.sleep(0.05)

    session = MonitorSession(settings, run_dir, config=training).start()
    handle = attach(session, settings, run_dir, training)
    train(training, [session.callback(), Blocker()], work / "logs")
    summary = session.close("completed")
    handle.close()
    result.update(alert_count=handle.alert_count, last_step=summary.last_step, run_dir=str(run_dir))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
