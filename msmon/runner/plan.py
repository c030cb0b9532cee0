"""What ``msmon run`` was asked for and the validated plan of the run (nothing is created here)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import UnionType

from msmon import layout
from msmon.compat import PipelineLayout, pipeline_layout
from msmon.config.loader import LoadedConfig, load_config
from msmon.config.mindformers_yaml import check_run_mode, mindformers_config
from msmon.config.schema import MonitorSettings
from msmon.errors import ExitCode, MsmonError
from msmon.foreign import ConfigValue
from msmon.launch_layout import LaunchLayout
from msmon.ops.board import board_argv
from msmon.ops.doctor import require_runnable
from msmon.runner import msrun
from msmon.runner.checkpoints import ResumePoint
from msmon.runner.launch_command import check_command, msrun_ranks
from msmon.runner.resume import further_command, resume_point
from msmon.util.jsonfiles import JsonObject
from msmon.validate.names import needs_generated_name
from msmon.validate.validator import ValidationResult, validate


@dataclass(frozen=True)
class ResumeRecord:
    """What ``msmon resume`` replays of a run's request (run.json's ``request``): its overrides (run_mindformer.py's
    flags already turned into them), its launch layout and its restart policy."""

    overrides: tuple[str, ...] = ()
    launch_layout: LaunchLayout = LaunchLayout()
    max_restarts: int = 0
    restart_backoff_s: float = 10.0

    def to_json(self) -> JsonObject:
        """run.json's ``request``: the launch layout's keys beside the overrides and the restart policy."""
        return {"overrides": list(self.overrides), **dataclasses.asdict(self.launch_layout),
                "msrun_args": list(self.launch_layout.msrun_args), "max_restarts": self.max_restarts,
                "restart_backoff_s": self.restart_backoff_s}

    @classmethod
    def from_json(cls, data: JsonObject) -> ResumeRecord:
        """run.json's ``request``; MsmonError when it is not one this msmon wrote."""
        found = {name: data.get(name, default) for name, _, _, default in _RECORD_TYPES}
        wrong = [name for name, kind, optional, _ in _RECORD_TYPES
                 if not (found[name] is None and optional or _is(found[name], kind))]
        if wrong:
            raise MsmonError(f"run.json's request is unreadable: {', '.join(wrong)}",
                             "resume it with msmon run CONFIG --resume")
        launch = LaunchLayout(found["worker_num"], found["local_worker_num"], found["master_addr"],
                              found["master_port"], found["node_rank"], tuple(map(str, found["msrun_args"])))
        return cls(tuple(map(str, found["overrides"])), launch, found["max_restarts"], found["restart_backoff_s"])


#: (key, type, may be None, default when absent) of run.json's ``request`` read back as a ResumeRecord.
_RECORD_TYPES: tuple[tuple[str, type | UnionType, bool, object], ...] = (
    ("overrides", list | tuple, False, ()), ("worker_num", int, True, None), ("local_worker_num", int, True, None),
    ("master_addr", str, False, "127.0.0.1"), ("master_port", int, False, 8118), ("node_rank", int, True, None),
    ("msrun_args", list | tuple, False, ()), ("max_restarts", int, False, 0),
    ("restart_backoff_s", int | float, False, 10.0),
)


def _is(value: object, kind: type | UnionType) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


@dataclass
class RunRequest:
    """What the user asked ``msmon run`` for."""

    config: str
    overrides: list[str] = field(default_factory=list)
    board: bool = False
    port: int = 8080
    keep_board: bool = False
    resume: bool = False
    launch_layout: LaunchLayout = LaunchLayout()  # the ranks and msrun's flags
    launch: list[str] = field(default_factory=list)  # msmon run CONFIG -- COMMAND: the user's own launch
    max_restarts: int = 0
    restart_backoff_s: float = 10.0
    command: list[str] = field(default_factory=lambda: list(sys.argv))

    def resume_record(self) -> ResumeRecord:
        """What a later ``msmon resume`` of this run replays (kept in run.json)."""
        return ResumeRecord(tuple(self.overrides), self.launch_layout, self.max_restarts, self.restart_backoff_s)

    @property
    def joins_run(self) -> bool:
        """A machine other than node 0 of a multi-machine run: node 0 creates the run directory."""
        return self.launch_layout.joins_run

    @property
    def run_json(self) -> str:
        return f"run.node{self.launch_layout.node_rank}.json" if self.joins_run else layout.RUN_JSON


@dataclass
class RunPlan:
    """A validated run: everything decided, nothing created yet."""

    request: RunRequest
    loaded: LoadedConfig
    result: ValidationResult
    training: dict[str, ConfigValue]  # what mindformers gets: the run directory's mindformers.yaml
    run_dir: Path
    cwd: Path
    resume_point: ResumePoint | None = None  # --resume: the checkpoint the first attempt continues from

    @property
    def config_file(self) -> Path:
        """The absolute path of the training YAML (a quickstart's name resolved to its shipped file)."""
        return Path(self.loaded.path or self.request.config).absolute()

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

    @property
    def pipeline(self) -> PipelineLayout:
        """Which ranks hold the loss (pipeline stages) on the ranks of this run."""
        return pipeline_layout(self.training, self.request.launch_layout.world_size)

    @property
    def writer_rank(self) -> int:
        """The rank that writes the metrics: 0, or the first rank holding the loss under pipeline stages."""
        return self.pipeline.loss_rank

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
        """The board's command line, as the board manager runs it (None without --board)."""
        backend = self.board_backend
        if not self.request.board or backend is None:
            return None
        return board_argv(backend, self.board_dir(), self.request.port)

    def worker_command(self) -> list[str]:
        request = self.request
        return msrun.worker_command(request.launch_layout, self.run_dir, self.writer_rank, command=request.launch,
                                    config=request.config)

    def describe(self) -> list[str]:
        """The dry-run plan, one line per item."""
        s, request, point = self.settings, self.request, self.resume_point
        board = self.board_command()
        return [
            f"config:        {self.config_file}",
            f"run directory: {self.run_dir}" + ("  (resume)" if self.request.resume else ""),
            *([f"resume from:   step {point.step} ({point.path})"] if point else []),
            "restarts:      " + (f"up to {request.max_restarts} (back-off from {request.restart_backoff_s:g} s)"
                                 if request.max_restarts else "none"),
            f"monitoring:    {'on' if s.enable_monitor else 'off'}"
            + ("" if s.use_callback else " (use_callback false: no callback)"),
            f"backends:      {', '.join(s.monitor_type) if self.monitoring else 'none'}",
            f"metrics:       {', '.join(s.track_metrics)} every {s.log_interval} steps",
            f"metrics from:  {self.pipeline.describe()}",
            f"total steps:   {self.result.total_steps if self.result.total_steps is not None else 'unknown'}",
            f"callbacks:     {' -> '.join(self.callback_order()) or 'none'}",
            f"board:         {' '.join(board) if board else 'off'}",
            f"launcher:      {' '.join(self.worker_command())}" + ("  (your command, monitored)"
                                                                     if request.launch else ""),
            f"mindformers outputs: {self.run_dir / layout.FRAMEWORK_OUTPUT}",
        ]


def make_plan(request: RunRequest, result: ValidationResult, loaded: LoadedConfig, cwd: Path | None = None) -> RunPlan:
    """The plan of a valid run (creates nothing)."""
    cwd = (cwd or Path.cwd()).absolute()
    training = mindformers_config(loaded)
    check_run_mode(training["run_mode"])
    _check_shared_run_name(request, loaded)
    if not request.launch:  # the user's own launch may set the parallel keys itself (--use_parallel True)
        msrun.check_config(training, request.launch_layout)
    save_dir = Path(result.settings.save_dir).expanduser()
    run_dir = (save_dir if save_dir.is_absolute() else cwd / save_dir) / result.settings.project_name
    return RunPlan(request, loaded, result, training, run_dir / str(result.settings.run_name), cwd)


def _check_shared_run_name(request: RunRequest, loaded: LoadedConfig) -> None:
    """Every machine of a multi-machine run must name the same run directory: a fixed ``run_name``."""
    node_rank = request.launch_layout.node_rank
    if node_rank is None:
        return
    section = loaded.section("monitor_config")
    raw = section.get("run_name") if isinstance(section, dict) else None
    if (raw is None or isinstance(raw, str)) and (needs_generated_name(raw) or "${now" in (raw or "")):
        raise MsmonError(
            f"--node-rank {node_rank}: a multi-machine run needs a fixed monitor_config.run_name (got "
            f"{raw!r}: each machine would generate its own and write to another run directory)",
            "set the same run_name on every machine, e.g. monitor_config.run_name=pretrain_0612",
        )


def _with_command_ranks(request: RunRequest) -> RunRequest:
    """``-- COMMAND``: its program checked; the ranks of its msrun line (if any) become the request's."""
    if request.launch_layout.worker_num is not None or request.launch_layout.msrun_args:
        raise MsmonError("--worker-num and --msrun-arg describe msmon's own launch, not one after `--`",
                         "put the ranks in COMMAND's msrun flags", ExitCode.USAGE)
    check_command(request.launch)
    ranks = msrun_ranks(request.launch)
    if ranks is None:
        return request
    return dataclasses.replace(request, launch_layout=dataclasses.replace(
        request.launch_layout, worker_num=ranks.worker_num, local_worker_num=ranks.local_worker_num,
        node_rank=ranks.node_rank))


def prepare(request: RunRequest, cwd: Path | None = None) -> tuple[ValidationResult, RunPlan | None]:
    """Validate ``request``; the plan is None when the config has an error finding."""
    if request.launch:
        request = _with_command_ranks(request)
    request.launch_layout.check()
    require_runnable()  # msmon doctor's blocking checks (MindSpore and mindformers usable) before anything
    loaded = load_config(request.config, request.overrides)
    check_run_mode(loaded.section("run_mode"))  # a predict config is refused before its findings
    result = validate(loaded, resume=request.resume or request.joins_run, cwd=cwd)
    if not result.valid:
        return result, None
    plan = make_plan(request, result, loaded, cwd)
    if request.resume:
        plan.resume_point = resume_point(
            plan.run_dir, training=plan.training, world_size=request.launch_layout.world_size,
            total_steps=result.total_steps, joins_run=request.joins_run,
            further=further_command(request.config, request.overrides, plan.training))
    return result, plan
