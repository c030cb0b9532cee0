"""Orchestrate one ``msmon run``: validate, plan, run directory, monitoring, board, signals, run.json."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msmon.config.loader import LoadedConfig, load_config
from msmon.config.schema import MonitorSettings
from msmon.config.split import split_monitor_config
from msmon.errors import ExitCode
from msmon.runner import launcher, rundir, runinfo
from msmon.validate.validator import ValidationResult, validate

logger = logging.getLogger("msmon")

EXIT_BY_STATUS = {
    "completed": ExitCode.OK,
    "failed": ExitCode.TRAINING_FAILED,
    "stopped_by_monitor": ExitCode.STOPPED_BY_MONITOR,
}
EXIT_BY_SIGNAL = {signal.SIGINT: ExitCode.INTERRUPTED_SIGINT, signal.SIGTERM: ExitCode.INTERRUPTED_SIGTERM}
BOARD_JOIN_TIMEOUT_S = 90.0


@dataclass
class RunRequest:
    """What the user asked ``msmon run`` for."""

    config: str
    overrides: list[str] = field(default_factory=list)
    board: bool = False
    port: int = 8080
    keep_board: bool = False
    resume: bool = False
    worker_num: int | None = None
    local_worker_num: int | None = None
    master_addr: str = "127.0.0.1"
    master_port: int = 8118
    node_rank: int | None = None
    command: list[str] = field(default_factory=lambda: list(sys.argv))

    @property
    def joins_run(self) -> bool:
        """A machine other than node 0 of a multi-machine run: node 0 creates the run directory."""
        return self.node_rank not in (None, 0)

    @property
    def run_json(self) -> str:
        return f"run.node{self.node_rank}.json" if self.joins_run else runinfo.RUN_JSON


@dataclass
class RunPlan:
    """A validated run: everything decided, nothing created yet."""

    request: RunRequest
    loaded: LoadedConfig
    result: ValidationResult
    training: dict[str, Any]
    run_dir: Path
    cwd: Path

    @property
    def settings(self) -> MonitorSettings:
        return self.result.settings

    @property
    def monitoring(self) -> bool:
        return bool(self.settings.enable_monitor and self.settings.use_callback)

    @property
    def board_backend(self) -> str | None:
        types = self.settings.monitor_type
        return next((name for name in ("mindinsight", "tensorboard") if name in types), None)

    def save_dir(self) -> Path:
        path = Path(self.settings.save_dir).expanduser()
        return path if path.is_absolute() else self.cwd / path

    def board_dir(self) -> Path:
        """What the board serves: MindInsight lists one directory level, so the project directory."""
        return self.save_dir() / self.settings.project_name

    def callback_order(self) -> list[str]:
        """The training's callbacks in the order mindformers runs them (its own monitors first)."""
        names = [str(cb.get("type", "?")) for cb in self.training.get("callbacks") or [] if isinstance(cb, dict)]
        if self.monitoring:
            names.append(f"msmon MonitorCallback (every {self.settings.log_interval} steps)")
        return names

    def board_command(self) -> list[str] | None:
        backend = self.board_backend
        if not self.request.board or backend is None:
            return None
        port, directory = str(self.request.port), str(self.board_dir())
        if backend == "mindinsight":
            return ["mindinsight", "start", "--port", port, "--summary-base-dir", directory]
        return ["tensorboard", "--logdir", directory, "--port", port, "--host", "127.0.0.1"]

    def launcher_command(self) -> list[str]:
        return launcher.worker_argv(self.request, self.run_dir)

    def describe(self) -> list[str]:
        """The dry-run plan, one line per item."""
        s = self.settings
        board = self.board_command()
        return [
            f"config:        {self.request.config}",
            f"run directory: {self.run_dir}" + ("  (resume)" if self.request.resume else ""),
            f"monitoring:    {'on' if s.enable_monitor else 'off'}"
            + ("" if s.use_callback else " (use_callback false: no callback)"),
            f"backends:      {', '.join(s.monitor_type) if self.monitoring else 'none'}",
            f"metrics:       {', '.join(s.track_metrics)} every {s.log_interval} steps",
            f"total steps:   {self.result.total_steps if self.result.total_steps is not None else 'unknown'}",
            f"callbacks:     {' -> '.join(self.callback_order()) or 'none'}",
            f"board:         {' '.join(board) if board else 'off'}",
            f"launcher:      {' '.join(self.launcher_command())}",
            f"mindformers outputs: {self.run_dir / rundir.LOGS / 'output'}",
        ]


@dataclass
class RunOutcome:
    status: str
    exit_code: int
    run_dir: Path
    error: str | None = None
    last_step: int | None = None


def make_plan(request: RunRequest, result: ValidationResult, loaded: LoadedConfig, cwd: Path | None = None) -> RunPlan:
    """The plan of a valid run (creates nothing)."""
    cwd = (cwd or Path.cwd()).absolute()
    training, _ = split_monitor_config(result.training)
    if request.worker_num:
        launcher.check_config(training, request)
    save_dir = Path(result.settings.save_dir).expanduser()
    run_dir = (save_dir if save_dir.is_absolute() else cwd / save_dir) / result.settings.project_name
    return RunPlan(request, loaded, result, training, run_dir / result.settings.run_name, cwd)


def prepare(request: RunRequest, cwd: Path | None = None) -> tuple[ValidationResult, RunPlan | None]:
    """Validate ``request``; the plan is None when the config has an error finding."""
    launcher.check_flags(request)
    loaded = load_config(request.config, request.overrides)
    result = validate(loaded, resume=request.resume or request.joins_run, cwd=cwd)
    if not result.valid:
        return result, None
    return result, make_plan(request, result, loaded, cwd)


class _Board:
    """The board beside the training, started on a thread so training does not wait for it."""

    def __init__(self, plan: RunPlan, say: Callable[[str], None]) -> None:
        self.plan, self.say = plan, say
        self.handle: Any = None
        self.thread = threading.Thread(target=self._start, name="msmon-board", daemon=True)

    def start(self) -> None:
        if self.plan.board_backend is None:
            self.say("board: not started (monitor_type has neither mindinsight nor tensorboard)")
            return
        self.thread.start()

    def _start(self) -> None:
        try:
            from msmon.ops.board import start_board
        except ImportError:
            logger.warning("msmon: board manager not available in this build; no board started")
            return
        try:
            self.handle = start_board(
                self.plan.board_dir(), port=self.plan.request.port, backend=self.plan.board_backend,
                detach=self.plan.request.keep_board,
            )
        except Exception as exc:  # the board never takes training down
            logger.warning("msmon: board not started: %s", exc)
            return
        self.say(f"board: {self.handle.url}  ({self.plan.board_backend}, pid {self.handle.pid})")

    def stop(self) -> None:
        if self.thread.is_alive():
            self.thread.join(BOARD_JOIN_TIMEOUT_S)
        if self.handle is None:
            return
        if self.plan.request.keep_board:
            self.say(f"board kept running: {self.handle.url} (stop it with: msmon board stop)")
            return
        try:
            self.handle.stop()
        except Exception as exc:
            logger.warning("msmon: could not stop the board (pid %s): %s", self.handle.pid, exc)


class Run:
    """One executing run: owns the run directory, the training child, the board and the signals."""

    def __init__(self, plan: RunPlan, say: Callable[[str], None], view: dict[str, Any] | None = None) -> None:
        self.plan = plan
        self.say = say
        self.info: dict[str, Any] = {}
        self.board = _Board(plan, say)
        self.launcher = launcher.Launcher(plan.request, plan.run_dir, plan.settings.run_name, view)
        self.signal_received: int | None = None
        self.signal_count = 0
        self._log_handler: logging.Handler | None = None
        self._log_level = logging.NOTSET
        self._finished = threading.Lock()
        self._done = False
        self._finishing = False
        self._previous: dict[int, Any] = {}

    # -- setup ----------------------------------------------------------------------------------
    def create(self) -> None:
        """Run directory, logs, snapshot, backup, run.json ``running``."""
        plan, run_dir = self.plan, self.plan.run_dir
        new = rundir.create_run_dir(run_dir, resume=plan.request.resume or plan.request.joins_run)
        self._attach_log(run_dir / rundir.LOGS / "msmon.log")
        if not new and not plan.request.joins_run and (run_dir / runinfo.RUN_JSON).exists():
            previous = sorted(run_dir.glob("run.previous-*.json"))
            os.replace(run_dir / runinfo.RUN_JSON, run_dir / f"run.previous-{len(previous) + 1}.json")
        rundir.write_snapshot(
            run_dir, plan.loaded.text or "", plan.result.monitor_config(), plan.loaded.section("monitor_config")
        )
        self._backup()
        self.info = runinfo.start_info(
            config_path=str(Path(plan.request.config).absolute()) if plan.loaded.path else None,
            project_name=plan.settings.project_name, run_name=plan.settings.run_name, run_dir=run_dir,
            command=plan.request.command, device_target=str(_get(plan.training, "context.device_target", "Ascend")),
            device_count=plan.request.worker_num or 1, total_steps=plan.result.total_steps, cwd=plan.cwd,
            pid=os.getpid(),
        )
        runinfo.write_run_info(run_dir, self.info, plan.request.run_json)
        logger.info("msmon: run %s started in %s", plan.settings.run_name, run_dir)

    def _attach_log(self, path: Path) -> None:
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setLevel(logging.INFO)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        self._log_level = logger.level
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
        self._log_handler = handler

    def _backup(self) -> None:
        if self.plan.loaded.path is None:
            return
        try:
            from msmon.ops.backup import backup_config
        except ImportError:
            logger.info("msmon: config backup not available in this build; skipped")
            return
        try:
            copy = backup_config(self.plan.loaded.path, note=f"msmon run {self.plan.settings.run_name}")
        except Exception as exc:  # a backup failure never blocks the run
            logger.warning("msmon: config backup failed: %s", exc)
        else:
            logger.info("msmon: config backed up: %s", getattr(copy, "path", copy))

    # -- signals --------------------------------------------------------------------------------
    def install_signals(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore_signals(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.signal_count += 1
        name = signal.Signals(signum).name
        if self._finishing:
            logger.warning("msmon: %s received while the run is being finished: finishing first", name)
            return
        if self.signal_count == 1:
            self.signal_received = signum
            logger.warning("msmon: %s received: stopping at the end of the current step (again to force)", name)
            self.launcher.request_stop()
            return
        logger.warning("msmon: second %s: forcing exit after flushing", name)
        self.launcher.force_stop()
        self.finish("interrupted", error=f"forced by a second {name}")
        os._exit(self.exit_code("interrupted"))

    # -- training -------------------------------------------------------------------------------
    def execute(self) -> RunOutcome:
        """Train in the child (one worker, or the ranks through msrun) and account for the end of the run."""
        if self.plan.request.board:
            self.board.start()
        self.install_signals()
        try:
            result = self.launcher.run()
            status = result.status
            if self.signal_received is not None and status not in ("failed", "completed"):
                status = "interrupted"
            return self.finish(status, error=result.error if status != "interrupted" else None)
        finally:
            self.restore_signals()

    # -- the end --------------------------------------------------------------------------------
    def exit_code(self, status: str) -> int:
        if status == "interrupted":
            return int(EXIT_BY_SIGNAL.get(self.signal_received or signal.SIGINT, ExitCode.INTERRUPTED_SIGINT))
        return int(EXIT_BY_STATUS[status])

    def finish(self, status: str, error: str | None = None) -> RunOutcome:
        """Stop the board, write the final run.json (once)."""
        self._finishing = True  # from here on a signal waits for the end instead of re-entering
        with self._finished:
            code = self.exit_code(status)
            if self._done:
                return RunOutcome(status, code, self.plan.run_dir, error)
            self._done = True
            last_step, dropped, alerts = self.launcher.totals()
            self.board.stop()
            self.info = runinfo.finish_info(
                self.info, status=status, exit_code=code, last_step=last_step, dropped_records=dropped,
                alert_count=alerts, error=error,
            )
            runinfo.write_run_info(self.plan.run_dir, self.info, self.plan.request.run_json)
            logger.info("msmon: run ended: %s (exit %d, last step %s)", status, code, last_step)
            if self._log_handler is not None:
                logger.removeHandler(self._log_handler)
                self._log_handler.close()
                logger.setLevel(self._log_level)
            return RunOutcome(status, code, self.plan.run_dir, error, last_step)


def error_summary(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _get(data: dict[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def run(plan: RunPlan, say: Callable[[str], None], view: dict[str, Any] | None = None) -> RunOutcome:
    """Create the run directory and execute the plan; always ends with a final run.json.

    ``view`` tells the training child how to show progress: ``{"live_view": bool, "plain": bool}``.
    """
    current = Run(plan, say, view)
    current.create()
    say(f"run directory: {plan.run_dir}")
    return current.execute()

