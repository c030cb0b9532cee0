"""End to end with the real mindformers Trainer on CPU: a clean quickstart run raises nothing, the dead
network (lr 1e4) is reported within a few logged steps while a hanging webhook slows nothing, `stop`
ends `msmon run` with status stopped_by_monitor and exit code 4 (the checkpoint callback saves, a real
webhook on 127.0.0.1 receives the alert), a stall injected by a test callback raises the watchdog
alert while training is blocked, and `msmon replay` recomputes the live alerts of a real run. An alert during
training names its flight recorder file: every step before it at full resolution, also the steps of a stall
between two logs (their values unread: only step and step time)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import run_msmon
from helpers_training import PROJECTS, QUICKSTARTS, write_quickstart_config

pytestmark = pytest.mark.training

HERE = Path(__file__).resolve().parent
INTERVAL = 2
METRICS = ["loss", "grad_norm", "learning_rate", "throughput", "global_step", "step_time_ms"]


CHECKPOINT = {"type": "CheckpointMonitor", "prefix": "llama", "save_checkpoint_steps": 10000, "keep_checkpoint_max": 1,
              "integrated_save": False, "async_save": False}


#: What a learning rate of 1e4 does to each quickstart: the legacy Llama's gradients die (exactly 0, the loss
#: frozen at ln(vocab)); the mcore Qwen3's loss turns NaN within a few steps. (detector, words of its message)
DEATH = {"legacy": ("dead_series", ("grad_norm is exactly 0", "loss is exactly")),
         "mcore": ("nonfinite", ("is NaN", "is Inf"))}


def dead_run(base: Path, steps: int, action: str, webhook: str, model: str, checkpoint: bool = False):
    overrides: dict = {"lr_schedule.learning_rate": 1.0e4}
    if checkpoint:  # saves only at the end of training: proves the stop is graceful
        overrides["callbacks"] = [{"type": "MFLossMonitor"}, CHECKPOINT]
    path = write_quickstart_config(
        base, steps=steps, overrides=overrides, log_interval=INTERVAL, monitor_type=["file"], track_metrics=METRICS,
        health={"dead_series": {"action": action}, "nonfinite": {"action": action},
                "alerts": {"webhook_url": webhook, "webhook_timeout_s": 3.0}},
        source=QUICKSTARTS[model],
    )
    result = run_msmon("run", str(path), "--plain", cwd=base, timeout=300)
    run_dir = base / "monitor_logs" / PROJECTS[model] / "test_run"
    return result, run_dir, model


@pytest.fixture(scope="module", params=list(QUICKSTARTS))
def alert_run(request, tmp_path_factory):
    hung = socket.socket()  # accepts connections, never answers: a hanging webhook
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    try:
        yield dead_run(tmp_path_factory.mktemp("dead_alert"), steps=40, action="alert",
                       webhook=f"http://127.0.0.1:{hung.getsockname()[1]}/hook", model=request.param)
    finally:
        hung.close()


@pytest.fixture(scope="module", params=list(QUICKSTARTS))
def stop_run(request, tmp_path_factory):
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        yield (*dead_run(tmp_path_factory.mktemp("dead_stop"), steps=400, action="stop", webhook=url,
                         checkpoint=True, model=request.param), received)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("model", list(QUICKSTARTS))
def test_clean_quickstart_raises_no_alert(tmp_path, model):
    path = write_quickstart_config(tmp_path, steps=200, monitor_type=["file"], source=QUICKSTARTS[model])
    result = run_msmon("run", str(path), "--plain", cwd=tmp_path, timeout=300)  # lr as shipped, log_interval 10
    assert result.code == 0, result.stderr[-2000:]
    run_dir = tmp_path / "monitor_logs" / PROJECTS[model] / "test_run"
    assert not (run_dir / "alerts.jsonl").exists() and "HEALTH ALERT" not in result.stderr
    assert json.loads((run_dir / "run.json").read_text())["alert_count"] == 0


def alerts_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "alerts.jsonl").read_text().splitlines()]


def test_dead_network_alert_within_a_few_logged_steps(alert_run):
    result, run_dir, model = alert_run
    detector, words = DEATH[model]
    assert result.code == 0, result.stderr[-2000:]
    dead = [a for a in alerts_of(run_dir) if a["detector"] == detector]
    assert dead and dead[0]["severity"] == "critical" and dead[0]["action"] == "alert"
    assert dead[0]["step"] <= 5 * INTERVAL  # within 5 logged steps
    assert any(word in dead[0]["message"] for word in words)
    assert "HEALTH ALERT [critical]" in result.stderr
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["status"] == "completed" and run_json["alert_count"] >= 1
    # the webhook hangs (3 s timeout): no step after the alert waited for it
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert run_json["last_step"] == 40
    assert max(r["step_time_ms"] for r in records if r["step"] > dead[0]["step"]) < 1500


def test_the_alert_names_a_context_file_with_every_step_before_it(alert_run):
    _, run_dir, model = alert_run
    detector = DEATH[model][0]
    dead = next(a for a in alerts_of(run_dir) if a["detector"] == detector)
    assert dead["context_file"] == f"context/step_{dead['step']}_{detector}.jsonl"
    lines = [json.loads(line) for line in (run_dir / dead["context_file"]).read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(1, dead["step"] + 1))  # one line per step, not per log
    records = {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    for line in lines:
        assert {"time", "step_time_ms", "loss", "grad_norm", "loss_scale", "overflow"} <= set(line)
        record = records.get(line["step"])
        if record is not None:  # a logged step: the same values as its record (NaN as NaN)
            assert json.dumps([line["loss"], line["grad_norm"]]) == json.dumps([record["loss"], record["grad_norm"]])
    if model == "legacy":  # the dead network's zero gradient, step by step
        assert any(line["grad_norm"] == 0.0 for line in lines)
    else:  # the mcore network's loss turns NaN: the first such step is in the window
        assert any(line["loss"] != line["loss"] for line in lines)


def test_replay_of_the_real_run_directory_recomputes_the_live_alerts(alert_run, tmp_path):
    _, run_dir, _ = alert_run
    replayed = run_msmon("replay", str(run_dir), "--json", cwd=tmp_path)
    assert replayed.code == 0, replayed.stderr
    key = ("step", "detector", "severity", "message")
    live = [{k: a[k] for k in key} for a in alerts_of(run_dir) if a["detector"] != "stall"]
    assert [{k: a[k] for k in key} for a in json.loads(replayed.stdout)] == live


def test_stop_action_ends_the_run_gracefully_with_exit_4(stop_run):
    result, run_dir, model, received = stop_run
    detector, _ = DEATH[model]
    assert result.code == 4, result.stderr[-2000:]
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["status"] == "stopped_by_monitor" and run_json["exit_code"] == 4
    assert detector in (run_json["error"] or "")
    first = next(a for a in alerts_of(run_dir) if a["detector"] == detector)
    assert first["action"] == "stop"
    assert first["step"] <= run_json["last_step"] <= first["step"] + 5 * INTERVAL  # stopped soon after
    assert run_json["last_step"] < 400
    # the checkpoint callback saved at the graceful end (.ckpt on the legacy path, safetensors on the mcore one)
    saved = [p.stem for p in run_dir.glob("logs/**/llama_rank_0-1_*") if p.suffix in (".ckpt", ".safetensors")]
    assert saved == [f"llama_rank_0-1_{run_json['last_step']}"]
    assert "HEALTH ALERT [critical]" in result.stderr and "run stopped_by_monitor" in result.stderr
    assert [(a["step"], a["detector"], a["action"]) for a in received] == [(first["step"], detector, "stop")]


def test_stall_in_a_training_callback_raises_the_watchdog_alert_while_blocked(tmp_path):
    proc = subprocess.run([sys.executable, str(HERE / "health_stall_driver.py"), str(tmp_path), "30", "20"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["alert_after_s"] is not None, "no stall alert while training was blocked"
    stall = next(a for a in alerts_of(Path(result["run_dir"])) if a["detector"] == "stall")
    timeout = stall["values"]["timeout_s"]
    assert result["alert_after_s"] <= timeout + 2.0
    assert stall["step"] == 20 and stall["values"]["last_step"] == 20
    assert abs(stall["values"]["last_step_time"] - result["step_end_wall"]) < 1.0
    assert timeout < 40.0  # calibrated from real step times: with the ~5 s compilation of step 1 it would be 50 s
    assert result["last_step"] == 30  # training went on after the stall


def test_a_stall_between_two_logs_names_the_unread_steps_before_it(tmp_path):
    proc = subprocess.run([sys.executable, str(HERE / "health_stall_driver.py"), str(tmp_path), "30", "22", "4"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    run_dir = Path(result["run_dir"])
    stall = next(a for a in alerts_of(run_dir) if a["detector"] == "stall")
    assert stall["step"] == 22
    lines = [json.loads(line) for line in (run_dir / stall["context_file"]).read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(1, 23))
    read, unread = lines[:20], lines[20:]  # steps 21 and 22 were held since the log at step 20
    assert all({"loss", "grad_norm", "step_time_ms"} <= set(line) for line in read)
    assert all(set(line) == {"step", "time", "step_time_ms"} for line in unread)
    assert abs(unread[-1]["time"] - result["step_end_wall"]) < 1.0
