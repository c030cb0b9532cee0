"""`msmon init CONFIG` on a real training YAML (one mindformers ships): a starting monitor_config appended with
every comment and line of the file kept, a backup copy first, and a config that validates; refusals leave the file
untouched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers_training import mcore_yaml, shipped_mindformers_yaml

from msmon.config.loader import QUICKSTARTS_DIR, load_config
from msmon.validate.validator import validate


def msmon(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "msmon", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def without_section(text: str) -> str:
    """``text`` without its top-level ``monitor_config`` block (every other line as it was)."""
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("monitor_config:"):
            inside = True
        elif inside and line[:1] not in (" ", "#", "\n", ""):
            inside = False
        if not inside:
            kept.append(line)
    return "".join(kept)


def legacy_yaml(tmp_path: Path) -> str:
    """The legacy Llama quickstart without its monitor_config section (mindformers 1.9 ships no legacy train YAML)."""
    return without_section((QUICKSTARTS_DIR / "quickstart.yaml").read_text())


@pytest.mark.parametrize("source", [mcore_yaml, legacy_yaml], ids=["mcore", "legacy"])
def test_init_adds_a_section_that_validates_and_keeps_the_file(tmp_path: Path, source) -> None:
    text = source(tmp_path)
    assert "monitor_config" not in yaml.safe_load(text)
    config = tmp_path / "pretrain_qwen3.yaml"
    config.write_text(text, encoding="utf-8")
    config.chmod(0o640)
    assert "MS000" in {f.code for f in validate(load_config(config)).findings}  # the control: no section yet
    result = msmon("init", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    written = config.read_text(encoding="utf-8")
    assert written.startswith(text) and "# msmon: what to watch" in written  # every line and comment kept
    assert (config.stat().st_mode & 0o777) == 0o640
    copies = list((tmp_path / "monitor_config_backup").glob("pretrain_qwen3_*.yaml"))
    assert len(copies) == 1 and copies[0].read_text(encoding="utf-8") == text
    assert "valid" in result.stdout and f"added monitor_config: {config}" in result.stdout
    section = yaml.safe_load(written)["monitor_config"]
    assert section["project_name"] == "pretrain_qwen3" and section["health"]["nonfinite"]["action"] == "stop"
    checked = validate(load_config(config))
    assert checked.valid and checked.settings.enable_monitor, [f.message for f in checked.findings]
    again = msmon("init", str(config), cwd=tmp_path)
    assert again.returncode == 1 and "its monitor_config section (line" in again.stderr
    assert "already holds msmon's keys" in again.stderr
    assert config.read_text(encoding="utf-8") == written and "Traceback" not in again.stderr


@pytest.mark.parametrize(("content", "says"), [
    (None, "no such file"), ("a: [1, 2\n", "is not valid YAML"), ("- just\n- a list\n", "not a training YAML"),
])
def test_init_refuses_what_it_cannot_extend_and_writes_nothing(tmp_path: Path, content: str | None,
                                                                says: str) -> None:
    config = tmp_path / "train.yaml"
    if content is not None:
        config.write_text(content)
    result = msmon("init", str(config), cwd=tmp_path)
    assert result.returncode == 1 and says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "monitor_config_backup").exists()
    assert (config.read_text() if content is not None else None) == content


def test_init_adds_msmons_keys_beside_mindformers_own_in_a_shipped_config(tmp_path: Path) -> None:
    """A shipped config whose monitor_config holds only mindformers' keys was refused ("already has a monitor_config
    section"); and init exited 1 for the config's cluster paths. Now msmon's keys go beside mindformers' (every line
    kept), init exits 0, and the rest of the config's findings are listed apart."""
    shipped = shipped_mindformers_yaml("pretrain_telechat3_105b_a4b_4k.yaml")
    text = shipped.read_text(encoding="utf-8")
    mindformers_keys = yaml.safe_load(text)["monitor_config"]
    config = tmp_path / "telechat3.yaml"
    config.write_text(text, encoding="utf-8")
    result = msmon("init", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    written = config.read_text(encoding="utf-8")
    inserted = KEY_LINES(written)
    kept = [line for line in written.splitlines() if "msmon" not in line and line not in inserted]
    assert kept == text.splitlines()  # every line of the file kept, in its order
    section = yaml.safe_load(written)["monitor_config"]
    assert {k: section[k] for k in mindformers_keys} == mindformers_keys and section["project_name"] == "telechat3"
    assert "the rest of the config, which init did not change: 1 error(s)" in result.stdout
    assert "MS011 train_dataset.data_loader.config.data_path" in result.stdout
    own, _ = validate(load_config(config)).msmon_findings()
    assert not any(f.is_error for f in own)
    again = msmon("init", str(config), cwd=tmp_path)
    assert again.returncode == 1 and "already holds msmon's keys (enable_monitor" in again.stderr
    assert config.read_text(encoding="utf-8") == written


def KEY_LINES(text: str) -> set[str]:  # noqa: N802 - a constant's shape: the lines init inserted
    from msmon.ops.init_config import KEYS

    keys = {line.strip() for line in KEYS.format(project="telechat3").splitlines()}
    return {line for line in text.splitlines() if line.strip() in keys}
