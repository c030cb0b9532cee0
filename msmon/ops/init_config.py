"""``msmon init CONFIG``: add msmon's starting keys to a training YAML's ``monitor_config``.

The keys are added as text, so every comment and the order of the file stay as they were: a file without a
``monitor_config`` gets the section appended; a ``monitor_config`` holding only mindformers' own keys
(``monitor_on``, ``step_interval``, ...: mindformers' shipped configs) gets msmon's keys inserted at its top, at
its indentation, beside mindformers' keys. A backup copy is made first (msmon.ops.backup) and the file is replaced
atomically, its permissions kept. A section that already holds one of msmon's keys, or is not a block mapping, is
left alone: the user knows best what is there.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from msmon.config.loader import read_config_text
from msmon.config.schema import MonitorSettings
from msmon.errors import MsmonError
from msmon.ops.backup import BackupResult, backup_config
from msmon.util.atomic import atomic_write_text

#: The section, as the seed article sets it up: the loss, the grad norm and the learning rate every 10 steps, to
#: MindInsight's board and plain files, the health detectors on; ``{project}``: the YAML's name.
COMMENT = "# msmon: what to watch and where it goes (added by `msmon init`; every key: msmon validate FILE --all)."
HEADER = "monitor_config:"
KEYS = """\
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
#: The whole section, as the seed article sets it up: the loss, the grad norm and the learning rate every 10 steps,
#: to MindInsight's board and plain files, the health detectors on; ``{project}``: the YAML's name.
SECTION = f"\n{COMMENT}\n{HEADER}\n{KEYS}"
BLOCK_HEADER = re.compile(r"^monitor_config:[ \t]*(#.*)?$")
PROJECT_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
MSMON_KEYS = frozenset(MonitorSettings.__dataclass_fields__)


@dataclass(frozen=True)
class InitResult:
    """The file written and the backup of what it was."""

    path: Path
    backup: BackupResult
    beside: bool = False  # msmon's keys went beside mindformers' own in an existing monitor_config

    def describe(self) -> str:
        what = "msmon's keys to its monitor_config" if self.beside else "monitor_config"
        return f"added {what}: {self.path} (the file as it was: {self.backup.path})"


def add_monitor_config(path: str | os.PathLike[str]) -> InitResult:
    """Add msmon's keys to the training YAML at ``path`` (the module docstring); MsmonError (exit 1, nothing
    written) when it cannot."""
    config = Path(path)
    text = read_config_text(config)  # the same checks and messages as every other command
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MsmonError(f"{config} is not valid YAML: {str(exc).splitlines()[0]}", "fix the file first") from None
    if not isinstance(data, dict):
        raise MsmonError(f"{config} is not a training YAML (no top-level keys)", "pass a mindformers training YAML")
    project = PROJECT_NAME.sub("_", config.stem) or "training"
    if "monitor_config" in data:
        extended = _beside_mindformers_keys(config, text, data["monitor_config"], project)
    else:
        extended = text + ("" if text.endswith("\n") else "\n") + SECTION.format(project=project)
    saved = backup_config(config, note="before msmon init")
    mode = config.stat().st_mode & 0o7777
    atomic_write_text(config, extended)
    os.chmod(config, mode)
    return InitResult(config, saved, "monitor_config" in data)


def _beside_mindformers_keys(config: Path, text: str, section: object, project: str) -> str:
    """``text`` with msmon's keys inserted at the top of its ``monitor_config`` block, at the block's indentation."""
    lines = text.splitlines(keepends=True)
    header = next((n for n, raw in enumerate(lines) if BLOCK_HEADER.match(raw.rstrip("\n"))), None)
    ours = sorted(set(section) & MSMON_KEYS) if isinstance(section, dict) else []
    if ours or header is None or not isinstance(section, dict | None):
        where = f" (line {header + 1})" if header is not None else ""
        why = f"already holds msmon's keys ({', '.join(ours)})" if ours else "is not a block of keys"
        raise MsmonError(f"{config}: its monitor_config section{where} {why}",
                         f"edit it, then check it: msmon validate {config} --all (it shows every key)")
    following = [raw for raw in lines[header + 1:] if raw.strip() and not raw.lstrip().startswith("#")]
    first = following[0] if following else ""
    indent = len(first) - len(first.lstrip(" ")) if first[:1] == " " else 2
    keys = "".join(_reindented(line, indent) for line in KEYS.format(project=project).splitlines(keepends=True))
    comment = " " * indent + COMMENT + "\n"
    return "".join([*lines[:header + 1], comment, keys, *lines[header + 1:]])


def _reindented(line: str, unit: int) -> str:
    """A line of ``KEYS`` (indented in steps of two) indented in steps of ``unit``."""
    depth = (len(line) - len(line.lstrip(" "))) // 2
    return " " * (depth * unit) + line.lstrip(" ")
