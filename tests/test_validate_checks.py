"""Each validate check, through the library API (fast) and the real CLI where the output matters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_msmon, tree_snapshot
from helpers_training import QUICKSTART_QWEN3
from validate_base import BASE_YAML, base_config, with_monitor, with_section

from msmon.config.split import split_monitor_config
from msmon.validate import validate_config


def codes(result) -> set[str]:
    return {f.code for f in result.findings}


def test_base_config_is_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = validate_config(base_config())
    assert result.valid, result.findings
    assert result.settings.run_dir() == Path("./monitor_logs/demo/r1")


def test_monitor_config_as_plain_dict_is_accepted() -> None:
    result = validate_config(monitor_config={"monitor_type": "file", "log_interval": 5, "run_name": "x1"})
    assert result.settings.monitor_type == ["file"]
    assert result.settings.log_interval == 5
    assert result.provenance["log_interval"] == "file"


@pytest.mark.parametrize("value", [None, "", "auto", "AUTO"])
def test_run_name_generated_from_model_name(value) -> None:
    cfg = base_config()
    cfg["monitor_config"]["run_name"] = value
    result = validate_config(cfg)
    assert result.settings.run_name.startswith("llama_tiny_")
    assert len(result.settings.run_name) == len("llama_tiny_") + 15
    assert result.provenance["run_name"] == "generated"


def test_run_name_from_model_config_type_without_trainer_model_name() -> None:
    cfg = base_config()
    del cfg["trainer"]["model_name"]
    cfg["monitor_config"]["run_name"] = "auto"
    assert validate_config(cfg).settings.run_name.startswith("LlamaConfig_")


def test_now_resolver_in_run_name() -> None:
    result = validate_config(base_config(), ["monitor_config.run_name=exp_${now:%Y%m%d}"])
    assert result.settings.run_name.startswith("exp_20")
    assert result.provenance["run_name"] == "override"


def test_existing_run_directory_is_refused_unless_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "monitor_logs" / "demo" / "r1"
    run_dir.mkdir(parents=True)
    assert validate_config(base_config()).valid  # empty directory: nothing to overwrite
    (run_dir / "metrics.jsonl").write_text("{}\n")
    result = validate_config(base_config())
    assert "MS103" in codes(result) and not result.valid
    assert validate_config(base_config(), resume=True).valid


def test_save_dir_that_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").write_text("x")
    assert "MS203" in codes(validate_config(base_config(), ["monitor_config.save_dir=./logs"]))


def test_save_dir_not_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import msmon.validate.save_dir as save_dir

    monkeypatch.setattr(save_dir.os, "access", lambda path, mode: False)  # root may write anywhere: simulate
    finding = next(f for f in validate_config(base_config(), [f"monitor_config.save_dir={tmp_path}/sub"]).findings
                   if f.code == "MS203")
    assert "not writable" in finding.message


def test_save_dir_check_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    assert validate_config(base_config(), [f"monitor_config.save_dir={target}"]).valid
    assert not (tmp_path / "a").exists()


def test_low_free_disk_is_a_warning() -> None:
    result = validate_config(base_config(), ["monitor_config.disk.min_free_mb=999999999"])
    assert "MS204" in codes(result) and result.valid


def test_aliases_are_accepted_and_duplicates_warned() -> None:
    result = validate_config(with_monitor_dict(track_metrics=["global_norm", "lr", "step", "grad_norm"]))
    assert result.valid
    assert codes(result) == {"MS303"}


def with_monitor_dict(**changes):
    cfg = base_config()
    cfg["monitor_config"].update(changes)
    return cfg


@pytest.mark.parametrize(
    ("path", "value", "metric"),
    [
        ("runner_wrapper.use_clip_grad", False, "grad_norm"),
        ("runner_wrapper.type", "TrainOneStepCell", "grad_norm"),
        ("runner_wrapper.type", "TrainOneStepCell", "loss_scale"),
        ("runner_wrapper.local_norm", False, "local_norm"),
    ],
)
def test_metric_not_exposed_names_the_setting(path, value, metric) -> None:
    cfg = yaml_cfg(with_section(path, value))
    cfg["monitor_config"]["track_metrics"] = [metric]
    result = validate_config(cfg)
    finding = next(f for f in result.findings if f.code == "MS302")
    assert "flat line" in finding.message
    assert "runner_wrapper" in finding.hint


def test_metric_exposure_is_no_error_when_monitoring_is_off() -> None:
    cfg = yaml_cfg(with_section("runner_wrapper.use_clip_grad", False))
    assert not validate_config(cfg).valid  # monitoring on: grad_norm would be a flat line of zeros
    cfg["monitor_config"]["enable_monitor"] = False
    result = validate_config(cfg)
    (finding,) = [f for f in result.findings if f.code == "MS302"]
    assert not finding.is_error and "monitoring is off" in finding.message and result.valid
    del cfg["monitor_config"]  # no section: its default metrics were never asked for
    result = validate_config(cfg)
    assert result.valid and "MS302" not in codes(result) and "MS000" in codes(result)


def yaml_cfg(text: str):
    import yaml

    return yaml.safe_load(text)


def test_grad_norm_exposed_by_template_default_wrapper() -> None:
    cfg = base_config()
    del cfg["runner_wrapper"]
    cfg["context"]["device_target"] = "Ascend"
    assert validate_config(cfg).valid


def test_log_interval_one_with_many_metrics_warns() -> None:
    result = validate_config(base_config(), ["monitor_config.log_interval=1"])
    assert codes(result) == {"MS402"} and result.valid


def test_log_interval_beyond_total_steps_warns() -> None:
    result = validate_config(base_config(), ["monitor_config.log_interval=500"])
    assert "MS403" in codes(result)


def test_backend_package_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import msmon.validate.backends as backends

    monkeypatch.setitem(backends.REQUIREMENTS, "tensorboard", (("no_such_package_xyz",), "no-such-package"))
    result = validate_config(base_config(), ["monitor_config.monitor_type=[file,tensorboard]"])
    finding = next(f for f in result.findings if f.code == "MS502")
    assert "pip install no-such-package" in finding.hint


@pytest.mark.parametrize(
    ("uri", "ok"),
    [("http://127.0.0.1:5000", True), ("sqlite:///mlflow.db", True), ("localhost:5000", False),
     ("http://:5000", False), ("http://host:port", False), ("file:///tmp/mlruns", False)],
)
def test_mlflow_tracking_uri(uri, ok) -> None:
    result = validate_config(base_config(), ["monitor_config.monitor_type=[mlflow]",
                                             f"monitor_config.mlflow.tracking_uri='{uri}'"])
    assert ("MS504" not in codes(result)) is ok


def test_cpu_checks_only_on_cpu() -> None:
    text = with_section("runner_config.sink_mode", True)
    assert "MS601" in codes(validate_config(yaml_cfg(text)))
    cfg = yaml_cfg(text)
    cfg["context"]["device_target"] = "Ascend"
    assert "MS601" not in codes(validate_config(cfg))


@pytest.mark.parametrize(
    ("path", "value", "code"),
    [
        ("model.model_config.fused_rms_norm", True, "MS602"),
        ("model.model_config.use_flash_attention", True, "MS603"),
        ("model.model_config.param_init_type", "bfloat16", "MS604"),
        ("context.mode", 1, "MS607"),
    ],
)
def test_cpu_pitfalls(path, value, code) -> None:
    assert code in codes(validate_config(yaml_cfg(with_section(path, value))))


def test_cpu_fused_rms_norm_default_for_llama() -> None:
    cfg = base_config()
    del cfg["model"]["model_config"]["fused_rms_norm"]
    assert "MS602" in codes(validate_config(cfg))


def test_mindformers_keys_pass_through_and_are_split_off() -> None:
    cfg = with_monitor_dict(monitor_on=False, step_interval=5, check_for_global_norm=False)
    result = validate_config(cfg)
    assert result.valid
    training, ours = split_monitor_config(result.training)
    assert training["monitor_config"] == {"monitor_on": False, "step_interval": 5, "check_for_global_norm": False}
    assert "log_interval" in ours and "monitor_on" not in ours


def test_no_monitor_config_is_a_warning_and_exit_zero(tmp_path: Path) -> None:
    cfg = base_config()
    del cfg["monitor_config"]
    result = validate_config(cfg)
    assert result.valid and codes(result) == {"MS000"}
    assert result.settings.enable_monitor is False
    path = tmp_path / "c.yaml"
    import yaml

    path.write_text(yaml.safe_dump(cfg))
    cli = run_msmon("validate", str(path), cwd=tmp_path)
    assert cli.code == 0 and "monitoring is off" in cli.stdout


def test_registry_conflict_with_builtin_model_type(tmp_path: Path) -> None:
    (tmp_path / "my_model.py").write_text(
        "class Aimv2Config:\n    model_type = 'aimv2'\n\nclass MyLlamaConfig:\n    model_type = 'my_llama_2026'\n"
    )
    cfg = base_config()
    cfg["model"]["model_config"]["auto_register"] = "my_model.Aimv2Config"
    path = tmp_path / "c.yaml"
    import yaml

    path.write_text(yaml.safe_dump(cfg))
    result = validate_config(str(path))
    finding = next(f for f in result.findings if f.code == "MS701")
    assert "'aimv2' is already used by a transformers config" in finding.message
    assert "aimv2_custom" in finding.hint
    assert finding.path == "model.model_config.auto_register"
    cfg["model"]["model_config"]["auto_register"] = "my_model.MyLlamaConfig"
    path.write_text(yaml.safe_dump(cfg))
    assert "MS701" not in codes(validate_config(str(path)))


def test_json_output_shape(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(with_monitor(log_intervall=3))
    result = run_msmon("validate", str(path), "--json", cwd=tmp_path)
    assert result.code == 1
    doc = json.loads(result.stdout)
    assert set(doc) >= {"valid", "config", "findings", "monitor_config"}
    assert doc["valid"] is False
    (finding,) = doc["findings"]
    assert set(finding) == {"severity", "code", "path", "line", "message", "hint"}
    assert finding["line"] == path.read_text().splitlines().index("  log_intervall: 3") + 1
    assert doc["monitor_config"]["log_interval"] == 10


def test_json_output_for_unreadable_file(tmp_path: Path) -> None:
    result = run_msmon("validate", str(tmp_path / "none.yaml"), "--json", cwd=tmp_path)
    assert result.code == 1
    assert json.loads(result.stdout)["valid"] is False


def test_human_output_shows_sources(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(BASE_YAML)
    result = run_msmon("validate", str(path), "monitor_config.log_interval=20", cwd=tmp_path)
    assert result.code == 0
    line = next(ln for ln in result.stdout.splitlines() if "log_interval" in ln)
    assert "20" in line and "override" in line
    assert "valid" in result.stdout


def test_secret_interpolation_resolves_in_memory_only(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(with_monitor(run_name="${oc.env:MSMON_TEST_RUN}"))
    before = tree_snapshot(tmp_path)
    result = run_msmon("validate", str(path), "--json", cwd=tmp_path, env={"MSMON_TEST_RUN": "from_env"})
    assert json.loads(result.stdout)["monitor_config"]["run_name"] == "from_env"
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("config", ["base", "qwen3_quickstart"])
def test_validate_never_imports_mindspore_or_mindformers(tmp_path: Path, config: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(BASE_YAML if config == "base" else QUICKSTART_QWEN3.read_text())
    code = (
        "import sys\n"
        "from msmon.cli.main import app\n"
        "try:\n"
        f"    app(['validate', {str(path)!r}, '--json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'mindspore', 'mindformers', 'mlflow', 'mindinsight', 'tensorboard', 'transformers', 'torch'})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert "HEAVY []" in proc.stderr, proc.stderr


def test_usage_error_exit_code_two(tmp_path: Path) -> None:
    assert run_msmon("validate", cwd=tmp_path).code == 2
    assert run_msmon("validate", "x.yaml", "--no-such-flag", cwd=tmp_path).code == 2


def test_debug_env_shows_traceback(tmp_path: Path) -> None:
    result = run_msmon("validate", str(tmp_path / "missing.yaml"), cwd=tmp_path, env={"MSMON_DEBUG": "1"})
    assert result.code == 1
    assert "Traceback" in result.stderr


def test_split_keeps_a_mindformers_monitor_section() -> None:
    training, ours = split_monitor_config({"seed": 1, "monitor_config": {"log_interval": 3}})
    assert training == {"seed": 1, "monitor_config": {"monitor_on": False}}
    assert ours == {"log_interval": 3}


def test_auto_register_module_not_found_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REGISTER_PATH", raising=False)
    cfg = base_config()
    cfg["model"]["model_config"]["auto_register"] = "nowhere_module.Thing"
    finding = next(f for f in validate_config(cfg).findings if f.code == "MS702")
    assert finding.severity.value == "warning" and "REGISTER_PATH" in finding.hint


def test_an_unregistered_type_is_flagged_on_every_validate_with_a_suggestion() -> None:
    """A `type:` is checked against mindformers' registry (from msmon's cache) without --deep: a close name is an
    error naming it (MS023; it was a --deep warning, MS703), a name nothing is close to a warning."""
    cfg = base_config()
    cfg["optimizer"] = {"type": "AdamWW"}
    cfg["callbacks"] = [{"type": "MFLossMonitor"}, {"type": "NothingLikeAnyCallbackXyz"}]
    findings = [f for f in validate_config(cfg).findings if f.code == "MS023"]
    assert [(f.path, f.severity.value) for f in findings] == [("optimizer.type", "error"),
                                                              ("callbacks[1].type", "warning")]
    assert findings[0].hint == "did you mean 'AdamW'?"


def test_ms201_judges_the_resolved_save_dir_and_only_for_mindinsight(tmp_path, monkeypatch) -> None:
    """A relative ASCII save_dir under a non-ASCII working directory is refused for MindInsight (its parser reads
    the absolute path); a file-only run with a non-ASCII save_dir is fine (no parser involved)."""
    from validate_base import with_monitor

    from msmon.config.loader import load_config
    from msmon.validate.validator import validate

    home = tmp_path / "实验"
    home.mkdir()
    monkeypatch.chdir(home)
    config = home / "cfg.yaml"
    config.write_text(with_monitor(monitor_type=["file", "mindinsight"]), encoding="utf-8")
    (finding,) = [f for f in validate(load_config(config), cwd=home).findings if f.code == "MS201"]
    assert str(home / "monitor_logs") in finding.message and finding.is_error
    config.write_text(with_monitor(save_dir="./监控日志"), encoding="utf-8")
    assert [f for f in validate(load_config(config), cwd=home).findings if f.code == "MS201"] == []


@pytest.mark.parametrize(("changes", "steps"), [
    ({}, 400),  # 800 samples, batch 2
    ({"runner_config.gradient_accumulation_steps": 4}, 100),
    ({"use_parallel": True, "parallel.parallel_mode": 0, "parallel_config.data_parallel": 8}, 400),  # own shards
    ({"use_parallel": True, "parallel.parallel_mode": 1, "parallel.full_batch": True,
      "parallel_config.data_parallel": 8}, 50),  # every rank reads the global batch of 16
    ({"use_parallel": True, "parallel.parallel_mode": 1, "parallel.full_batch": True,
      "parallel_config.data_parallel": 2, "parallel_config.pipeline_stage": 2, "parallel_config.micro_batch_num": 4,
      "runner_config.gradient_accumulation_steps": 8}, 50),  # pipeline: micro batches, not the accumulation
])
def test_total_steps_count_what_a_step_takes(tmp_path, changes: dict, steps: int) -> None:
    """As mindformers sizes its batches (BaseTrainer._reset_dataset_batch_size); num_samples counts per shard."""
    from helpers_training import write_quickstart_config

    from msmon.config.loader import load_config
    from msmon.validate.validator import validate

    config = write_quickstart_config(tmp_path, steps=400, overrides=changes)
    assert validate(load_config(config), cwd=tmp_path).total_steps == steps


def test_ms011_a_missing_checkpoint_or_dataset_is_an_error_a_model_name_and_generated_data_are_not(tmp_path) -> None:
    from helpers_training import write_quickstart_config

    from msmon.config.loader import load_config
    from msmon.validate.validator import validate

    def ms011(**changes) -> list[tuple[str, str]]:
        config = write_quickstart_config(tmp_path, overrides=changes)
        return [(f.path, f.severity.value) for f in validate(load_config(config), cwd=tmp_path).findings
                if f.code == "MS011"]

    assert ms011() == []  # the generated quickstart dataset is made on demand
    assert ms011(load_checkpoint="llama2_7b") == []  # a model name mindformers resolves
    assert ms011(load_checkpoint=str(tmp_path / "gone.ckpt")) == [("load_checkpoint", "error")]
    assert ms011(src_strategy_path_or_dir="./strategy") == [("src_strategy_path_or_dir", "error")]
    assert ms011(**{"train_dataset.data_loader.dataset_dir": "", "train_dataset.data_loader.dataset_files": []}) == [
        ("train_dataset.data_loader.dataset_dir", "error")]
    assert ms011(run_mode="finetune") == [("load_checkpoint", "warning")]
    (tmp_path / "base.ckpt").write_bytes(b"")
    assert ms011(run_mode="finetune", load_checkpoint=str(tmp_path / "base.ckpt")) == []


def test_an_unset_variable_is_one_finding_and_rejected_values_are_not_shown_as_used(tmp_path, monkeypatch) -> None:
    """An unresolvable save_dir is MS004 only (not also MS002 'got None'); the resolved table does not present a
    rejected 'yes' or the unresolved save_dir as the values in use."""
    from msmon.config.loader import load_config
    from msmon.validate.validator import validate

    monkeypatch.delenv("MSMON_TEST_UNSET", raising=False)
    config = tmp_path / "cfg.yaml"
    config.write_text("run_mode: train\nmonitor_config:\n  run_name: r1\n  save_dir: ${oc.env:MSMON_TEST_UNSET}\n"
                      "  enable_monitor: 'yes'\n")
    result = validate(load_config(config), cwd=tmp_path)
    assert [(f.code, f.path) for f in result.findings if f.is_error] == [
        ("MS004", "monitor_config.save_dir"), ("MS002", "monitor_config.enable_monitor")]
    assert result.provenance["save_dir"] == result.provenance["enable_monitor"] == "rejected: default shown"
    assert result.provenance["run_name"] == "file"


def test_ms012_a_mindformers_setting_and_msmons_equivalent_both_on(tmp_path) -> None:
    from helpers_training import write_quickstart_config

    from msmon.config.loader import load_config
    from msmon.validate.validator import validate

    def ms012(overrides: dict, **monitor) -> list[str]:
        config = write_quickstart_config(tmp_path, overrides=overrides, **monitor)
        return [f.path for f in validate(load_config(config), cwd=tmp_path).findings if f.code == "MS012"]

    assert ms012({}) == []
    assert ms012({"tensorboard.tensorboard_dir": "tb"}, monitor_type=["file", "tensorboard"]) == [
        "tensorboard.tensorboard_dir"]
    assert ms012({"tensorboard.tensorboard_dir": "tb"}, monitor_type=["file"]) == []
    assert ms012({}, monitor_on=True, dump_path="", step_interval=5, log_interval=10) == [
        "monitor_config.step_interval"]
    assert ms012({}, monitor_on=True, dump_path="", step_interval=10, log_interval=10) == []


def test_the_key_table_covers_every_mindformers_monitoring_key() -> None:
    from msmon.compat import MONITORING_KEYS_ELSEWHERE
    from msmon.config.schema import MINDFORMERS_MONITOR_KEYS
    from msmon.validate.mf_equivalents import EQUIVALENTS

    keys = {e.key for e in EQUIVALENTS}
    assert {f"monitor_config.{k}" for k in MINDFORMERS_MONITOR_KEYS} <= keys
    elsewhere = {where.split(" ")[0] for where in MONITORING_KEYS_ELSEWHERE.values()}
    assert elsewhere - keys <= {"tensorboard.tensorboard_queue_size"}
