"""Does the live view slow training? Median step time of the real tiny Trainer with and without the panel.

    .venv/bin/python bench/bench_live_view.py [--steps 600] [--block 20] [--runs 2]

Each run is a child process training the CPU quickstart (`msmon run quickstart`) through msmon's
monitor session (file backend, log_interval 1: the view gets every step, its worst case) with its stdout
and stderr on a real pseudo-terminal drained by this process. The run alternates blocks of ``--block``
steps without and with the live panel as `msmon run` shows it (the console captured, the panel opened), closed at the
block's end. Alternating about once a second makes other load on a shared machine hit both arms alike,
which comparing separate processes cannot do here. Every step end is timed by a small callback. The first
20 steps (graph compile) are skipped, and so are the 2 steps after each switch, where the panel is started
or stopped on the training thread (a cost of this benchmark's toggling, not of `msmon run`, which starts
the panel once before training). The script prints the pooled median step time of each arm, the median of
the ratios of adjacent block pairs (the headline: each pair shares the machine's load of that moment), and
the CPU time of the view's own thread. Target: paired ratio <= 1.01.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
SKIP = 20
SETTLE = 2


def thread_cpu_seconds(native_id: int | None) -> float:
    """CPU seconds one thread of this process has run (Linux schedstat, nanoseconds); 0 when it is gone."""
    try:
        return int(Path(f"/proc/self/task/{native_id}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class Forward:
    """The listener handed to the session: forwards to the current live view, if any (writer thread)."""

    def __init__(self) -> None:
        self.view: Any = None

    def on_record(self, record: dict[str, Any]) -> None:
        view = self.view
        if view is not None:
            view.on_record(record)

    def on_status(self, status: Any) -> None:
        view = self.view
        if view is not None:
            view.on_status(status)

    def close(self) -> None:
        """The benchmark closes its views itself."""


def child(steps: int, block: int, work: Path, out: Path) -> None:
    """Train once, alternating blocks without/with the live view; write the timed steps to ``out``."""
    os.chdir(work)
    from omegaconf import OmegaConf

    from msmon.config.loader import QUICKSTARTS_DIR

    conf = OmegaConf.load(QUICKSTARTS_DIR / "quickstart.yaml")
    for key, value in {"save_dir": str(work / "monitor_logs"), "run_name": "bench", "log_interval": 1,
                       "monitor_type": ["file"], "verbose": False}.items():
        OmegaConf.update(conf, f"monitor_config.{key}", value, force_add=True)
    OmegaConf.update(conf, "train_dataset.data_loader.num_samples", steps * 2)
    config = work / "quickstart.yaml"
    config.write_text(OmegaConf.to_yaml(conf, resolve=False), encoding="utf-8")

    from helpers_training import training_yaml

    from msmon.config.loader import load_config
    from msmon.config.split import split_monitor_config
    from msmon.engine.session import MonitorSession
    from msmon.runner.console import ConsoleCapture
    from msmon.runner.trainer import import_framework, train
    from msmon.validate.validator import validate
    from msmon.view.live import open_panel

    result = validate(load_config(config))
    assert result.valid, [f.message for f in result.findings if f.is_error]
    training, _ = split_monitor_config(result.training)
    run_dir = result.settings.run_dir()
    run_dir.mkdir(parents=True)
    logs = run_dir / "logs"
    import_framework(logs)
    from mindspore.train import Callback

    session = MonitorSession(result.settings, run_dir, config=training).start()
    forward = Forward()
    session.add_listener(forward)

    class Alternate(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.rows: list[tuple[float, bool, int]] = []  # (step end time, view shown during the step, block)
            self.view_cpu = 0.0
            self.view_wall = 0.0
            self._shown_since = 0.0

        def on_train_step_end(self, run_context: object) -> None:
            now = time.perf_counter()
            count = len(self.rows) + 1
            self.rows.append((now, forward.view is not None, (count - 1) // block))
            if count % block:
                return
            if forward.view is None:  # as msmon run shows it: the console captured, the panel on the terminal
                assert sys.stdout.isatty(), "stdout is not a terminal"
                self.capture = ConsoleCapture(run_dir / "console.log")
                view = open_panel(steps, self.capture.terminal_stream())
                self.capture.start(lambda: view.print_above)
                forward.view, self._shown_since = view, time.perf_counter()
            else:
                view, forward.view = forward.view, None
                self.view_cpu += thread_cpu_seconds(view._thread.native_id)
                view.close()
                self.capture.stop()
                self.view_wall += time.perf_counter() - self._shown_since

    alternate = Alternate()
    train(training_yaml(training, work), [session.callback(), alternate], logs)
    if forward.view is not None:
        forward.view.close()
        alternate.capture.stop()
    session.close("completed")
    timed = []
    for index in range(1, len(alternate.rows)):
        (previous, _, _), (end, shown, block_index) = alternate.rows[index - 1], alternate.rows[index]
        if index >= SKIP and index % block >= SETTLE:
            timed.append([end - previous, shown, block_index])
    out.write_text(json.dumps({"timed": timed, "view_cpu_s": alternate.view_cpu, "view_wall_s": alternate.view_wall}))


def run_child(steps: int, block: int, root: Path) -> dict[str, Any]:
    """One child on a pseudo-terminal (120x40) whose output is drained; returns its timed steps."""
    import fcntl
    import pty
    import struct
    import termios

    work = root / f"run_{time.monotonic_ns()}"
    work.mkdir()
    out = work / "steps.json"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--steps", str(steps), "--block", str(block),
                             "--work", str(work), "--out", str(out)],
                            stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    transcript = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            transcript.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    code = proc.wait(timeout=900)
    reader.join(timeout=10)
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", transcript.decode("utf-8", "replace"))
    if code != 0 or not out.is_file():
        sys.stderr.write(text[-4000:])
        raise SystemExit(f"benchmark run failed with exit code {code}")
    if "╭─ msmon" not in text:
        raise SystemExit("the live panel did not appear on the terminal")
    return dict(json.loads(out.read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.steps, args.block, args.work, args.out)
        return
    off: list[float] = []
    live: list[float] = []
    pair_ratios: list[float] = []
    view_cpu = view_wall = 0.0
    with tempfile.TemporaryDirectory(prefix="msmon-bench-live-") as tmp:
        for run in range(args.runs):
            result = run_child(args.steps, args.block, Path(tmp))
            blocks: dict[int, list[float]] = {}
            for seconds, shown, block_index in result["timed"]:
                (live if shown else off).append(seconds)
                blocks.setdefault(block_index, []).append(seconds)
            for first in range(0, max(blocks) + 1, 2):  # blocks alternate: even = without, odd = with the view
                if first in blocks and first + 1 in blocks:
                    pair_ratios.append(statistics.median(blocks[first + 1]) / statistics.median(blocks[first]))
            view_cpu += result["view_cpu_s"]
            view_wall += result["view_wall_s"]
            print(f"run {run + 1}: {len(result['timed'])} timed steps", flush=True)
    pooled = statistics.median(live) / statistics.median(off)
    paired = statistics.median(pair_ratios)
    print(f"median step time: without view {statistics.median(off) * 1000:.2f} ms ({len(off)} steps), "
          f"with live view {statistics.median(live) * 1000:.2f} ms ({len(live)} steps)")
    print(f"ratio live/off: pooled medians {pooled:.4f}, median of {len(pair_ratios)} adjacent block pairs "
          f"{paired:.4f} (target <= 1.01 for the paired ratio): {'PASS' if paired <= 1.01 else 'FAIL'}")
    if view_wall:
        print(f"live view thread CPU: {view_cpu:.3f} s over {view_wall:.1f} s shown "
              f"({100 * view_cpu / view_wall:.2f}% of one core)")


if __name__ == "__main__":
    main()
