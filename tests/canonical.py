"""The canonical runs: real `msmon run`s of the CPU quickstarts that many tests read, each trained once per test
session, by whichever pytest-xdist worker asks first (the other waits for it: ``shared_session.once``).

    def test_x(canonical):
        run = canonical("completed_legacy")     # CanonicalRun: run_dir, output, code, records(), info, ...

Every canonical run lives in ``<session root>/canonical/``: one save_dir (``monitor_logs``), one project
(``canonical``), its config in ``configs/<name>/``; that directory is a git repository (MLflow's commit tag).
The session's MLflow server (``session_mlflow``) and MindInsight board (``session_mindinsight``) serve them all.

Tests read a canonical run's files and never change them: ``copy_to(directory)`` gives a private copy to resume
or modify; the session fails when a canonical run directory changed after it was built.

To add a canonical run: write a builder ``def _name(work: Workspace) -> dict`` below that trains it (with
``work.config`` and ``work.run``) and returns what tests need beyond the run directory, name it in ``CATALOGUE``,
and assert on it from as many tests as can; a test that needs a training of its own says why in its docstring.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import shared_session
from canonical_rollback import ROLLBACK_RUNS
from helpers_training import QUICKSTARTS, checkpoint_section, write_quickstart_config
from launch import Launched, msmon_env, records

HERE = Path(__file__).resolve().parent
PROJECT = "canonical"
ALL_BACKENDS = ["file", "mindinsight", "tensorboard", "mlflow"]
#: What the completed runs track: every metric a quickstart produces, the per-layer norms among them.
ALL_METRICS = ["loss", "grad_norm", "learning_rate", "throughput", "global_step", "step_time_ms", "loss_scale",
               "overflow", "epoch", "host_memory_mb", "layer_grad_norm"]
STALL = {"timeout_s": 5.0, "poll_s": 0.2}


@dataclass(frozen=True)
class CanonicalRun:
    """One canonical run as its tests see it (read only)."""

    name: str
    model: str
    run_dir: Path
    config: Path
    cwd: Path
    code: int
    stdout: str
    stderr: str
    steps: int
    log_interval: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def output(self) -> str:
        """Everything msmon printed (on a terminal: its text without escape sequences)."""
        from launch import ANSI

        return ANSI.sub("", self.stdout + self.stderr)

    @property
    def info(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "run.json").read_text())

    def records(self, name: str = "metrics.jsonl") -> list[dict[str, Any]]:
        return records(self.run_dir, name)

    def alerts(self) -> list[dict[str, Any]]:
        return records(self.run_dir, "alerts.jsonl")

    def outputs(self) -> tuple[list[str], dict[int, list[list[float]]]]:
        """(the optimizer's parameter names, step -> the train step's outputs) as tests/rank_callbacks.DumpOutputs
        wrote them (the completed runs)."""
        lines = [json.loads(line) for line in (self.run_dir / "logs" / "outputs.jsonl").read_text().splitlines()]
        return lines[0]["names"], {line["step"]: line["outputs"] for line in lines[1:]}

    def copy_to(self, directory: Path) -> Path:
        """A private copy of the run directory under ``directory/monitor_logs/<project>/`` (its path returned)."""
        target = directory / "monitor_logs" / PROJECT / self.run_dir.name
        shutil.copytree(self.run_dir, target, symlinks=True)
        shared_session.note_copied_logs(target)  # its trainings are the canonical run's, not the copier's
        return target


class Workspace:
    """What a builder works with: the shared directory of the canonical runs and one run's place in it."""

    def __init__(self, root: Path, name: str) -> None:
        self.root, self.name = root, name
        self.base = root / "configs" / name  # the config, msmon's output files, the run's own msmon home
        self.base.mkdir(parents=True, exist_ok=True)
        self.run_dir = root / "monitor_logs" / PROJECT / name

    def identity(self) -> dict[str, Any]:
        """The monitor_config keys that put the run at ``run_dir``."""
        return {"project_name": PROJECT, "run_name": self.name, "save_dir": str(self.root / "monitor_logs")}

    def config(self, model: str, steps: int, *, overrides: dict[str, Any] | None = None, **monitor: Any) -> Path:
        monitor = {**self.identity(), **monitor}
        return write_quickstart_config(self.base, steps=steps, overrides=overrides, source=QUICKSTARTS[model],
                                       **monitor)

    def env(self, terminal: bool = False) -> dict[str, str]:
        return msmon_env(self.base, terminal=terminal)

    def start(self, *args: str, terminal: bool = False) -> Launched:
        return Launched.start(self.base, *args, env=self.env(terminal), cwd=self.root, terminal=terminal)

    def result(self, run: Launched, model: str, steps: int, log_interval: int, **extra: Any) -> dict[str, Any]:
        return {"name": self.name, "model": model, "run_dir": str(self.run_dir),
                "config": str(self.base / "quickstart.yaml"), "cwd": str(self.root), "code": run.proc.returncode,
                "stdout": run.stdout, "stderr": run.stderr, "steps": steps, "log_interval": log_interval,
                "extra": extra}


def callbacks(model: str, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The quickstart's own callbacks, then ``extra`` (test callbacks of tests/rank_callbacks.py)."""
    from omegaconf import OmegaConf

    shipped = OmegaConf.to_container(OmegaConf.load(QUICKSTARTS[model]).callbacks)
    assert isinstance(shipped, list)
    return [*shipped, *extra]


def registered(name: str, **kwargs: Any) -> dict[str, Any]:
    """A callback entry of tests/rank_callbacks.py, registered as a user would (auto_register + REGISTER_PATH)."""
    return {"type": name, "auto_register": f"rank_callbacks.{name}", **kwargs}


# -- the session's servers ------------------------------------------------------------------------------------------
def session_mlflow() -> str:
    """The URL of the session's MLflow server (started once; the controller stops it at the end)."""

    def build(directory: Path) -> dict[str, Any]:
        from engine_support import MlflowServer

        server = MlflowServer(directory)
        shared_session.register_group("mlflow", server.proc.pid)
        return {"url": server.url}

    return shared_session.once("mlflow", build)["url"]


def session_mindinsight() -> str:
    """The REST base (``http://127.0.0.1:P/v1/mindinsight``) of a MindInsight board serving the canonical project
    (started once, after the runs it serves exist; the controller stops it at the end). It looks for new data every
    5 s: every second, its reloads took 2% of a core for the rest of the session."""

    def build(directory: Path) -> dict[str, Any]:
        from engine_support import VENV_BIN, wait_until

        from msmon.util.net import free_port

        port = free_port("127.0.0.1")
        env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
        subprocess.run([os.path.join(VENV_BIN, "mindinsight"), "start", "--port", str(port), "--summary-base-dir",
                        str(_root() / "monitor_logs" / PROJECT), "--workspace", str(directory), "--reload-interval",
                        "5"], env=env, check=True, capture_output=True, timeout=180, start_new_session=True)
        listener = wait_until(lambda: _listener(port), 60, interval=0.2)
        assert listener, f"MindInsight does not listen on port {port}"
        shared_session.register_group("mindinsight", os.getpgid(listener))
        return {"url": f"http://127.0.0.1:{port}/v1/mindinsight"}

    return shared_session.once("mindinsight", build)["url"]


def _listener(port: int) -> int | None:
    import psutil

    return next((c.pid for c in psutil.net_connections("inet") if c.laddr and c.laddr.port == port
                 and c.status == psutil.CONN_LISTEN and c.pid), None)


class Webhook:
    """A webhook receiver on 127.0.0.1 that keeps every JSON body it got."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def hanging_server() -> socket.socket:
    """A server that accepts connections (the kernel's backlog) and never answers a request."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    return server


# -- the catalogue ----------------------------------------------------------------------------------------------
def _completed(work: Workspace, model: str, *, terminal: bool, panel: bool = False,
               learning_rate: float | None = None, grow_from: int | None = None, grow_factor: float = 1.04,
               steps: int = 200) -> dict[str, Any]:
    """A 200-step run (``steps``) of a quickstart with every backend (the session's MLflow), the per-layer norms,
    every step's outputs dumped, verbose lines and the report, on a pseudo-terminal with ``terminal``. With
    ``panel`` (completed_legacy) the live panel with the board beside it, kept after the run (its loss series read,
    then stopped with `msmon board stop`); the others ``--plain`` (lr_2e_2 on a terminal: plain lines there too), the
    mcore ones with an override on the command line (their own seed). ``grow_from``: from that step block 1's
    gradients grow by ``grow_factor`` a step (tests/rank_callbacks.GrowBlock: the network computes the same)."""
    interval = 10
    extra = [registered("GrowBlock", model=model, block=1, step=grow_from, factor=grow_factor)] if grow_from else []
    overrides: dict[str, Any] = {"callbacks": callbacks(model, *extra, registered("DumpOutputs"))}
    if learning_rate is not None:
        overrides["lr_schedule.learning_rate"] = learning_rate
    config = work.config(model, steps, log_interval=interval, verbose=True, monitor_type=ALL_BACKENDS,
                         track_metrics=ALL_METRICS, mlflow={"tracking_uri": session_mlflow(), "timeout_s": 30.0},
                         overrides=overrides)
    args = ["run", str(config), "--report"]
    args += ["--board", "--port", "0", "--keep-board"] if panel else ["--plain"]
    if model == "mcore":
        args.append("seed=42")  # an override on the command line, as users type them (the quickstart's own seed)
    run = work.start(*args, terminal=terminal)
    board: dict[str, Any] = {}
    try:
        run.finish(kill=False)
        if panel:
            board = _kept_board(work, run)
    finally:
        run.kill()
    return work.result(run, model, steps, interval, board=board, grow_from=grow_from)


def _kept_board(work: Workspace, run: Launched) -> dict[str, Any]:
    """The board `--keep-board` left: `msmon board status`, the train jobs and the loss series it serves; then
    `msmon board stop --all` and whatever of its process group is still alive."""
    import re
    import time
    import urllib.parse

    import psutil
    from engine_support import get_json

    found = re.search(r"board kept running: (http://127\.0\.0\.1:\d+)/?", run.output)
    if found is None:
        return {}
    base = found.group(1) + "/v1/mindinsight/datavisual"
    msmon = [sys.executable, "-m", "msmon"]
    status = subprocess.run([*msmon, "board", "status", "--json"], env=work.env(), cwd=work.root,
                            capture_output=True, text=True, timeout=120)
    served: dict[str, float] = {}
    jobs: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(served) < len(records(work.run_dir)):
        try:
            jobs = get_json(f"{base}/train-jobs")["train_jobs"]
            train_id = next(job["train_id"] for job in jobs if job["train_id"].endswith(work.name))
            query = urllib.parse.urlencode({"train_id": train_id, "tag": "loss/scalar"})
            served = {str(m["step"]): m["value"] for m in get_json(f"{base}/scalar/metadata?{query}")["metadatas"]}
        except (OSError, ValueError, KeyError, StopIteration):
            time.sleep(1)
    boards = json.loads(status.stdout or "[]")
    stop = subprocess.run([*msmon, "board", "stop", "--all"], env=work.env(), cwd=work.root, capture_output=True,
                          text=True, timeout=120)
    left = []
    for proc in psutil.process_iter():
        try:
            if any(os.getpgid(proc.pid) == b["pgid"] for b in boards) and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return {"url": found.group(1), "status": boards, "jobs": jobs, "loss": served, "stop_code": stop.returncode,
            "stop_output": stop.stdout + stop.stderr, "left_in_group": left}


def completed_legacy(work: Workspace) -> dict[str, Any]:
    return _completed(work, "legacy", terminal=True, panel=True)


def completed_mcore(work: Workspace) -> dict[str, Any]:
    """The mcore quickstart, whose block 1's gradients grow by 6% a step from step 100 (the network computes the
    same): steps 1-100 are the clean run (no alert), the growth alert comes after it. (At 4% the mcore model's
    other blocks drift almost as much before the alert: measured ratios x2.8 against x2.0.)"""
    return _completed(work, "mcore", terminal=False, grow_from=100, grow_factor=1.06)


def lr_1e_3(work: Workspace) -> dict[str, Any]:
    """completed_legacy at learning rate 1e-3 with block 1's gradients growing from step 100, 240 steps: the growth
    alert (about step 190) leaves a distributions probe request whose 3 logs (201-230) the run then trains."""
    return _completed(work, "legacy", terminal=False, learning_rate=1e-3, grow_from=100, steps=240)


def _jump(work: Workspace, model: str, *, learning_rate: float | None = None,
          threshold: float = 10.0) -> dict[str, Any]:
    """The quickstart of ``model`` whose block 1 is hit by a sudden jump: at the end of step 99 its weight pairs
    rescaled once by 20 (tests/rank_callbacks.GrowBlock ``once``: the network computes the same, the divided weights'
    gradients x20 from step 100), 140 steps logged every 10, the layer norms and summaries tracked, the file backend,
    ``grad_explosion.absolute_threshold`` between the clean steps' largest grad norm and the jump's: the alert at step
    100 and the histograms of the 3 logs after the request is taken at step 110 (111-140). #49's sudden-jump
    scenario."""
    steps, interval = 140, 10
    jump = registered("GrowBlock", model=model, block=1, step=99, factor=20.0, once=True)
    overrides: dict[str, Any] = {"callbacks": callbacks(model, jump)}
    if learning_rate is not None:
        overrides["lr_schedule.learning_rate"] = learning_rate
    config = work.config(model, steps, log_interval=interval, monitor_type=["file"],
                         track_metrics=["loss", "grad_norm", "learning_rate", "global_step", "step_time_ms",
                                        "layer_grad_norm"],
                         health={"grad_explosion": {"absolute_threshold": threshold}}, overrides=overrides)
    seed = ["seed=42"] if model == "mcore" else []  # the mcore quickstart's own seed, as an override
    run = work.start("run", str(config), "--plain", *seed)
    run.finish()
    return work.result(run, model, steps, interval, jump_step=99)


def jump_mcore(work: Workspace) -> dict[str, Any]:
    """The sudden jump on the mcore quickstart (block 1's one weight pair, linear_qkv / linear_proj; the clean steps'
    grad norm stays below 7, the threshold 10)."""
    return _jump(work, "mcore")


def jump_legacy(work: Workspace) -> dict[str, Any]:
    """The sudden jump on the legacy quickstart (block 1's three pairs: wq/wk, wv/wo, w3/w2), at learning rate 1e-3
    as ``lr_1e_3``: at the shipped 5e-3 over 140 steps the block's grad norm and layer 0's update ratio are still
    falling with the loss at step 100 and leave their baselines before the jump (measured: layer 0's update ratio
    named from step 60). The clean steps' grad norm stays below 1.6 (the threshold 3), the jump's step 3.9."""
    return _jump(work, "legacy", learning_rate=1e-3, threshold=3.0)


def lr_2e_2(work: Workspace) -> dict[str, Any]:
    """completed_legacy at learning rate 2e-2, nothing else changed (MindInsight's lineage and hyperparameter
    importance compare the three rates; `msmon compare` shows exactly the one key), with ``--plain`` on a terminal
    (tests/test_run_terminal.py reads its screen)."""
    return _completed(work, "legacy", terminal=True, learning_rate=2e-2)


def diverged_stop_legacy(work: Workspace) -> dict[str, Any]:
    """lr 1e4 kills the legacy network (its gradients exactly 0): dead_series with ``action: stop`` ends the run
    (exit 4) at a graceful step end, where the CheckpointMonitor saves; a real webhook and a command hook get the
    alert; TensorBoard and MLflow show its text."""
    steps, interval = 400, 2
    hook_file = work.base / "command_hook.jsonl"
    webhook = Webhook()
    checkpoint = {"type": "CheckpointMonitor", "prefix": "llama", "save_checkpoint_steps": 10000,
                  "keep_checkpoint_max": 1, "integrated_save": False, "async_save": False}
    command = [sys.executable, "-c", f"import sys; open({str(hook_file)!r}, 'a').write(sys.stdin.read() + '\\n')"]
    try:
        config = work.config(
            "legacy", steps, log_interval=interval, monitor_type=["file", "tensorboard", "mlflow"],
            mlflow={"tracking_uri": session_mlflow(), "timeout_s": 30.0},
            track_metrics=["loss", "grad_norm", "learning_rate", "throughput", "global_step", "step_time_ms"],
            health={"dead_series": {"action": "stop"}, "nonfinite": {"action": "stop"},
                    "alerts": {"webhook_url": webhook.url, "webhook_timeout_s": 3.0, "command": command}},
            overrides={"lr_schedule.learning_rate": 1.0e4, "callbacks": [{"type": "MFLossMonitor"}, checkpoint],
                       **checkpoint_section(10000, 1)})
        run = work.start("run", str(config), "--plain", "--report")
        run.finish()
    finally:
        webhook.close()
    return work.result(run, "legacy", steps, interval, webhook=webhook.received, command_hook=str(hook_file))


def interrupted_legacy(work: Workspace) -> dict[str, Any]:
    """A 200-step legacy run on a terminal with every backend, the board beside it and every line of the framework
    above the panel (--framework-logs), interrupted by SIGINT once it logged step 110 and saved its step-100
    checkpoint: exit 130, the report; `msmon run --resume` of a copy continues it. Two micro batches interleaved
    per step (the loss msmon records is the one mindformers prints, not their sum). (200 steps, not more: the resume
    trains the rest.)"""
    from msmon.runner.checkpoints import latest_checkpoint

    steps, interval = 200, 5
    config = work.config("legacy", steps, log_interval=interval, monitor_type=ALL_BACKENDS,
                         mlflow={"tracking_uri": session_mlflow(), "timeout_s": 30.0},
                         overrides={"micro_batch_interleave_num": 2})
    run = work.start("run", str(config), "--report", "--board", "--port", "0", "--framework-logs", terminal=True)

    def saved() -> bool:
        rows, point = records(work.run_dir), latest_checkpoint(work.run_dir)
        return bool(rows and rows[-1]["step"] >= 110 and point is not None and point.step >= 100)

    try:
        run.wait_for(saved)
        seen = sorted(run.seen)
        run.proc.send_signal(signal.SIGINT)
        run.finish(kill=False)
        left = run.left_behind()
    finally:
        run.kill()
    return work.result(run, "legacy", steps, interval, seen=seen, left_behind=left)


def lr_50_legacy(work: Workspace) -> dict[str, Any]:
    """A peak learning rate of 50 typed on the command line (``lr_schedule.learning_rate=50``, as a new user tried):
    the legacy quickstart is wrong from its first step (the loss far above chance level, the grad norm absurd) and
    stays finite. 60 steps, every other step logged, the file backend."""
    steps, interval = 60, 2
    config = work.config("legacy", steps, log_interval=interval, monitor_type=["file"],
                         track_metrics=["loss", "grad_norm", "learning_rate", "global_step", "step_time_ms"])
    run = work.start("run", str(config), "--plain", "lr_schedule.learning_rate=50")
    run.finish()
    return work.result(run, "legacy", steps, interval)


def lr_50_mcore(work: Workspace) -> dict[str, Any]:
    """``lr_schedule.learning_rate=50`` on the command line turns the mcore quickstart's loss NaN from its third log
    (17,775 at the second): nonfinite with ``action: alert`` while the webhook, the command hook and the MLflow
    server all hang (they accept connections and never answer): the run completes, no step waits for them, and it
    ends within the documented budgets. 60 steps, every other step logged."""
    steps, interval = 60, 2
    webhook, tracking = hanging_server(), hanging_server()
    hang = [sys.executable, "-c", "import time; time.sleep(600)"]
    try:
        config = work.config(
            "mcore", steps, log_interval=interval, monitor_type=["file", "mlflow"],
            mlflow={"tracking_uri": f"http://127.0.0.1:{tracking.getsockname()[1]}", "timeout_s": 2.0},
            track_metrics=["loss", "grad_norm", "learning_rate", "throughput", "global_step", "step_time_ms"],
            health={"dead_series": {"action": "alert"}, "nonfinite": {"action": "alert"},
                    "alerts": {"webhook_url": f"http://127.0.0.1:{webhook.getsockname()[1]}/hook",
                               "webhook_timeout_s": 3.0, "command": hang}})
        run = work.start("run", str(config), "--plain", "lr_schedule.learning_rate=50")
        run.finish()
    finally:
        webhook.close()
        tracking.close()
    return work.result(run, "mcore", steps, interval)


def _failed_compile(work: Workspace, model: str) -> dict[str, Any]:
    """A graph that cannot compile (the model's sequence is half the data's), started in an empty working
    directory, with restarts allowed (a failure before the first step is never restarted) and the report."""
    cwd = work.base / "cwd"
    cwd.mkdir()
    config = work.config(model, 10, overrides={"model.model_config.seq_length": 32})
    run = Launched.start(work.base, "run", str(config), "--plain", "--report", "--max-restarts", "2",
                         "--restart-backoff", "0", env=work.env(), cwd=cwd)
    run.finish()
    return {**work.result(run, model, 10, 10), "cwd": str(cwd)}


def failed_compile_legacy(work: Workspace) -> dict[str, Any]:
    return _failed_compile(work, "legacy")


def failed_compile_mcore(work: Workspace) -> dict[str, Any]:
    return _failed_compile(work, "mcore")


def reference_seed1_legacy(work: Workspace) -> dict[str, Any]:
    """The legacy quickstart with ``seed: 1``, 200 steps, every step logged (file backend), and mindformers' own
    ``tensorboard:`` section writing into ``<workspace>/tb`` (``rank_0`` below it): one training read as a reference
    three ways (its run directory, its info.log, its TensorBoard directory); the band tests reuse it."""
    steps, interval = 200, 1
    tensorboard = work.base / "tb"
    config = work.config("legacy", steps, log_interval=interval, monitor_type=["file"],
                         track_metrics=["loss", "grad_norm", "learning_rate", "global_step", "step_time_ms"],
                         overrides={"seed": 1, "tensorboard": {"tensorboard_dir": str(tensorboard)}})
    run = work.start("run", str(config), "--plain")
    run.finish()
    return work.result(run, "legacy", steps, interval, tensorboard=str(tensorboard))


def reference_seed1_mcore(work: Workspace) -> dict[str, Any]:
    """The mcore quickstart's recipe as completed_mcore trains it (200 steps: the same 10-step warm-up) with
    ``seed: 1`` and nothing added: every step logged, the file backend. The second seed of the mcore band (the
    first: completed_mcore's steps before its block starts growing)."""
    steps, interval = 200, 1
    config = work.config("mcore", steps, log_interval=interval, monitor_type=["file"],
                         track_metrics=["loss", "grad_norm", "learning_rate", "global_step", "step_time_ms"],
                         overrides={"seed": 1})
    run = work.start("run", str(config), "--plain")
    run.finish()
    return work.result(run, "mcore", steps, interval)


CATALOGUE: dict[str, Callable[[Workspace], dict[str, Any]]] = {
    "completed_legacy": completed_legacy,
    "completed_mcore": completed_mcore,
    "lr_1e_3": lr_1e_3,
    "lr_2e_2": lr_2e_2,
    "jump_mcore": jump_mcore,
    "jump_legacy": jump_legacy,
    "diverged_stop_legacy": diverged_stop_legacy,
    "interrupted_legacy": interrupted_legacy,
    "lr_50_legacy": lr_50_legacy,
    "lr_50_mcore": lr_50_mcore,
    "failed_compile_legacy": failed_compile_legacy,
    "failed_compile_mcore": failed_compile_mcore,
    "reference_seed1_legacy": reference_seed1_legacy,
    "reference_seed1_mcore": reference_seed1_mcore,
    **ROLLBACK_RUNS,
}


def _root() -> Path:
    return shared_session.root() / "canonical"


def _prepare(directory: Path) -> dict[str, Any]:
    """The shared directory of the canonical runs: a git repository with one commit (MLflow's commit tag)."""
    root = _root()
    root.mkdir(parents=True, exist_ok=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    (root / "README").write_text("the canonical runs of msmon's test session\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return {"commit": commit}


def git_commit() -> str:
    """The commit of the canonical runs' working directory."""
    return shared_session.once("canonical-repository", _prepare)["commit"]


def get(name: str) -> CanonicalRun:
    """The canonical run ``name``, trained now when no process of the session has trained it yet."""
    if name not in CATALOGUE:
        raise KeyError(f"no canonical run {name!r}: the catalogue has {', '.join(CATALOGUE)}")
    git_commit()

    def build(_directory: Path) -> dict[str, Any]:
        result = CATALOGUE[name](Workspace(_root(), name))
        _fingerprint(Path(result["run_dir"]), _directory / "fingerprint.json")
        return result

    data = shared_session.once(f"canonical-{name}", build)
    if "error" in data:
        raise RuntimeError(f"the canonical run {name} could not be built: {data['error']}")
    return CanonicalRun(**{**data, "run_dir": Path(data["run_dir"]), "config": Path(data["config"]),
                           "cwd": Path(data["cwd"])})


def _tree(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): f"{p.stat().st_size}:{p.stat().st_mtime_ns}"
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _fingerprint(run_dir: Path, path: Path) -> None:
    path.write_text(json.dumps(_tree(run_dir)))


def changed_runs(root: Path) -> list[str]:
    """Canonical runs whose directory changed after it was built (a test wrote into it): ``name: file``."""
    changed = []
    for fingerprint in sorted((root / "once").glob("canonical-*/fingerprint.json")):
        data = json.loads((fingerprint.parent / "result.json").read_text())
        before = json.loads(fingerprint.read_text())
        after = _tree(Path(data["run_dir"]))
        names = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
        if names:
            changed.append(f"{data['name']}: {', '.join(names[:5])}")
    return changed

