"""The config msmon hands mindformers, as the YAML file ``mindformers.yaml`` (in the run directory; ``msmon export``).

Built from the user's YAML as mindformers itself parses it (PyYAML: ``1e-5`` stays the string mindformers reads,
where OmegaConf would make it a float), with only msmon's own changes: the values of msmon's interpolations
(``${now:}``, ``${oc.env:}``, ``${msmon_dataset:}``) and of the command line's overrides resolved, msmon's keys
removed from ``monitor_config`` (mindformers' template raises ``KeyError`` on them), the train-step wrapper's
``local_norm`` when msmon records per-layer norms, ``run_mode: train`` when the YAML has none, the ``checkpoint:``
section dropped where mindformers would not save with it (a release without it, data parallel, a checkpoint file to
start from: ``msmon.compat.internals.checkpoint_section``; the ``CheckpointMonitor``'s keys apply) and given a
``load_checkpoint`` directory as its ``load_path`` where it stays, ``base_config``
made absolute (the file lives in another directory), and the ``auto_register`` keys of an ``msmon export`` that
load msmon's CPU support into plain mindformers removed (msmon registers that support itself). The training
loads that file the way ``run_mindformer.py`` does (``MindFormerConfig(path)``: mindformers' config template
applied), so plain mindformers loads it too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from msmon import layout
from msmon.compat import package_version
from msmon.compat.internals import ITERATION_FORMAT, checkpoint_section
from msmon.config.loader import LoadedConfig
from msmon.config.split import split_monitor_config
from msmon.errors import MsmonError
from msmon.foreign import ConfigValue

#: The ``run_mode`` values that train (``run_mindformer.py`` calls ``Trainer.train()`` for both).
TRAINING_RUN_MODES = ("train", "finetune")
#: What ``run_mindformer.py`` accepts besides; msmon monitors trainings only.
OTHER_RUN_MODES = ("eval", "predict", "predict_with_train_model")
DEFAULT_RUN_MODE = "train"
HEADER = ("# The config msmon hands mindformers (msmon export / msmon run): your YAML with msmon's keys removed, its\n"
          "# interpolations and overrides resolved. mindformers loads it as it is: run_mindformer.py --config FILE\n")
#: The module ``msmon export`` writes beside a config that names msmon's CPU wrapper (``auto_register`` loads it).
PLAIN_MODULE = "msmon_cpu"
_MISSING = object()


def mindformers_config(loaded: LoadedConfig) -> dict[str, ConfigValue]:
    """The config mindformers gets (a plain dict; see the module docstring)."""
    resolved = loaded.resolved()
    parsed = yaml.safe_load(loaded.text) if loaded.text is not None else resolved
    merged = _prefer_parsed(parsed, resolved, "", {_indexed(key) for key in loaded.override_keys})
    training, _ = split_monitor_config(merged)
    if "monitor_config" not in merged and training["monitor_config"] == {"monitor_on": False}:
        del training["monitor_config"]  # mindformers' template supplies the same defaults
    training.setdefault("run_mode", DEFAULT_RUN_MODE)
    if training.get("checkpoint"):
        fit_checkpoint_section(training)
    _drop_plain_support(training)
    if loaded.path is not None and "base_config" in training:
        training["base_config"] = _absolute(training["base_config"], Path(loaded.path).absolute().parent)
    return training


def fit_checkpoint_section(training: dict[str, ConfigValue]) -> None:
    """Drop the ``checkpoint:`` section where mindformers would not save with it (a release without it, data parallel,
    a ``load_checkpoint`` file: the ``CheckpointMonitor``'s keys apply); where it stays, a ``load_checkpoint`` directory
    (``--load_checkpoint``) becomes its ``load_path`` when that is empty, read as safetensors (1.9.0 maps the legacy
    key only onto an absent ``load_path``, so a section's ``load_path: ''`` would silently start from scratch; and
    with ``load_ckpt_format: ckpt`` it refuses the directory: "not a valid path to load checkpoint")."""
    if checkpoint_section(training, package_version("mindformers")) is None:
        del training["checkpoint"]
        return
    section, start = training["checkpoint"], training.get("load_checkpoint")
    if isinstance(section, dict) and start and not section.get("load_path"):
        section["load_path"] = start
        training["load_ckpt_format"] = ITERATION_FORMAT


def _drop_plain_support(training: dict[str, ConfigValue]) -> None:
    """Remove the ``auto_register`` keys naming :data:`PLAIN_MODULE` from the sections ``msmon export`` puts them in."""
    for section in ("runner_wrapper", "train_dataset_task"):
        node = training.get(section)
        if isinstance(node, dict) and str(node.get("auto_register", "")).startswith(f"{PLAIN_MODULE}."):
            del node["auto_register"]


def read_run_config(run_dir: Path) -> dict[str, ConfigValue] | None:
    """The config a run trained with: its ``mindformers.yaml`` (overrides applied, as the training read it), None
    when the run directory has none or it is unreadable."""
    try:
        data = yaml.safe_load((run_dir / layout.MINDFORMERS_YAML).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def check_run_mode(mode: ConfigValue) -> None:
    """MsmonError (exit 1) unless ``mode`` (a config's ``run_mode``; None: absent, it trains) trains; an
    interpolation is judged once resolved."""
    mode = DEFAULT_RUN_MODE if mode is None else mode
    if isinstance(mode, str) and "${" in mode:
        return
    if mode in TRAINING_RUN_MODES:
        return
    if mode in OTHER_RUN_MODES:
        raise MsmonError(f"run_mode is {mode!r}: msmon run monitors a training (run_mode train or finetune)",
                         f"run the {mode} with run_mindformer.py, or set run_mode: train (or --run_mode finetune)")
    raise MsmonError(f"run_mode {mode!r} is not a mindformers run mode",
                     f"use one of: {', '.join(TRAINING_RUN_MODES + OTHER_RUN_MODES)}")


def render(training: Mapping[str, ConfigValue], note: str = "") -> str:
    """The YAML text of ``mindformers.yaml`` (keys in their order; mindformers sorts them itself); ``note``: comment
    lines added to the header."""
    return HEADER + note + yaml.safe_dump(dict(training), sort_keys=False, allow_unicode=True,
                                          default_flow_style=False)


def _indexed(path: str) -> str:
    """A key path with its list indexes in brackets: ``callbacks.1.prefix`` (a dotlist override's spelling) and
    ``callbacks[1].prefix`` are one key."""
    return re.sub(r"\.(\d+)(?=\.|\[|$)", r"[\1]", path)


def _prefer_parsed(parsed: ConfigValue, resolved: ConfigValue, path: str, overrides: set[str]) -> ConfigValue:
    """``resolved`` (OmegaConf's view) with every value that is neither an interpolation nor overridden taken from
    ``parsed`` (PyYAML's view, mindformers' own); ``overrides``: the overridden key paths, ``_indexed``."""
    if _indexed(path) in overrides or parsed is _MISSING:
        return resolved
    if isinstance(resolved, Mapping):
        if not isinstance(parsed, Mapping):
            return resolved
        return {key: _prefer_parsed(parsed.get(key, _MISSING), value, f"{path}.{key}" if path else str(key),
                                    overrides) for key, value in resolved.items()}
    if isinstance(resolved, list):
        if not isinstance(parsed, list) or len(parsed) != len(resolved):
            return resolved
        pairs = enumerate(zip(parsed, resolved, strict=True))
        return [_prefer_parsed(p, r, f"{path}[{i}]", overrides) for i, (p, r) in pairs]
    if isinstance(parsed, str) and "${" in parsed:
        return resolved
    return parsed


def _absolute(base: ConfigValue, directory: Path) -> ConfigValue:
    if isinstance(base, list):
        return [_absolute(item, directory) for item in base]
    return str(directory / base) if isinstance(base, str) and not Path(base).is_absolute() else base
