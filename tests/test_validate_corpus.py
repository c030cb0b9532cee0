"""A corpus of malformed configs: each gets exit 1 (or 2), a clear message naming the key, and creates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_msmon, tree_snapshot
from validate_base import BASE_YAML, with_monitor, with_section

pytestmark = pytest.mark.compat_smoke

# (id, file content: str | bytes | None for "no file" | "DIR" for a directory, overrides, exit, text, key path)
CASES = [
    ("yaml-syntax", "a: [1, 2\nb: 3\n", [], 1, "invalid YAML", "cfg.yaml"),
    ("tabs", "monitor_config:\n\tlog_interval: 10\n", [], 1, "tabs", "cfg.yaml"),
    ("duplicate-keys", "monitor_config:\n  log_interval: 1\n  log_interval: 2\n", [], 1, "duplicate", "cfg.yaml"),
    ("python-tag", "monitor_config: !!python/object/apply:os.system ['true']\n", [], 1, "tag", "cfg.yaml"),
    ("empty-file", "", [], 1, "empty", "cfg.yaml"),
    ("comments-only", "# nothing here\n\n# at all\n", [], 1, "empty", "cfg.yaml"),
    ("binary-file", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", [], 1, "binary", "cfg.yaml"),
    ("latin1-file", "monitor_config:\n  run_name: caf\xe9\n".encode("latin-1"), [], 1, "UTF-8", "cfg.yaml"),
    ("directory", "DIR", [], 1, "is a directory", "cfg.yaml"),
    ("missing-file", None, [], 1, "no such file", "cfg.yaml"),
    ("top-level-list", "- a\n- b\n", [], 1, "mapping", "cfg.yaml"),
    ("scalar-document", "just a string\n", [], 1, "mapping", "cfg.yaml"),
    ("non-ascii-save-dir", with_monitor(save_dir="./监控日志", monitor_type=["file", "mindinsight"]), [], 1, "MS201",
     "monitor_config.save_dir"),
    ("spaced-save-dir", with_monitor(save_dir="./monitor logs"), [], 1, "MS202", "monitor_config.save_dir"),
    ("control-char-save-dir", with_monitor(save_dir="./logs\x07x"), [], 1, "MS202", "monitor_config.save_dir"),
    ("dotdot-run-name", with_monitor(run_name="../escape"), [], 1, "MS101", "monitor_config.run_name"),
    ("slash-run-name", with_monitor(run_name="a/b"), [], 1, "MS101", "monitor_config.run_name"),
    ("long-run-name", with_monitor(run_name="r" * 256), [], 1, "MS101", "monitor_config.run_name"),
    ("long-project-name", with_monitor(project_name="p" * 300), [], 1, "MS102", "monitor_config.project_name"),
    ("space-project-name", with_monitor(project_name="my project"), [], 1, "MS102", "monitor_config.project_name"),
    ("string-interval", with_monitor(log_interval="10"), [], 1, "MS002", "monitor_config.log_interval"),
    ("zero-interval", with_monitor(log_interval=0), [], 1, "MS401", "monitor_config.log_interval"),
    ("bool-interval", with_monitor(log_interval=True), [], 1, "MS002", "monitor_config.log_interval"),
    ("float-interval", with_monitor(log_interval=2.5), [], 1, "MS002", "monitor_config.log_interval"),
    ("yes-verbose", with_monitor(verbose="yes"), [], 1, "MS002", "monitor_config.verbose"),
    ("int-enable", with_monitor(enable_monitor=1), [], 1, "MS002", "monitor_config.enable_monitor"),
    ("unknown-metric", with_monitor(track_metrics=["loss", "grad_norm_scale"]), [], 1, "grad_norm",
     "monitor_config.track_metrics[1]"),
    ("metrics-mapping", with_monitor(track_metrics={"loss": 1}), [], 1, "MS002", "monitor_config.track_metrics"),
    ("unknown-backend", with_monitor(monitor_type=["file", "tensorbord"]), [], 1, "tensorboard",
     "monitor_config.monitor_type[1]"),
    ("numeric-backend", with_monitor(monitor_type=42), [], 1, "MS002", "monitor_config.monitor_type"),
    ("unknown-key", with_monitor(log_intervall=10), [], 1, "log_interval", "monitor_config.log_intervall"),
    ("unknown-nested-key", with_monitor(health={"stall": {"timeout": 5}}), [], 1, "timeout_s",
     "monitor_config.health.stall.timeout"),
    ("bad-action", with_monitor(health={"nonfinite": {"action": "kill"}}), [], 1, "MS002",
     "monitor_config.health.nonfinite.action"),
    ("unset-env", with_monitor(run_name="${oc.env:MSMON_TEST_NEVER_SET}"), [], 1, "MS004",
     "monitor_config.run_name"),
    ("dangling-reference", with_monitor(save_dir="${paths.nowhere}"), [], 1, "MS004", "monitor_config.save_dir"),
    ("section-is-list", with_section("monitor_config", ["loss"]), [], 1, "MS003", "monitor_config"),
    ("mlflow-no-uri", with_monitor(monitor_type=["mlflow"]), [], 1, "MS503", "monitor_config.mlflow.tracking_uri"),
    ("mlflow-bad-uri", with_monitor(monitor_type=["mlflow"], mlflow={"tracking_uri": "localhost:5000"}), [], 1,
     "MS504", "monitor_config.mlflow.tracking_uri"),
    ("grad-norm-not-exposed", with_section("runner_wrapper.use_clip_grad", False), [], 1, "MS302",
     "monitor_config.track_metrics[1]"),
    ("cpu-sink-mode", with_section("runner_config.sink_mode", True), [], 1, "MS601", "runner_config.sink_mode"),
    ("cpu-bfloat16", with_section("model.model_config.compute_dtype", "bfloat16"), [], 1, "MS604",
     "model.model_config.compute_dtype"),
    ("cpu-stock-wrapper", with_section("runner_wrapper.type", "MFTrainOneStepCell"), [], 1, "MS606",
     "runner_wrapper.type"),
    ("cpu-monitor-on-dump", with_monitor(monitor_on=True, dump_path="./dump"), [], 1, "MS605",
     "monitor_config.monitor_on"),
    ("monitor-on-null-dump-path", with_monitor(monitor_on=True, dump_path="NULL").replace("'NULL'", "null"), [], 1,
     "MS008", "monitor_config.dump_path"),
    ("lr-negative", with_section("optimizer.type", "AdamW"), ["lr_schedule.learning_rate=-1.e-4"], 1, "MS805",
     "lr_schedule.learning_rate"),
    ("bad-mindformers-key-type", with_monitor(step_interval="every"), [], 1, "MS002", "monitor_config.step_interval"),
    ("override-bad-type", BASE_YAML, ["monitor_config.log_interval=abc"], 1, "MS002", "monitor_config.log_interval"),
    ("override-unknown-key", BASE_YAML, ["monitor_config.log_intervall=5"], 1, "MS001",
     "monitor_config.log_intervall"),
    ("override-not-key-value", BASE_YAML, ["log_interval"], 2, "KEY=VALUE", "log_interval"),
]


@pytest.mark.parametrize(
    ("content", "overrides", "code", "text", "key"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_config(tmp_path: Path, content, overrides, code, text, key) -> None:
    config = tmp_path / "cfg.yaml"
    if content == "DIR":
        config.mkdir()
    elif isinstance(content, bytes):
        config.write_bytes(content)
    elif content is not None:
        config.write_text(content, encoding="utf-8")
    before = tree_snapshot(tmp_path)

    result = run_msmon("validate", str(config), *overrides, cwd=tmp_path)

    output = result.stdout + result.stderr
    assert result.code == code, output
    assert text in output, output
    assert key in output, output
    assert "Traceback" not in output
    assert tree_snapshot(tmp_path) == before, "validate must not create or change anything"


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30
