"""`msmon backup-config`: dedup, list, diff, restore, atomic writes, interpolations never resolved on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from msmon.errors import MsmonError
from msmon.ops import backup
from msmon.ops.backup import backup_config, diff_configs, list_copies, restore

SECRET = "s3cr3t-token-value"
CONFIG = """# training config
model:
  hidden: 64
monitor_config:
  log_interval: 10
  project_name: demo
  mlflow:
    tracking_uri: ${oc.env:MLFLOW_URI}
  webhook: https://hooks.example/${oc.env:HOOK_TOKEN}
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOOK_TOKEN", SECRET)
    monkeypatch.setenv("MLFLOW_URI", f"http://user:{SECRET}@127.0.0.1:5000")
    path = tmp_path / "train.yaml"
    path.write_text(CONFIG)
    return path


def msmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "msmon", "backup-config", *args], capture_output=True, text=True,
                          timeout=60)


T0 = datetime(2026, 1, 2, 3, 4, 5)


def test_copy_is_byte_exact_and_deduplicated(config: Path) -> None:
    first = backup_config(config, note="baseline", now=T0)
    assert first.created and first.path == config.parent / "monitor_config_backup" / "train_20260102_030405.yaml"
    assert first.path.read_bytes() == config.read_bytes()
    again = backup_config(config, now=T0 + timedelta(seconds=5))
    assert not again.created and again.path == first.path and str(again) == f"identical to {first.path}"
    config.write_text(CONFIG.replace("log_interval: 10", "log_interval: 20"))
    same_second = backup_config(config, now=T0)  # same timestamp: a suffix, never an overwrite
    assert same_second.created and same_second.path.name == "train_20260102_030405_1.yaml"
    assert first.path.read_text() == CONFIG
    assert [c.path.name for c in list_copies(config)] == ["train_20260102_030405.yaml", "train_20260102_030405_1.yaml"]


def test_no_resolved_secret_on_disk(config: Path, tmp_path: Path) -> None:
    result = msmon("save", str(config), "--note", "with secrets")
    assert result.returncode == 0, result.stderr
    config.write_text(CONFIG.replace("10", "30"))
    assert msmon("save", str(config)).returncode == 0
    listing, diff = msmon("list", str(config)), msmon("diff", str(config), "1")
    assert listing.returncode == 0 and diff.returncode == 0
    files = [p for p in (tmp_path / "monitor_config_backup").iterdir() if p.name != ".lock"]
    assert len(files) == 3  # two copies and the index
    for file in files:
        assert SECRET not in file.read_text(), file
        assert "${oc.env:HOOK_TOKEN}" in file.read_text() or file.name == "index.json"
    assert SECRET not in listing.stdout + diff.stdout
    assert "${oc.env:MLFLOW_URI}" in diff.stdout


def test_list_shows_time_hash_note_and_changed_keys(config: Path) -> None:
    backup_config(config, note="baseline", now=T0)
    config.write_text(CONFIG.replace("log_interval: 10", "log_interval: 5\n  verbose: true"))
    backup_config(config, note="faster logging", now=T0 + timedelta(minutes=1))
    config.write_text(CONFIG.replace("hidden: 64", "hidden: 128").replace("log_interval: 10", "log_interval: 5\n"
                                                                         "  verbose: true"))
    backup_config(config, now=T0 + timedelta(minutes=2))
    result = msmon("list", str(config))
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    copies = list_copies(config)
    assert rows[1].split()[:4] == ["1", "2026-01-02", "03:04:05", copies[0].sha256[:8]]
    assert "baseline" in rows[1] and "(first copy)" in rows[1]
    assert "faster logging" in rows[2] and "log_interval, verbose" in rows[2]
    assert "(no monitor_config change)" in rows[3]
    assert rows[-1] == "current file: identical to #3"


def test_diff_forms(config: Path) -> None:
    backup_config(config, now=T0)
    config.write_text(CONFIG.replace("log_interval: 10", "log_interval: 20").replace("  project_name: demo\n", ""))
    backup_config(config, now=T0 + timedelta(minutes=1))
    config.write_text(CONFIG.replace("log_interval: 10", "log_interval: 20") + "  verbose: true\n")

    latest_vs_file = diff_configs(config)
    assert latest_vs_file.keys == ["+ project_name: 'demo'", "+ verbose: True"]
    a_vs_b = diff_configs(config, "1", "2")
    assert a_vs_b.keys == ["~ log_interval: 10 -> 20", "- project_name: 'demo'"]
    assert "-  log_interval: 10" in a_vs_b.unified and "+  log_interval: 20" in a_vs_b.unified
    by_stamp = diff_configs(config, "20260102_030405")
    assert by_stamp.left == "train_20260102_030405.yaml" and "+ verbose: True" in by_stamp.keys
    cli = msmon("diff", str(config), "1", "latest")
    assert cli.returncode == 0 and "~ log_interval: 10 -> 20" in cli.stdout and "@@" in cli.stdout
    with pytest.raises(MsmonError, match="matches 2 copies"):
        diff_configs(config, "20260102_030")
    with pytest.raises(MsmonError, match="matches 0 copies"):
        diff_configs(config, "7")


def test_restore_backs_up_the_current_file_first(config: Path) -> None:
    original = config.read_bytes()
    backup_config(config, now=T0)
    config.chmod(0o640)
    config.write_text(CONFIG.replace("hidden: 64", "hidden: 999"))
    result = msmon("restore", str(config), "1")
    assert result.returncode == 0, result.stderr
    assert config.read_bytes() == original and (config.stat().st_mode & 0o777) == 0o640
    copies = list_copies(config)
    assert len(copies) == 2 and b"hidden: 999" in copies[1].path.read_bytes()
    assert copies[1].note == "before restoring train_20260102_030405.yaml"
    assert "restored train_20260102_030405.yaml" in result.stdout


def test_writes_are_atomic(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backup_config(config, note="kept", now=T0)
    directory = config.parent / "monitor_config_backup"
    before = {p.name: p.read_bytes() for p in directory.iterdir()}

    def broken_link(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    config.write_text(CONFIG.replace("10", "11"))
    monkeypatch.setattr(backup.os, "link", broken_link)
    with pytest.raises(OSError):
        backup_config(config, now=T0 + timedelta(minutes=1))
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before  # no partial copy, no temp file
    monkeypatch.undo()

    copy_bytes = list_copies(config)[0].path.read_bytes()
    current = config.read_bytes()

    def broken_replace(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        restore(config, "1")
    assert config.read_bytes() == current != copy_bytes  # the config is untouched
    assert not [p for p in config.parent.iterdir() if p.name.endswith(".tmp")]


def test_cli_errors(config: Path) -> None:
    missing = msmon("save", "missing.yaml")
    assert missing.returncode == 1 and "no such file" in missing.stderr
    assert msmon("list", str(config), "A").returncode == 2
    too_many = msmon("diff", str(config), "1", "2", "3")
    assert too_many.returncode == 2 and "diff takes at most two copies" in too_many.stderr
    assert msmon("restore", str(config)).returncode == 2  # REF is required
    none_yet = msmon("restore", str(config), "1")
    assert none_yet.returncode == 1 and "no backup copies yet" in none_yet.stderr
    assert "msmon backup-config save CONFIG" in none_yet.stderr and "Traceback" not in none_yet.stderr
    saved = msmon("save", str(config), "--dest", "elsewhere/backups")
    assert saved.returncode == 0 and (config.parent / "elsewhere" / "backups").is_dir()
    assert "identical to" in msmon("save", str(config), "--dest", "elsewhere/backups").stdout


def test_the_flag_forms_of_0_1_still_work_and_say_the_new_form(config: Path) -> None:
    """Deprecated until 0.3.0: each flag form does what its subcommand does, with one line on stderr naming it."""
    saved = msmon(str(config), "--note", "old form")
    assert saved.returncode == 0 and saved.stdout.startswith("saved ")
    assert f"use `msmon backup-config save {config} --note old form`" in saved.stderr
    listing = msmon(str(config), "--list")
    assert listing.returncode == 0 and "old form" in listing.stdout and "backup-config list" in listing.stderr
    config.write_text(CONFIG.replace("log_interval: 10", "log_interval: 20"))
    diff = msmon(str(config), "--diff", "1")
    assert diff.returncode == 0 and "~ log_interval: 10 -> 20" in diff.stdout
    restored = msmon(str(config), "--restore=1")
    assert restored.returncode == 0 and config.read_text() == CONFIG
    assert f"use `msmon backup-config restore {config} 1`" in restored.stderr
    both = msmon(str(config), "--list", "--restore", "1")
    assert both.returncode == 2 and "--list and --restore exclude each other" in both.stderr
    assert "Traceback" not in both.stderr
    assert msmon(str(config), "A").returncode == 2  # refs without --diff, as before
