"""Does the live view slow training? Median step time of the real tiny Trainer with and without the panel.

    /work/venv/bin/python bench/bench_live_view.py [--steps 300] [--rounds 2]

Each arm is a fresh child process training the CPU quickstart (configs/quickstart_cpu.yaml) with msmon's
callback (file backend, log_interval 1: the view gets every step, its worst case), its stdout on a real
pseudo-terminal drained by this process. Arm "live" adds the Rich live panel (make_live_view on a terminal);
arm "off" has none. Arms alternate (off, live, off, live, ...) so drift hits both; every step end is
timed by a small callback; the first 20 steps (graph compile, warm-up) are skipped.
Target: median(live) / median(off) <= 1.01.
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

REPO = Path(__file__).resolve().parents[1]
SKIP = 20


def child(mode: str, steps: int, work: Path, out: Path) -> None:
    """Train once in this process; write the per-step seconds to ``out``."""
    os.chdir(work)
    from omegaconf import OmegaConf

    conf = OmegaConf.load(REPO / "configs" / "quickstart_cpu.yaml")
    for key, value in {"save_dir": str(work / "monitor_logs"), "run_name": f"bench_{mode}", "log_interval": 1,
                       "monitor_type": ["file"], "verbose": False}.items():
        OmegaConf.update(conf, f"monitor_config.{key}", value, force_add=True)
    OmegaConf.update(conf, "train_dataset.data_loader.num_samples", steps * 2)
    config = work / "quickstart.yaml"
    config.write_text(OmegaConf.to_yaml(conf, resolve=False), encoding="utf-8")

    from msmon.config.loader import load_config
    from msmon.config.split import split_monitor_config
    from msmon.engine.session import MonitorSession
    from msmon.runner.trainer import import_framework, train
    from msmon.validate.validator import validate

    result = validate(load_config(config))
    assert result.valid, [f.message for f in result.findings if f.is_error]
    training, _ = split_monitor_config(result.training)
    run_dir = result.settings.run_dir()
    run_dir.mkdir(parents=True)
    logs = run_dir / "logs"
    import_framework(logs)
    from mindspore.train import Callback

    class StepTimer(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_train_step_end(self, run_context: object) -> None:
            self.ends.append(time.perf_counter())

    session = MonitorSession(result.settings, run_dir, config=training).start()
    if mode == "live":
        from msmon.view.live import LiveView, make_live_view

        view = make_live_view(sys.stdout.isatty(), False, steps, session=session, run_dir=run_dir)
        assert isinstance(view, LiveView), "stdout is not a terminal"
        session.add_listener(view)
    timer = StepTimer()
    train(training, [session.callback(), timer], logs)
    session.close("completed")
    seconds = [b - a for a, b in zip(timer.ends, timer.ends[1:], strict=False)]
    out.write_text(json.dumps(seconds[SKIP:]))


def run_arm(mode: str, steps: int, root: Path) -> list[float]:
    """One child on a pseudo-terminal (120x40), its output drained; returns its step seconds."""
    import fcntl
    import pty
    import struct
    import termios

    work = root / f"{mode}_{time.monotonic_ns()}"
    work.mkdir()
    out = work / "steps.json"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, __file__, "--child", mode, "--steps", str(steps), "--work", str(work),
                             "--out", str(out)], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
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
    if code != 0 or not out.is_file():
        sys.stderr.write(transcript.decode("utf-8", "replace")[-4000:])
        raise SystemExit(f"arm {mode} failed with exit code {code}")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", transcript.decode("utf-8", "replace"))
    if (mode == "live") != ("╭─ msmon" in text):
        raise SystemExit(f"arm {mode}: the live panel {'did not appear' if mode == 'live' else 'appeared'}")
    (root / f"transcript_{mode}.txt").write_text(text)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=("off", "live"))
    parser.add_argument("--work", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.work, args.out)
        return
    results: dict[str, list[float]] = {"off": [], "live": []}
    with tempfile.TemporaryDirectory(prefix="msmon-bench-live-") as tmp:
        for round_index in range(args.rounds):
            for mode in ("off", "live"):
                seconds = run_arm(mode, args.steps, Path(tmp))
                results[mode].extend(seconds)
                print(f"round {round_index + 1} {mode:>4}: median step {statistics.median(seconds) * 1000:.2f} ms "
                      f"over {len(seconds)} steps", flush=True)
    off, live = statistics.median(results["off"]), statistics.median(results["live"])
    ratio = live / off
    print(f"median step time: without view {off * 1000:.2f} ms, with live view {live * 1000:.2f} ms")
    print(f"ratio live/off = {ratio:.4f} (target <= 1.01): {'PASS' if ratio <= 1.01 else 'FAIL'}")


if __name__ == "__main__":
    main()
