"""Unit tests of the quickstart pieces: dataset paths, generation, the helper config writer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_msmon
from helpers_training import quickstart_parts, write_quickstart_config

from msmon.cli import common
from msmon.config import datasets, loader
from msmon.errors import MsmonError
from msmon.runner import quickstart


def test_dataset_path_is_pure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MSMON_CACHE_DIR", str(tmp_path / "cache"))
    path = datasets.dataset_path("quickstart")
    assert path == str(tmp_path / "cache" / "datasets" / "quickstart-v1.mindrecord")
    assert datasets.is_generated(path)
    assert not (tmp_path / "cache").exists()


def test_unknown_dataset_is_an_error() -> None:
    with pytest.raises(MsmonError, match="unknown generated dataset 'nope'"):
        datasets.dataset_path("nope")


def test_sequences_are_deterministic_arithmetic_progressions() -> None:
    spec = datasets.DATASETS["quickstart"]
    rows = quickstart.sequences(spec)
    assert rows.shape == (spec.samples, spec.seq_length + 1)
    assert (rows == quickstart.sequences(spec)).all()
    diffs = (rows[:, 1:] - rows[:, :-1]) % spec.vocab_size
    assert (diffs == diffs[:, :1]).all()
    assert set(diffs[:, 0]) <= set(range(1, spec.max_stride + 1))


@pytest.mark.training
def test_ensure_dataset_creates_a_readable_mindrecord(tmp_path: Path) -> None:
    code = (
        "import mindspore.dataset as ds; from msmon.runner import quickstart as q\n"
        "from msmon.config import datasets as c\n"
        "p = c.dataset_path('quickstart'); q.ensure_dataset(p); q.ensure_dataset(p)\n"
        "d = ds.MindDataset(p, columns_list=['input_ids'], shuffle=False)\n"
        "row = next(d.create_dict_iterator(num_epochs=1, output_numpy=True))['input_ids']\n"
        "print(d.get_dataset_size(), row.dtype, row.shape[0], (row == q.sequences(c.DATASETS['quickstart'])[0]).all())"
    )
    env = dict(os.environ, MSMON_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-4:] == ["1024", "int32", "65", "True"]
    names = sorted(p.name for p in (tmp_path / "cache" / "datasets").iterdir())
    assert names == ["quickstart-v1.mindrecord", "quickstart-v1.mindrecord.db"]


def test_write_quickstart_config_keeps_outputs_inside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MSMON_CACHE_DIR", str(tmp_path / "cache"))
    path = write_quickstart_config(tmp_path, steps=30, log_interval=5, overrides={"seed": 3})
    text = path.read_text()
    assert "${msmon_dataset:quickstart}" in text
    training, monitor = quickstart_parts(path)
    assert monitor["save_dir"] == str(tmp_path / "monitor_logs")
    assert monitor["log_interval"] == 5 and monitor["run_name"] == "test_run"
    assert training["train_dataset"]["data_loader"]["num_samples"] == 60
    assert training["train_dataset"]["data_loader"]["dataset_dir"] == datasets.dataset_path("quickstart")
    assert training["seed"] == 3 and training["monitor_config"] == {"monitor_on": False}
    assert training["runner_wrapper"]["type"] == "MsmonCPUTrainOneStepCell"


# -- the quickstarts shipped inside the package, run by name -------------------------------------------------
def test_every_shipped_quickstart_is_named_and_the_help_says_so() -> None:
    assert loader.quickstart_names() == ["quickstart", "quickstart-moe", "quickstart-qwen3"]
    assert common.QUICKSTART_NAMES == ", ".join(loader.quickstart_names())  # the help spelled out without imports


def test_a_name_is_the_shipped_file_unless_a_file_of_that_name_is_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shipped = loader.load_config("quickstart-qwen3")
    assert shipped.path == loader.QUICKSTARTS_DIR / "quickstart-qwen3.yaml" and loader.is_quickstart(shipped.path)
    assert shipped.section("use_legacy") is False
    (tmp_path / "quickstart").write_text("seed: 7\nmonitor_config:\n  enable_monitor: false\n")
    own = loader.load_config("quickstart")
    assert own.path == Path("quickstart") and own.section("seed") == 7 and not loader.is_quickstart(own.path)
    with pytest.raises(MsmonError) as missing:
        loader.load_config("quickstart-llama")
    assert "no such file" in missing.value.message
    assert "quickstart, quickstart-moe, quickstart-qwen3" in missing.value.hint


def test_a_dry_run_of_a_quickstart_names_its_file(tmp_path: Path) -> None:
    result = run_msmon("run", "quickstart", "--dry-run", cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert f"config:        {loader.QUICKSTARTS_DIR / 'quickstart.yaml'}" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing created, no backup beside anything
