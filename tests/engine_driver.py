"""Child process for the engine fault tests: train a tiny MindSpore model monitored by msmon.

    python engine_driver.py SPEC.json     (SPEC: save_dir, monitor_type, steps, ... see below)

Events at given steps (``"events": {"50": ["kill_group", PGID]}``): ``stop`` calls
``session.request_stop(reason)``, ``kill_group`` SIGKILLs a process group (the MLflow server),
``immutable`` runs ``chattr -R +i`` on a directory (read-only, even for root). ``no_close`` leaves
closing the session to its atexit hook. Prints the SessionSummary as JSON on the last stdout line
and writes what the callback saw to ``seen.json`` (the network's losses to ``losses.json``) in the save_dir.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import shared_session  # noqa: E402
from engine_support import FAKES, BlockingBackend, Capture, settings, tiny_train  # noqa: E402

from msmon.anomaly import StopRequest  # noqa: E402
from msmon.engine.backends import register_backend  # noqa: E402
from msmon.engine.session import MonitorSession  # noqa: E402


def event(action: list, session: MonitorSession) -> None:
    if action[0] == "stop":
        session.request_stop(StopRequest(action[1]))
    elif action[0] == "kill_group":
        os.killpg(int(action[1]), signal.SIGKILL)
    elif action[0] == "immutable":
        subprocess.run(["chattr", "-R", "+i", action[1]], check=True)


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    shared_session.count_training("mindspore", "tests/engine_driver.py")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s", stream=sys.stderr)
    for cls in FAKES:
        register_backend(cls)
    BlockingBackend.delay = spec.get("blocking_delay", 2.0)
    interval = spec.get("log_interval", 5)
    metrics = spec.get("track_metrics", ["loss", "learning_rate", "throughput", "global_step", "step_time_ms"])
    s = settings(Path(spec["save_dir"]), monitor_type=spec["monitor_type"], log_interval=interval,
                 track_metrics=metrics, verbose=spec.get("verbose", False))
    s = replace(s, mlflow=replace(s.mlflow, tracking_uri=spec.get("mlflow_uri"), timeout_s=3.0))
    capture = Capture()
    if spec.get("no_close"):  # registered first, so it runs after the session's own atexit close
        import atexit

        atexit.register(lambda: (Path(spec["save_dir"]) / "seen.json").write_text(json.dumps(capture.records)))
    session = MonitorSession(s, s.run_dir(), config={"train": {"steps": spec["steps"]}}, listeners=[capture]).start()
    events = spec.get("events", {}).items()
    hooks = {int(step): (lambda action=action: event(action, session)) for step, action in events}
    from mindspore.train import Callback

    losses: dict[int, float] = {}

    class Losses(Callback):
        def on_train_step_end(self, run_context):
            params = run_context.original_args()
            if params.cur_step_num % interval == 0:
                losses[params.cur_step_num] = params.net_outputs.asnumpy().item()

    tiny_train([session.callback(), Losses()], steps=spec["steps"], step_sleep_s=spec.get("sleep", 0.0), stop_at=hooks)
    (Path(spec["save_dir"]) / "losses.json").write_text(json.dumps(losses))
    if spec.get("no_close"):  # the session's atexit hook must flush and close
        return 0
    summary = session.close("completed")
    (Path(spec["save_dir"]) / "seen.json").write_text(json.dumps(capture.records))
    print(json.dumps(asdict(summary), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
