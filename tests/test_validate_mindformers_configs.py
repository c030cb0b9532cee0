"""mindformers' own training YAMLs (shipped in its wheel) load and validate unchanged, with no traceback."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import run_msmon

from msmon.compat import missing_feature
from msmon.config.loader import load_config
from msmon.validate import validate


def _shipped_configs() -> list[Path]:
    spec = importlib.util.find_spec("mindformers")
    if spec is None or not spec.origin:
        return []
    site = Path(spec.origin).parents[1]
    return sorted((site / "configs").rglob("*.yaml"))


CONFIGS = _shipped_configs()
NO_QWEN3 = missing_feature("qwen3_train_configs")

pytestmark = pytest.mark.compat_smoke


@pytest.mark.skipif(NO_QWEN3 is not None, reason=str(NO_QWEN3))
def test_mindformers_ships_train_configs() -> None:
    names = {p.name for p in CONFIGS}
    assert "pretrain_qwen3_32b_4k.yaml" in names and len(CONFIGS) >= 20


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_real_config_loads_and_validates(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    loaded = load_config(path)
    result = validate(loaded)
    assert all(f.code not in {"MS001", "MS002", "MS003"} for f in result.findings), result.findings


@pytest.mark.skipif(NO_QWEN3 is not None, reason=str(NO_QWEN3))
def test_real_config_with_anchors_and_monitor_keys_via_cli(tmp_path: Path) -> None:
    path = next(p for p in CONFIGS if p.name == "pretrain_qwen3_32b_4k.yaml")
    text = path.read_text()
    assert "&" in text or "monitor_config" in text
    result = run_msmon("validate", str(path), "monitor_config.log_interval=20", "--json", cwd=tmp_path)
    # its placeholder (the Megatron data_path '/path/to/wiki103-megatron_text_document') is refused: MS011; its
    # 16 devices need `msmon run --worker-num 16` (use_parallel: True), as validate says (MS026) unless told
    found = json.loads(result.stdout)["findings"]
    placeholders = {f["path"] for f in found if f["code"] == "MS011" and "placeholder" in f["message"]}
    assert placeholders == {"train_dataset.data_loader.config.data_path"}, found
    assert [(f["code"], f["path"]) for f in found if f["severity"] == "error" and f["code"] != "MS011"] == [
        ("MS026", "use_parallel")] and "--worker-num N" in next(f["hint"] for f in found if f["code"] == "MS026")
    assert result.code == 1
    (tmp_path / "wiki.bin").write_bytes(b"")  # a Megatron prefix names its .bin/.idx files
    result = run_msmon("validate", str(path), "monitor_config.log_interval=20", "--worker-num", "16",
                       f"train_dataset.data_loader.config.data_path=['1','{tmp_path / 'wiki'}']", "--json",
                       cwd=tmp_path)
    assert result.code == 0, result.stdout + result.stderr


def test_a_finetune_config_with_a_placeholder_model_directory_is_refused(tmp_path: Path) -> None:
    path = next((p for p in CONFIGS if p.name == "finetune_qwen3.yaml"), None)
    if path is None:
        pytest.skip("this mindformers ships no finetune_qwen3.yaml")
    result = run_msmon("validate", str(path), "--json", cwd=tmp_path)
    found = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "MS011"]
    assert result.code == 1 and [f["path"] for f in found if f["severity"] == "error"][:1] == ["pretrained_model_dir"]
    assert "'/path/to/Qwen3-32B' is a placeholder" in found[0]["message"]
