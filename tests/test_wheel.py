"""First contact from a pip install: msmon built as a wheel and installed into a fresh virtualenv (not the
checkout, not its editable install) runs the shipped quickstart by name and adds monitoring to a real
mindformers YAML. The virtualenv reaches the suite's installed dependencies through one ``.pth`` line naming
their site-packages; ``.pth`` files inside that directory (the checkout's editable finder among them) are not
processed, so only the wheel's msmon can be imported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from helpers_training import mcore_yaml
from launch import msmon_env

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv's ``bin`` with msmon installed from a wheel built from a copy of the sources."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO / "msmon", source / "msmon", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(source)],
                   check=True, timeout=600, capture_output=True)
    wheel, = (root / "dist").glob("msmon-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=300)
    python = root / "venv" / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=600, capture_output=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "suite_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python.parent


def fresh(venv: Path, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "msmon"), *args], cwd=cwd, env=msmon_env(cwd), capture_output=True, text=True,
                          timeout=timeout)


def installed_package(venv: Path) -> Path:
    """The msmon the virtualenv imports, asked outside the checkout (``python -c`` imports from its cwd first)."""
    found = subprocess.run([str(venv / "python"), "-c", "import msmon; print(msmon.__file__)"], cwd=venv,
                           check=True, capture_output=True, text=True).stdout.strip()
    return Path(found).parent


def test_the_wheel_is_what_the_virtualenv_imports(venv: Path) -> None:
    package = installed_package(venv)
    assert package.is_relative_to(venv.parent) and not package.is_relative_to(REPO)
    assert sorted(p.name for p in (package / "config" / "quickstarts").iterdir()) == [
        "quickstart-moe.yaml", "quickstart-qwen3.yaml", "quickstart.yaml"]


def test_msmon_run_quickstart_trains_from_the_wheel_and_finetunes_with_run_mindformers_flags(
        canonical, venv: Path, tmp_path: Path) -> None:
    """`msmon run quickstart` from the wheel (50 steps), fine-tuned from the last checkpoint of the canonical
    completed legacy run with run_mindformer.py's flags (`--run_mode finetune --load_checkpoint CKPT`, mindformers
    1.9's iteration layout): the shipped quickstart trains from the installed package, writes nothing into it, and its
    first step's loss is that run's level, not the untrained start's (the quickstart's `checkpoint.load_path: ''` had
    made mindformers ignore the flag and start from scratch). One training for both: a user's first fine-tune is a
    run of the installed msmon."""
    trained = canonical("completed_legacy")
    ckpt = trained.run_dir / "logs" / "output" / "checkpoint" / "iteration_00000200"
    assert (ckpt / "common.json").is_file()
    start, end = trained.records()[0]["loss"], trained.records()[-1]["loss"]
    package = installed_package(venv)
    before = sorted(str(p.relative_to(package)) for p in package.rglob("*") if "__pycache__" not in p.parts)
    result = fresh(venv, "run", "quickstart", "train_dataset.data_loader.num_samples=100", "--plain",
                   "--run_mode", "finetune", "--load_checkpoint", str(ckpt), cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir, = (tmp_path / "monitor_logs" / "quickstart").iterdir()
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["config_path"] == str(package / "config/quickstarts/quickstart.yaml")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 50 and len(rows) >= 5
    assert (run_dir / "config.yaml").read_text() == (package / "config/quickstarts/quickstart.yaml").read_text()
    handed = yaml.safe_load((run_dir / "mindformers.yaml").read_text())
    assert handed["run_mode"] == "finetune" and handed["checkpoint"]["load_path"] == str(ckpt)
    first = rows[0]
    assert abs(first["loss"] - end) < abs(first["loss"] - start) and first["loss"] < 5.0, (first, start, end)
    after = sorted(str(p.relative_to(package)) for p in package.rglob("*") if "__pycache__" not in p.parts)
    assert after == before  # no backup, no output written into the installed package


def test_msmon_init_from_the_wheel_gives_a_config_that_validates(venv: Path, tmp_path: Path) -> None:
    config = tmp_path / "pretrain_qwen3.yaml"
    config.write_text(mcore_yaml(tmp_path), encoding="utf-8")
    before = fresh(venv, "validate", str(config), cwd=tmp_path)
    assert "MS000" in before.stdout + before.stderr  # the control: no section yet
    added = fresh(venv, "init", str(config), cwd=tmp_path)
    assert added.returncode == 0, added.stdout + added.stderr
    checked = fresh(venv, "validate", str(config), "--worker-num", "16", cwd=tmp_path)  # its 16 devices, as run
    assert checked.returncode == 0 and "valid: " in checked.stdout, checked.stdout + checked.stderr
