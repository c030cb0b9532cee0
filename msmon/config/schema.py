"""msmon's keys in ``monitor_config``, with defaults, plus mindformers' own keys of that section."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from msmon.compat import MONITOR_CONFIG_KEYS
from msmon.config.fields import doc
from msmon.config.health import HealthSettings
from msmon.config.metrics import CORE_METRICS

BACKENDS: tuple[str, ...] = ("mindinsight", "tensorboard", "mlflow", "file")
DEFAULT_SAVE_DIR = "./monitor_logs"

#: mindformers' own ``monitor_config`` keys in any release msmon knows (msmon.compat.MONITOR_CONFIG_KEYS); they keep
#: their mindformers meaning and are passed through to mindformers untouched (validate checks them against the
#: installed release).
MINDFORMERS_MONITOR_KEYS: frozenset[str] = frozenset().union(*MONITOR_CONFIG_KEYS.values())


@dataclass(frozen=True)
class FileOptions:
    csv: bool = doc(False, "also write metrics.csv beside metrics.jsonl")
    fsync_interval_s: float = doc(2.0, "fsync metrics.jsonl at least this often (and at close)")


@dataclass(frozen=True)
class TensorBoardOptions:
    flush_secs: float = doc(2.0, "flush event files at least this often, so a killed run is not empty")


@dataclass(frozen=True)
class MlflowOptions:
    tracking_uri: str | None = doc(
        None, "MLflow tracking URI: http(s)://host:port or sqlite:///path.db (required for mlflow)", "MS503, MS504"
    )
    experiment_name: str | None = doc(None, "MLflow experiment; default: project_name")
    batch_size: int = doc(100, "metric values sent per log_batch request")
    timeout_s: float = doc(10.0, "timeout of one request to the tracking server")


@dataclass(frozen=True)
class WriterOptions:
    queue_size: int = doc(1000, "records held for the background writer; the oldest are dropped beyond it")
    per_rank: bool = doc(False, "every rank writes its own run directory (rank_N); default: rank 0 only")


@dataclass(frozen=True)
class DiskGuardOptions:
    min_free_mb: int | None = doc(
        1024, "stop writing heavy outputs (summaries, event files) when free disk falls below this"
    )
    max_run_mb: int | None = doc(None, "stop writing heavy outputs when the run directory exceeds this size")


@dataclass(frozen=True)
class FlightRecorderOptions:
    steps: int = doc(
        200, "steps of per-step values (loss, grad norm, loss scale, overflow, step time, group norms) kept "
        "in host memory; an alert writes them to context/; 0 turns it off", "MS404", at_least=0, at_most=100000,
    )
    max_files: int = doc(50, "context files one run writes at most (one per alert)", "MS404", at_least=1)


@dataclass(frozen=True)
class ReferenceOptions:
    runs: list[str] = doc(
        [], "earlier runs this run must follow (health.reference_drift): msmon run directories, mindformers' info.log "
        "(or its rank_N directory), TensorBoard event directories, CSV / JSON Lines files with a step column", "MS813"
    )
    tags: list[str] = doc([], "metric=tag pairs where a TensorBoard tag or a table column is not the default name "
                          "(loss='lm loss')", "MS813")


@dataclass(frozen=True)
class MonitorSettings:
    """msmon's resolved ``monitor_config``: every key has a documented default."""

    enable_monitor: bool = doc(True, "master switch; false turns monitoring off (validation still runs)")
    monitor_type: list[Literal["mindinsight", "tensorboard", "mlflow", "file"]] = doc(
        ["mindinsight", "file"], "backend name or list of names", "MS501, MS502"
    )
    file: FileOptions = field(default_factory=FileOptions)
    tensorboard: TensorBoardOptions = field(default_factory=TensorBoardOptions)
    mlflow: MlflowOptions = field(default_factory=MlflowOptions)
    writer: WriterOptions = field(default_factory=WriterOptions)
    project_name: str = doc("default", "groups runs: <save_dir>/<project_name>/<run_name>", "MS102")
    run_name: str | None = doc(
        None, "unique run name; empty or 'auto' generates <model>_<YYYYmmdd_HHMMSS>", "MS101, MS103"
    )
    log_interval: int = doc(10, "log every N steps (>= 1)", "MS401, MS402, MS403")
    track_metrics: list[str] = doc(list(CORE_METRICS), "metrics to record; aliases accepted", "MS301, MS302, MS303")
    save_dir: str = doc(DEFAULT_SAVE_DIR, "root of all run directories (ASCII, no whitespace)", "MS201-MS204")
    disk: DiskGuardOptions = field(default_factory=DiskGuardOptions)
    use_callback: bool = doc(True, "inject msmon's callback into the Trainer (false: validate + board only)")
    verbose: bool = doc(False, "print the registration line and one console line per logged step")
    peak_tflops: float | None = doc(
        None, "the device's peak dense TFLOPS (FP16/BF16) for MFU; default: msmon's table by device name", above=0.0
    )
    device_name: str | None = doc(
        None, "the device's name for the peak table (a chip, or a tier: A3-752T); default: as MindSpore reports it"
    )
    flight_recorder: FlightRecorderOptions = field(default_factory=FlightRecorderOptions)
    health: HealthSettings = field(default_factory=HealthSettings)
    reference: ReferenceOptions = field(default_factory=ReferenceOptions)

    def run_dir(self) -> Path:
        """``<save_dir>/<project_name>/<run_name>`` (run_name must be resolved first)."""
        if not self.run_name:
            raise ValueError("run_name is not resolved")
        return Path(self.save_dir) / self.project_name / self.run_name


MSMON_MONITOR_KEYS: frozenset[str] = frozenset(MonitorSettings.__dataclass_fields__)
