"""The run directory's layout: the name of every file msmon writes or reads in ``<save_dir>/<project>/<run>/``.

Paths are relative to the run directory (``run_dir / layout.METRICS``); docs/architecture.md describes each.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

RUN_JSON = "run.json"
CONFIG_SNAPSHOT = "config.yaml"
RESOLVED_MONITOR = "monitor_config.resolved.yaml"
MINDFORMERS_YAML = "mindformers.yaml"  # the config the training loads (msmon.config.mindformers_yaml)
METRICS = "metrics.jsonl"
METRICS_CSV = "metrics.csv"
ALERTS = "alerts.jsonl"
HEARTBEATS = "heartbeats"  # each rank's liveness: heartbeats/rank_N.json (or node_K.json); its step costs: rank_N.jsonl
STACKS = "stacks"  # each rank's Python stacks, captured when the run stalls: stacks/rank_N.txt
REPORT = "report.html"
LOGS = "logs"
MSMON_LOG = f"{LOGS}/msmon.log"
CONSOLE_LOG = f"{LOGS}/console.log"  # the training's terminal output while the live panel showed
FRAMEWORK_OUTPUT = f"{LOGS}/output"  # mindformers' output_dir and ./output/log
CHECKPOINTS = f"{FRAMEWORK_OUTPUT}/checkpoint"  # mindformers' CheckpointMonitor: rank_N/<prefix>_rank_N-E_S.ckpt
RESUME_LINKS = f"{LOGS}/resume"  # what load_checkpoint points at when one process resumes from safetensors
MLFLOW_RUN = "mlflow_run.json"  # the MLflow run this run writes to (every attempt continues it)
RANK_LOGS = f"{LOGS}/ranks"  # msrun's scheduler.log and worker_N.log
GRAPHS = f"{LOGS}/graphs"  # MindSpore's saved graphs (save_graphs); a failed compile's IR: logs/rank_N/om/
RESULT_GLOB = "rank_*.result.json"
FORCE_GLOB = "rank_*.force"
CONTEXT_DIR = "context"  # the flight recorder's per-step window before each alert
PROBES = "probes"  # msmon probe's requests: probes/request.json, each rank's outcome in probes/<id>/rank_N.json
PROBE_REQUEST = f"{PROBES}/request.json"
PROFILES = "profiles"  # the profile probe's windows: profiles/<from>-<to>/rank_N/ (the profiler's own layout)
DISTRIBUTIONS = "distributions"  # the distributions probe's windows: distributions/<from>-<to>/rank_N/
DISTRIBUTIONS_FILE = "distributions.jsonl"  # msmon's own file there: one line per logging step
PROFILE_SUMMARY = "msmon_summary.json"  # msmon's summary of one rank's profile, beside the profiler's output
RESERVE = ".msmon-reserve"  # disk space held for the final run.json (released at the end)

#: Files whose presence makes a directory a run directory.
MARKERS: tuple[str, ...] = (RUN_JSON, METRICS)


def superseded(name: str, attempt: int) -> str:
    """Where the records of ``name`` (metrics.jsonl, metrics.csv, alerts.jsonl) that ``attempt`` or an earlier one
    wrote after the step the next attempt resumed from are kept: ``metrics.attempt-1.jsonl``."""
    stem, dot, suffix = name.partition(".")
    return f"{stem}.attempt-{attempt}{dot}{suffix}"


def superseded_checkpoints(run_dir: Path, attempt: int) -> Path:
    """Where the checkpoints ``attempt`` saved after the step a rollback went back to are kept (its rank_N/ below)."""
    return run_dir / f"{CHECKPOINTS}.superseded" / f"attempt-{attempt}"


def rank_log(run_dir: Path, rank: int) -> Path:
    """msmon's log of one rank (rank 0: ``logs/msmon.log``)."""
    return run_dir / (MSMON_LOG if rank == 0 else f"{LOGS}/msmon.rank_{rank}.log")


def scheduler_log(run_dir: Path, node_rank: int | None) -> Path:
    """msmon's log of msrun's scheduler process (it runs the worker command too, without training)."""
    return run_dir / LOGS / (f"msmon.scheduler.node_{node_rank}.log" if node_rank else "msmon.scheduler.log")


def rank_force_request(run_dir: Path, rank: int) -> Path:
    """Left by the parent ``msmon run`` for a rank that must flush and exit now: it waits in a step's collective for
    a rank that ended, and its training thread, inside the framework, runs no signal handler."""
    return run_dir / LOGS / f"rank_{rank}.force"


def rank_result(run_dir: Path, rank: int) -> Path:
    """The end status one rank leaves for the parent ``msmon run``."""
    return run_dir / LOGS / f"rank_{rank}.result.json"


def alert_context(step: int, detector: str) -> str:
    """The flight recorder's file for one alert, relative to the run directory (the alert's ``context_file``)."""
    return f"{CONTEXT_DIR}/step_{step}_{detector}.jsonl"


def rank_heartbeat(run_dir: Path, rank: int) -> Path:
    """One rank's liveness file, rewritten every second by that rank."""
    return run_dir / HEARTBEATS / f"rank_{rank}.json"


def rank_costs(run_dir: Path, rank: int) -> Path:
    """One rank's step costs, a line per logged step (``msmon.step_cost.StepCost``), appended by that rank."""
    return run_dir / HEARTBEATS / f"rank_{rank}.jsonl"


def machine_heartbeat(run_dir: Path, node: int) -> Path:
    """One machine's ranks' liveness, gathered by that machine's ``msmon run`` (a run over several machines)."""
    return run_dir / HEARTBEATS / f"node_{node}.json"


def machine_heartbeat_files(run_dir: Path) -> list[Path]:
    return sorted((Path(run_dir) / HEARTBEATS).glob("node_*.json"))


def local_heartbeats(run_dir: Path, node: int) -> Path:
    """Where the ranks of machine ``node`` of a run over several machines rewrite their liveness files: a directory
    on that machine's own disk (not the shared run directory), one per user, run and machine."""
    digest = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"msmon-heartbeats-{os.getuid()}" / f"{digest}-node{node}"


def heartbeat_files(run_dir: Path, suffix: str) -> dict[int, Path]:
    """rank -> its ``heartbeats/rank_N<suffix>`` file (``.json``: the liveness files, ``.jsonl``: the step costs)."""
    return rank_files(Path(run_dir) / HEARTBEATS, suffix)


def rank_files(directory: Path, suffix: str) -> dict[int, Path]:
    """rank -> its ``rank_N<suffix>`` file in ``directory``."""
    found = {}
    for path in Path(directory).glob(f"rank_*{suffix}"):
        match = re.fullmatch(rf"rank_(\d+){re.escape(suffix)}", path.name)
        if match is not None:
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def rank_stacks(run_dir: Path, rank: int) -> Path:
    """Where one rank writes its Python stacks when ``msmon run`` asks (a stall)."""
    return run_dir / STACKS / f"rank_{rank}.txt"


def probe_mark(run_dir: Path, request_id: str, rank: int) -> Path:
    """What one rank did with a probe request (``msmon.probe.ProbeMark``)."""
    return run_dir / PROBES / request_id / f"rank_{rank}.json"


def probe_purpose(run_dir: Path, request_id: str) -> Path:
    """Why msmon requested a probe itself (``msmon.probe.purpose``: the baseline profile, an alert's)."""
    return run_dir / PROBES / request_id / "purpose.json"


def distributions_dir(run_dir: Path, first_step: int, last_step: int, rank: int) -> Path:
    """One rank's histograms of the steps ``first_step`` to ``last_step`` (msmon's, TensorBoard's, MindInsight's)."""
    return run_dir / DISTRIBUTIONS / f"{first_step}-{last_step}" / f"rank_{rank}"


def profile_dir(run_dir: Path, first_step: int, last_step: int, rank: int) -> Path:
    """One rank's profile of the steps ``first_step`` to ``last_step`` (the profiler writes below it)."""
    return run_dir / PROFILES / f"{first_step}-{last_step}" / f"rank_{rank}"
