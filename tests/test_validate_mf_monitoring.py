"""The validator speaks mindformers' own monitoring: its native monitor_config keys per release (MS005, MS001,
MS002) and how mindformers runs them (MS006-MS009), through the real loader with line numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from validate_base import base_config

from msmon.compat import MONITOR_CONFIG_KEYS, package_version
from msmon.findings import Finding
from msmon.validate import validate_config
from msmon.validate.section import check_release_keys


def write(tmp_path: Path, monitor: dict[str, Any] | None = None, **top: Any) -> Path:
    data = base_config()
    data["monitor_config"].update(monitor or {})
    data.update(top)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def found(path: Path, code: str) -> list[Finding]:
    return [f for f in validate_config(path).findings if f.code == code]


def line_of(path: Path, key: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines()) if line.strip().startswith(f"{key}:")) + 1


# -- native keys per release ------------------------------------------------------------------------------------


def test_ms005_a_key_of_another_release() -> None:
    (finding,) = check_release_keys({"health_checkpoint": {"global_norm_spike_threshold": 3.0}}, "1.8.0")
    assert finding.code == "MS005" and finding.is_error
    assert "the installed mindformers 1.8.0 does not know monitor_config.health_checkpoint" in finding.message
    assert "1.9.0 has it" in finding.message and "1.9.0" in finding.hint
    assert check_release_keys({"health_checkpoint": {}}, "1.9.0") == []
    # an unknown later release is read with the newest known keys; no mindformers at all: nothing to compare with
    assert check_release_keys({"health_checkpoint": {}}, "1.9.7") == []
    assert check_release_keys({"health_checkpoint": {}}, None) == []


@pytest.mark.compat_smoke
def test_ms005_against_the_installed_release(tmp_path: Path) -> None:
    path = write(tmp_path, {"health_checkpoint": {"global_norm_spike_threshold": 3.0}})
    installed = package_version("mindformers")
    knows = installed in MONITOR_CONFIG_KEYS and "health_checkpoint" in MONITOR_CONFIG_KEYS[installed]
    findings = found(path, "MS005")
    if knows:
        assert findings == []
    else:
        (finding,) = findings
        assert finding.line == line_of(path, "health_checkpoint") and installed in finding.message


@pytest.mark.parametrize(
    ("key", "value", "where"),
    [
        ("check_for_nan_in_loss_and_grad", True, "check_for_nan_in_loss_and_grad (top level of the config)"),
        ("use_skip_data_by_global_norm", True, "(top level of the config)"),
        ("tensorboard_dir", "./tb", "tensorboard.tensorboard_dir"),
    ],
)
def test_ms001_mindformers_monitoring_keys_that_belong_elsewhere(tmp_path: Path, key: str, value: Any,
                                                                 where: str) -> None:
    path = write(tmp_path, {key: value})
    (finding,) = found(path, "MS001")
    assert finding.path == f"monitor_config.{key}" and where in finding.message and finding.hint == "move it there"
    assert finding.line == line_of(path, key)


def test_ms001_a_misspelt_native_key_gets_a_did_you_mean(tmp_path: Path) -> None:
    (finding,) = found(write(tmp_path, {"dump_pth": "./d"}), "MS001")
    assert finding.hint == "did you mean 'dump_path'?"
    (finding,) = found(write(tmp_path, {"weight_state_fromat": "log"}), "MS001")
    assert finding.hint == "did you mean 'weight_state_format'?"


def test_ms002_a_format_mindformers_refuses(tmp_path: Path) -> None:
    path = write(tmp_path, {"monitor_on": True, "local_loss_format": ["log", "csv"]})
    (finding,) = [f for f in found(path, "MS002") if f.path.endswith("local_loss_format")]
    assert "'tensorboard', 'log'" in finding.message and finding.line == line_of(path, "local_loss_format")


# -- how mindformers runs them ----------------------------------------------------------------------------------


def test_ms006_settings_without_monitor_on_have_no_effect(tmp_path: Path) -> None:
    path = write(tmp_path, {"weight_state_format": "log", "check_for_global_norm": True, "throughput_baseline": 5})
    findings = found(path, "MS006")
    assert sorted(f.path for f in findings) == ["monitor_config.check_for_global_norm",
                                                "monitor_config.throughput_baseline",
                                                "monitor_config.weight_state_format"]
    assert all("only with monitor_config.monitor_on: True" in f.message and not f.is_error for f in findings)


def test_ms006_tensorboard_format_without_a_tensorboard_section(tmp_path: Path) -> None:
    monitor = {"monitor_on": True, "dump_path": None, "weight_state_format": ["tensorboard", "log"],
               "stable_rank_config": {"format": "tensorboard"}, "throughput_baseline": 10}
    path = write(tmp_path, monitor)
    findings = found(path, "MS006")
    assert sorted(f.path for f in findings) == ["monitor_config.stable_rank_config.format",
                                                "monitor_config.weight_state_format"]
    assert "log lines only" in findings[0].message and "tensorboard_dir" in findings[0].hint
    assert found(write(tmp_path, monitor, tensorboard={"tensorboard_dir": "./tb"}), "MS006") == []


@pytest.mark.parametrize("key", ["optimizer_state_format", "weight_state_format"])
def test_ms007_the_cost_of_the_state_statistics(tmp_path: Path, key: str) -> None:
    path = write(tmp_path, {"monitor_on": True, key: "log", "step_interval": 1},
                 tensorboard={"tensorboard_dir": "./tb"})
    (finding,) = found(path, "MS007")
    assert "every step_interval (1) step(s)" in finding.message and "greatly slowing training" in finding.message
    assert finding.line == line_of(path, key) and "step_interval" in finding.hint
    assert found(write(tmp_path, {key: "log"}), "MS007") == []  # without monitor_on mindformers never computes it


def test_ms008_a_dump_path_whose_rank_directory_holds_other_data(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt" / "rank_0").mkdir(parents=True)
    (tmp_path / "ckpt" / "rank_0" / "llama_rank_0-1_400.ckpt").write_bytes(b"weights")
    path = write(tmp_path, {"monitor_on": True, "dump_path": "ckpt"})
    (finding,) = found(path, "MS008")
    assert finding.is_error and "deletes" in finding.message and "llama_rank_0-1_400.ckpt" in finding.message
    assert finding.line == line_of(path, "dump_path")


def test_ms008_shared_directory_warns_and_a_dump_directory_of_its_own_is_fine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dump" / "rank_0").mkdir(parents=True)
    (tmp_path / "dump" / "rank_0" / "local_norm__w_float32_3.npy").write_bytes(b"npy")
    path = write(tmp_path, {"monitor_on": True, "dump_path": "./dump"})
    assert found(path, "MS008") == []  # its own earlier dumps
    (tmp_path / "dump" / "notes.txt").write_text("mine")
    (finding,) = found(path, "MS008")
    assert not finding.is_error and "notes.txt" in finding.message
    assert found(write(tmp_path, {"dump_path": "./dump"}), "MS008") == []  # monitor_on off: no dump, no wipe
    (tmp_path / "afile").write_text("x")
    assert found(write(tmp_path, {"monitor_on": True, "dump_path": "afile"}), "MS008")[0].is_error


def test_ms008_monitor_on_with_a_null_dump_path(tmp_path: Path) -> None:
    # measured: mindformers 1.9 ends in "TypeError: set_dump_local_norm_path(): incompatible function arguments"
    path = write(tmp_path, {"monitor_on": True, "dump_path": None})
    (finding,) = found(path, "MS008")
    assert finding.is_error and "TypeError" in finding.message and "dump_path: ''" in finding.hint
    assert finding.line == line_of(path, "dump_path")
    codes = {f.code for f in validate_config(write(tmp_path, {"monitor_on": True, "dump_path": ""})).findings}
    assert not codes & {"MS008", "MS605"}  # '' = no dumps: no TensorDump either, so it runs on CPU


def test_without_a_dump_path_the_templates_dump_directory_is_checked(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """mindformers' template gives monitor_config.dump_path its default ./dump (the training loads the template)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dump" / "rank_0").mkdir(parents=True)
    (tmp_path / "dump" / "rank_0" / "weights.ckpt").write_bytes(b"weights")
    path = write(tmp_path, {"monitor_on": True})
    codes = {f.code: f for f in validate_config(path).findings}
    assert "weights.ckpt" in codes["MS008"].message  # the default directory holds other data: it would be wiped
    assert codes["MS605"].is_error  # and on CPU the dumps it enables have no kernel


def test_ms009_nan_check_stops_before_msmon_sees_the_step(tmp_path: Path) -> None:
    path = write(tmp_path, check_for_nan_in_loss_and_grad=True)
    (finding,) = found(path, "MS009")
    assert finding.path == "check_for_nan_in_loss_and_grad"
    assert finding.line == line_of(path, "check_for_nan_in_loss_and_grad")
    assert "mindformers stops the run" in finding.message and "nonfinite detector (alert)" in finding.message
    assert "health.nonfinite.action: stop" in finding.hint


def test_ms009_global_norm_spikes_stop_or_skip_and_msmon_alerts(tmp_path: Path) -> None:
    monitor = {"monitor_on": True, "dump_path": "", "check_for_global_norm": True, "global_norm_spike_threshold": 5.0}
    (stop,) = found(write(tmp_path, monitor), "MS009")
    assert "stops the run (RuntimeError 'TREError') at the first global norm >= 5" in stop.message
    assert "grad_explosion detector (alert, absolute threshold 5)" in stop.message
    skip_monitor = {"monitor_on": True, "dump_path": "", "global_norm_spike_threshold": 2.0,
                    "global_norm_spike_count_threshold": 4}
    (skip,) = found(write(tmp_path, skip_monitor, use_skip_data_by_global_norm=True), "MS009")
    assert "skips the update of every step whose global norm >= 2 and stops the run after 4 skips" in skip.message
    (both,) = found(write(tmp_path, monitor, use_skip_data_by_global_norm=True), "MS009")
    assert both.is_error and "refuses" in both.message
    # without monitor_on, check_for_global_norm does nothing (MS006), so nothing stops either
    assert found(write(tmp_path, {"check_for_global_norm": True}), "MS009") == []


def test_ms013_mindformers_own_profiler_is_named_at_validate(tmp_path: Path) -> None:
    """`profile: True` (what `msmon run --profile` passes through): a warning at its line saying `msmon probe RUN
    profile` refuses the run; `msmon validate CONFIG profile=True` says the same of the override."""
    from conftest import run_msmon

    on = write(tmp_path, profile=True, profile_start_step=3, profile_stop_step=8)
    (finding,) = found(on, "MS013")
    assert not finding.is_error and finding.path == "profile" and finding.line == line_of(on, "profile")
    assert "steps 3-8" in finding.message and "`msmon probe RUN profile` refuses this run" in finding.message
    assert "action: profile" not in finding.message
    acting = write(tmp_path, {"health": {"throughput_drop": {"action": "profile"}}}, profile=True)
    (finding,) = found(acting, "MS013")
    assert "the action: profile of throughput_drop profiles nothing" in finding.message
    assert found(write(tmp_path, profile=False), "MS013") == []
    assert found(write(tmp_path), "MS013") == []
    result = run_msmon("validate", str(write(tmp_path)), "profile=True")
    assert "MS013" in result.stdout + result.stderr, result.stdout
