"""The real mindformers Trainer on CPU through msmon.runner.trainer.train (CPU wrapper, outputs moved)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_training import write_quickstart_config

SCRIPT = """
import json, sys
from pathlib import Path
from mindspore.train import Callback
from helpers_training import quickstart_parts
from msmon.runner.trainer import train

class Probe(Callback):
    def __init__(self):
        self.rows = []
    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        outs = cb.net_outputs
        self.rows.append([cb.cur_step_num, len(outs), float(outs[0].asnumpy()), bool(outs[1].asnumpy())])

probe = Probe()
training, _ = quickstart_parts(sys.argv[1])
train(training, [probe], Path(sys.argv[2]))
print("ROWS " + json.dumps(probe.rows))
"""


@pytest.mark.training
def test_cpu_wrapper_trains_and_keeps_outputs_in_log_dir(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    config = write_quickstart_config(tmp_path, steps=40)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent))
    env.pop("LOCAL_DEFAULT_PATH", None)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(config), str(tmp_path / "logs")],
        cwd=work, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout.split("ROWS ", 1)[1])
    assert [row[0] for row in rows] == list(range(1, 41))
    assert {row[1] for row in rows} == {5}  # (loss, overflow, loss_scale, learning_rate, global_norm)
    assert not any(row[3] for row in rows)
    losses = [row[2] for row in rows]
    assert losses[0] > 6.5 and sum(losses[-10:]) / 10 < losses[0] - 0.2
    assert list(work.iterdir()) == []  # nothing written into the cwd
    assert (tmp_path / "logs" / "output" / "log" / "rank_0" / "info.log").is_file()
