"""What crosses between the ``msmon run`` parent and its training processes: the spec a rank receives (in its
environment) and the result it leaves (``logs/rank_N.result.json``). Both are frozen dataclasses, serialised here
and nowhere else.

The parent resolves and validates the config once: a rank receives the resolved settings in its spec and reads the
training config from the run directory's ``mindformers.yaml`` (the one file mindformers loads).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from msmon import layout
from msmon.anomaly import StopRequest
from msmon.config.coerce import build
from msmon.config.schema import MonitorSettings
from msmon.status import Attempt, RunStatus
from msmon.util.atomic import atomic_write_json
from msmon.util.internal_errors import InternalErrors
from msmon.util.jsonfiles import JsonObject, JsonValue, read_objects

SPEC_ENV = "MSMON_WORKER_SPEC"


class SpecError(ValueError):
    """The environment holds no spec, or one this msmon cannot read."""


@dataclass(frozen=True)
class ViewOptions:
    """How the writing rank shows progress: the live panel on a terminal, else plain lines."""

    plain: bool = False
    framework_logs: bool = False  # every framework line above the panel, not only warnings and errors
    total_steps: int | None = None


@dataclass(frozen=True)
class RankSpec:
    """Everything a training process of one attempt needs from the parent."""

    run_dir: Path
    settings: MonitorSettings  # resolved and validated by the parent, run_name included
    attempt: Attempt
    world_size: int = 1
    writer_rank: int = 0
    node_rank: int | None = None
    view: ViewOptions = field(default_factory=ViewOptions)
    config_path: Path | None = None  # the user's CONFIG: under `msmon run CONFIG -- COMMAND` the Trainer gets
    #                                  mindformers.yaml in its place
    heartbeat_dir: Path | None = None  # a run over several machines: the ranks' liveness files on this machine's disk

    @property
    def mindformers_yaml(self) -> Path:
        return self.run_dir / layout.MINDFORMERS_YAML

    def to_env(self) -> dict[str, str]:
        """The environment variable that carries this spec (msrun passes it on to every rank)."""
        data = {
            "run_dir": str(self.run_dir), "settings": dataclasses.asdict(self.settings),
            "attempt": dataclasses.asdict(self.attempt), "world_size": self.world_size,
            "writer_rank": self.writer_rank, "node_rank": self.node_rank, "view": dataclasses.asdict(self.view),
            "config_path": None if self.config_path is None else str(self.config_path),
            "heartbeat_dir": None if self.heartbeat_dir is None else str(self.heartbeat_dir),
        }
        return {SPEC_ENV: json.dumps(data)}

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RankSpec:
        """The spec of this process; SpecError when it is missing or unreadable."""
        raw = environ.get(SPEC_ENV)
        if not raw:
            raise SpecError(f"{SPEC_ENV} is not set (this process is started by `msmon run`)")
        try:
            data = json.loads(raw)
            settings, problems = build(MonitorSettings, data["settings"], "monitor_config")
            spec = cls(
                run_dir=Path(data["run_dir"]), settings=settings, attempt=Attempt(**data["attempt"]),
                world_size=int(data["world_size"]), writer_rank=int(data["writer_rank"]),
                node_rank=None if data["node_rank"] is None else int(data["node_rank"]),
                view=ViewOptions(**data["view"]),
                config_path=None if data["config_path"] is None else Path(data["config_path"]),
                heartbeat_dir=None if data["heartbeat_dir"] is None else Path(data["heartbeat_dir"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SpecError(f"{SPEC_ENV} is not a spec of this msmon ({type(exc).__name__}: {exc})") from exc
        if problems:
            raise SpecError(f"{SPEC_ENV}: {problems[0].path}: {problems[0].message}")
        return spec


@dataclass(frozen=True)
class BackendAccounting:
    """What one rank's backends kept and lost."""

    backends: dict[str, JsonObject] = field(default_factory=dict)  # per backend: written, dropped, lost, ...
    records_lost: int | None = None  # records metrics.jsonl did not keep; None without the file backend
    failed_to_close: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankResult:
    """How one rank's training ended, as it left it for the parent."""

    rank: int
    status: RunStatus
    error: str | None = None
    last_step: int | None = None
    dropped_records: int = 0
    alert_count: int = 0
    pid: int | None = None
    accounting: BackendAccounting = field(default_factory=BackendAccounting)
    internal_errors: InternalErrors = field(default_factory=InternalErrors)
    stop: StopRequest | None = None  # the stop a detector's action asked for (also one at the last step)
    framework_warnings: int = 0  # the framework's warning and error lines in logs/console.log (the writing rank)
    framework_errors: int = 0

    def to_json(self) -> JsonObject:
        return {
            "rank": self.rank, "status": self.status.value, "error": self.error, "last_step": self.last_step,
            "dropped_records": self.dropped_records, "alert_count": self.alert_count, "pid": self.pid,
            "backends": self.accounting.backends, "records_lost": self.accounting.records_lost,
            "backends_failed_to_close": list(self.accounting.failed_to_close),
            "internal_errors": self.internal_errors.count, "first_internal_error": self.internal_errors.first,
            "stop": self.stop.to_json() if self.stop is not None else None,
            "framework_warnings": self.framework_warnings, "framework_errors": self.framework_errors,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> RankResult:
        """A result file's content; ValueError (or KeyError, TypeError) when it is not one."""
        status = RunStatus(data["status"])
        last = data.get("last_step")
        lost = data.get("records_lost")
        stop = data.get("stop")
        return cls(
            rank=int(data["rank"]), status=status, error=data.get("error"),
            last_step=int(last) if last is not None else None,
            dropped_records=int(data.get("dropped_records") or 0), alert_count=int(data.get("alert_count") or 0),
            pid=data.get("pid"),
            accounting=BackendAccounting(dict(data.get("backends") or {}), int(lost) if lost is not None else None,
                                         tuple(data.get("backends_failed_to_close") or ())),
            internal_errors=InternalErrors(int(data.get("internal_errors") or 0), data.get("first_internal_error")),
            stop=StopRequest.from_json(stop) if stop is not None else None,
            framework_warnings=int(data.get("framework_warnings") or 0),
            framework_errors=int(data.get("framework_errors") or 0),
        )


def write_result(run_dir: Path, result: RankResult) -> None:
    """Leave one rank's result for the parent (its directory recreated if it was removed)."""
    path = layout.rank_result(run_dir, result.rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, result.to_json())


def read_results(run_dir: Path) -> dict[int, RankResult]:
    """rank -> its result, for every readable result file."""
    results = read_objects((run_dir / layout.LOGS).glob(layout.RESULT_GLOB), RankResult.from_json)
    return {result.rank: result for result in results}


def clear_results(run_dir: Path) -> None:
    """Remove the results (and the parent's requests to flush and exit) left by an earlier attempt in this run
    directory."""
    for pattern in (layout.RESULT_GLOB, layout.FORCE_GLOB):
        for old in (run_dir / layout.LOGS).glob(pattern):
            old.unlink(missing_ok=True)
