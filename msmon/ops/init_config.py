"""``msmon init CONFIG``: add a starting ``monitor_config`` to a training YAML that has none.

The section is appended as text, so every comment and the order of the file stay as they were; a backup copy is
made first (msmon.ops.backup) and the file is replaced atomically, its permissions kept. A file that already has a
``monitor_config`` section (msmon's or mindformers' own) is left alone: merging into it would need a YAML editor
that keeps comments, and the user knows best what is there.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from msmon.config.loader import read_config_text
from msmon.errors import MsmonError
from msmon.ops.backup import BackupResult, backup_config
from msmon.util.atomic import atomic_write_text

#: The section, as the seed article sets it up: the loss, the grad norm and the learning rate every 10 steps, to
#: MindInsight's board and plain files, the health detectors on; ``{project}``: the YAML's name.
SECTION = """
# msmon: what to watch and where it goes (added by `msmon init`; every key: msmon validate FILE --all).
monitor_config:
  enable_monitor: True
  monitor_type: [mindinsight, file]        # MindInsight's board and metrics.jsonl; also tensorboard, mlflow
  track_metrics: [loss, grad_norm, learning_rate, throughput, global_step]
  log_interval: 10                         # one record every 10 steps: device values are read only then
  save_dir: ./monitor_logs                 # <save_dir>/<project_name>/<run_name>/
  project_name: {project}
  run_name: auto                           # <model>_<date>_<time>: a new run directory each launch
  health:                                  # alerts on a grad-norm runaway, a loss spike, a dead or NaN loss
    nonfinite: {{action: stop}}              # a NaN or Inf loss ends the run at once (exit 4)
"""
PROJECT_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class InitResult:
    """The file written and the backup of what it was."""

    path: Path
    backup: BackupResult


def add_monitor_config(path: str | os.PathLike[str]) -> InitResult:
    """Append ``SECTION`` to the training YAML at ``path``; MsmonError (exit 1, nothing written) when it cannot."""
    config = Path(path)
    text = read_config_text(config)  # the same checks and messages as every other command
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MsmonError(f"{config} is not valid YAML: {str(exc).splitlines()[0]}", "fix the file first") from None
    if not isinstance(data, dict):
        raise MsmonError(f"{config} is not a training YAML (no top-level keys)", "pass a mindformers training YAML")
    if "monitor_config" in data:
        line = next((n for n, raw in enumerate(text.splitlines(), 1) if raw.startswith("monitor_config")), None)
        raise MsmonError(f"{config} already has a monitor_config section" + (f" (line {line})" if line else ""),
                         f"edit it, then check it: msmon validate {config} --all (it shows every key)")
    project = PROJECT_NAME.sub("_", config.stem) or "training"
    saved = backup_config(config, note="before msmon init")
    mode = config.stat().st_mode & 0o7777
    atomic_write_text(config, text + ("" if text.endswith("\n") else "\n") + SECTION.format(project=project))
    os.chmod(config, mode)
    return InitResult(config, saved)
