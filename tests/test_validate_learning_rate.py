"""Pre-flight learning-rate sanity (MS805-MS808) through the real loader, with the line of the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_msmon
from validate_base import base_config

from msmon.findings import Finding
from msmon.validate import validate_config


def write(tmp_path: Path, changes: dict[str, Any], drop: tuple[str, ...] = ()) -> Path:
    """BASE_YAML with dotted keys set (None deletes one) as a file."""
    data = base_config()
    data["train_dataset"] = {"data_loader": {"type": "MindDataset", "dataset_dir": "${msmon_dataset:quickstart}",
                                             "num_samples": 400}, "batch_size": 2}
    data["optimizer"] = {"type": "AdamW"}
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def found(path: Path, code: str) -> list[Finding]:
    return [f for f in validate_config(path).findings if f.code == code]


def line_of(path: Path, key: str, after: str) -> int:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{after}:"))
    return next(i for i, line in enumerate(lines) if i > start and line.strip().startswith(f"{key}:")) + 1


def test_the_base_schedule_is_plausible(tmp_path: Path) -> None:
    # 200 schedule steps over 400 samples of batch 2 = 200 data steps, warm-up 10, AdamW at 5e-3
    result = validate_config(write(tmp_path, {}))
    assert not [f for f in result.findings if f.code.startswith("MS80")], result.findings


@pytest.mark.parametrize(
    ("optimizer", "lr", "severity", "words"),
    [
        ("AdamW", 1.0e4, "warning", "above 1, the highest plausible peak for AdamW"),
        ("FusedAdamWeightDecay", 2.0, "warning", "diverges"),
        ("AdamW", 1.0e-9, "warning", "below 1e-07"),
        ("AdamW", 0.0, "warning", "no weight ever moves"),
        ("AdamW", -1.0e-3, "error", "non-negative"),
        ("SGD", 20.0, "warning", "above 10"),
        ("Momentum", 1.0, None, ""),
    ],
)
def test_ms805_peak_outside_the_optimizers_range(tmp_path: Path, optimizer: str, lr: float, severity: str | None,
                                                 words: str) -> None:
    path = write(tmp_path, {"optimizer.type": optimizer, "lr_schedule.learning_rate": lr})
    findings = found(path, "MS805")
    if severity is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.severity.value == severity and words in finding.message, finding
    assert finding.path == "lr_schedule.learning_rate" and finding.line == line_of(path, "learning_rate", "lr_schedule")
    assert finding.hint


def test_ms805_the_issues_example_is_named_with_its_line_in_the_cli(tmp_path: Path) -> None:
    path = write(tmp_path, {"lr_schedule.learning_rate": 1.0e4})
    result = run_msmon("validate", str(path), cwd=tmp_path)
    assert result.code == 0  # a warning: the health detectors' own tests train this dead network on purpose
    line = line_of(path, "learning_rate", "lr_schedule")
    assert f"warning MS805 lr_schedule.learning_rate (line {line}): learning_rate 1e+04 is above 1" in result.stdout


def test_ms805_not_checked_when_mindformers_scales_the_lr(tmp_path: Path) -> None:
    assert found(write(tmp_path, {"lr_scale": True, "lr_schedule.learning_rate": 1.0e4}), "MS805") == []


@pytest.mark.parametrize("key", ["lr_end", "min_lr"])
def test_ms806_lr_end_above_the_peak_of_a_decaying_schedule(tmp_path: Path, key: str) -> None:
    path = write(tmp_path, {f"lr_schedule.{key}": 1.0e-2})
    (finding,) = found(path, "MS806")
    assert finding.is_error and finding.path == f"lr_schedule.{key}" and "raise the learning rate" in finding.message
    assert finding.line == line_of(path, key, "lr_schedule")
    # a constant schedule does not decay: no finding
    assert found(write(tmp_path, {"lr_schedule.type": "ConstantWarmUpLR", f"lr_schedule.{key}": 1.0e-2}), "MS806") == []


@pytest.mark.parametrize(
    ("changes", "key", "words"),
    [
        ({"lr_schedule.warmup_steps": 250}, "warmup_steps", "(250 steps) is not shorter than the run (200 steps)"),
        ({"lr_schedule.warmup_steps": None, "lr_schedule.warmup_ratio": 1.5}, "warmup_ratio", "above 1"),
        ({"lr_schedule.warmup_steps": 100, "runner_config.stop_step": 50}, "warmup_steps", "the run (50 steps)"),
    ],
)
def test_ms807_warmup_longer_than_the_run(tmp_path: Path, changes: dict, key: str, words: str) -> None:
    path = write(tmp_path, changes)
    (finding,) = found(path, "MS807")
    assert not finding.is_error and finding.path == f"lr_schedule.{key}" and words in finding.message, finding
    assert finding.line == line_of(path, key, "lr_schedule")


def test_ms808_total_steps_disagrees_with_the_data(tmp_path: Path) -> None:
    path = write(tmp_path, {"lr_schedule.total_steps": 50})
    (finding,) = found(path, "MS808")
    assert "total_steps 50 differs from the 200 steps the data gives" in finding.message
    assert "stays there for the last 150 steps" in finding.message and "total_steps: -1" in finding.hint
    assert finding.line == line_of(path, "total_steps", "lr_schedule")
    (late,) = found(write(tmp_path, {"lr_schedule.total_steps": 1000}), "MS808")
    assert "800 steps before it has decayed" in late.message
    for fine in ({"lr_schedule.total_steps": -1}, {"lr_schedule.total_steps": 50, "use_parallel": True},
                 {"lr_schedule.total_steps": 50, "lr_schedule.type": "ConstantWarmUpLR"}):
        assert found(write(tmp_path, fine), "MS808") == [], fine


def test_a_grouped_lr_schedule_is_the_schedule_checked(tmp_path: Path) -> None:
    """mindformers builds grouped_lr_schedule.default (and each grouped entry) instead of lr_schedule: a config that
    gives its rate there got MS804 "no lr_schedule.learning_rate"; its peaks are checked where they are written."""
    grouped = {"default": {"type": "ConstantWarmUpLR", "learning_rate": 2e-4, "warmup_steps": 20},
               "grouped": [{"type": "ConstantWarmUpLR", "params": ["embedding.*"], "learning_rate": 50.0}]}
    path = write(tmp_path, {"lr_schedule": None, "grouped_lr_schedule": grouped})
    assert found(path, "MS804") == []
    [peak] = found(path, "MS805")
    assert peak.path == "grouped_lr_schedule.grouped[0].learning_rate" and peak.line is not None
    from msmon.config.health import LearningRateSettings
    from msmon.config.loader import load_config
    from msmon.config.schedule import schedule_from_config

    schedule = schedule_from_config(load_config(path).resolved(), LearningRateSettings())
    assert (schedule.path, schedule.peak, schedule.warmup_steps) == ("grouped_lr_schedule.default", 2e-4, 20)
    assert found(write(tmp_path, {"lr_schedule": None}), "MS804")[0].hint == (
        "set monitor_config.health.learning_rate.peak")  # the control, with the full key path


def test_the_compile_cache_is_named_when_on_by_the_variable_or_the_config(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """MindSpore's compile cache keys graphs by the entry script, never the config (a learning rate typed on the
    command line trained the cached default one): MS814 warns when MS_COMPILER_CACHE_ENABLE=1 or the config's
    context.enable_compile_cache is True (with its line), not when the config turns it off or nothing turns it on;
    `msmon validate` exits 0 with the warning."""
    monkeypatch.delenv("MS_COMPILER_CACHE_ENABLE", raising=False)
    assert found(write(tmp_path, {}), "MS814") == []
    on = write(tmp_path, {"context.enable_compile_cache": True})
    (cached,) = found(on, "MS814")
    assert cached.path == "context.enable_compile_cache" and cached.line == line_of(on, "enable_compile_cache",
                                                                                      "context")
    assert "MS_COMPILER_CACHE_PATH" in cached.hint and not cached.is_error
    monkeypatch.setenv("MS_COMPILER_CACHE_ENABLE", "1")
    (by_env,) = found(write(tmp_path, {}), "MS814")
    assert by_env.path == "MS_COMPILER_CACHE_ENABLE" and "compile cache is on" in by_env.message
    assert found(write(tmp_path, {"context.enable_compile_cache": False}), "MS814") == []  # the config wins
    result = run_msmon("validate", str(write(tmp_path, {})))
    assert result.code == 0 and "MS814" in result.stdout + result.stderr
