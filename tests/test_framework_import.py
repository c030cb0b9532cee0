"""When `import mindformers` itself fails: one clear line saying so and why, never false "not registered" warnings.

A fake `mindformers` package first on PYTHONPATH fails the way mindformers 2.0.0 does without the unpublished
hyper_parallel (its import raises ModuleNotFoundError); the installed metadata still says mindformers is there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_msmon
from helpers_training import write_quickstart_config

REASON = "mindformers failed to import: ModuleNotFoundError: No module named 'hyper_parallel'"


@pytest.fixture
def broken_mindformers(tmp_path: Path) -> dict[str, str]:
    package = tmp_path / "fake" / "mindformers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import hyper_parallel  # noqa: F401 - not published, as in 2.0.0\n")
    path = os.pathsep.join(filter(None, [str(tmp_path / "fake"), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "MSMON_HOME": str(tmp_path / "home"), "MSMON_CACHE_DIR": str(tmp_path / "cache")}


def test_validate_deep_says_mindformers_failed_to_import_and_nothing_else(tmp_path: Path, broken_mindformers) -> None:
    config = write_quickstart_config(tmp_path)
    result = run_msmon("validate", str(config), "--deep", cwd=tmp_path, env=broken_mindformers, timeout=300)
    assert result.code == 1, result.stdout + result.stderr
    findings = [line for line in result.stdout.splitlines() if line.startswith(("error ", "warning "))]
    assert findings == [f"error MS704 mindformers: {REASON} -> fix the environment; `msmon doctor` checks it"]
    assert "MS703" not in result.stdout + result.stderr and "Traceback" not in result.stderr


def test_validate_deep_json_holds_one_ms704_and_no_ms703(tmp_path: Path, broken_mindformers) -> None:
    config = write_quickstart_config(tmp_path)
    result = run_msmon("validate", str(config), "--deep", "--json", cwd=tmp_path, env=broken_mindformers, timeout=300)
    report = json.loads(result.stdout)
    assert result.code == 1 and report["valid"] is False
    assert [(f["code"], f["message"]) for f in report["findings"]] == [("MS704", REASON)]


def test_validate_deep_with_the_real_mindformers_has_no_ms704(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path)
    result = run_msmon("validate", str(config), "--deep", "--json", cwd=tmp_path, timeout=300)
    assert result.code == 0, result.stdout + result.stderr
    assert [f["code"] for f in json.loads(result.stdout)["findings"]] == []


def test_run_says_mindformers_failed_to_import(tmp_path: Path, broken_mindformers) -> None:
    config = write_quickstart_config(tmp_path)
    result = run_msmon("run", str(config), "--plain", cwd=tmp_path, env=broken_mindformers, timeout=300)
    assert result.code == 3, result.stderr[-2000:]
    ended = [line for line in result.stderr.splitlines() if line.startswith("msmon: run failed")]
    assert len(ended) == 1 and REASON in ended[0], result.stderr[-2000:]
    info = json.loads((tmp_path / "monitor_logs" / "quickstart" / "test_run" / "run.json").read_text())
    assert info["status"] == "failed" and info["error"].startswith(REASON)
    assert "Traceback" not in result.stderr


def test_an_auto_register_check_without_deep_says_it_too(tmp_path: Path, broken_mindformers) -> None:
    (tmp_path / "my_model.py").write_text("class MyLlama:\n    model_type = 'my_llama'\n")
    config = write_quickstart_config(tmp_path, overrides={"model.arch.auto_register": "my_model.MyLlama"})
    result = run_msmon("validate", str(config), "--json", cwd=tmp_path, env=broken_mindformers, timeout=300)
    assert result.code == 1 and [f["code"] for f in json.loads(result.stdout)["findings"]] == ["MS704"]


LOAD_REGISTRIES = ("import json, sys; from msmon.validate.registry import load_builtins; "
                   "names = load_builtins().names; "
                   "print(json.dumps({'imported': 'mindformers' in sys.modules, "
                   "'sizes': {k: len(v) for k, v in names.items()}}))")


def test_the_registries_are_imported_once_then_read_from_the_cache(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "MSMON_CACHE_DIR": str(tmp_path / "cache")}
    runs = [json.loads(subprocess.run([sys.executable, "-c", LOAD_REGISTRIES], env=env, capture_output=True,
                                      text=True, check=True, timeout=300).stdout.splitlines()[-1]) for _ in range(2)]
    assert [run["imported"] for run in runs] == [True, False]
    assert runs[0]["sizes"] == runs[1]["sizes"] and runs[0]["sizes"]["mindformers registry"] > 100
    assert len(list((tmp_path / "cache" / "registry").glob("*.json"))) == 1


def test_an_edited_source_file_of_a_registry_package_gets_a_new_cache_entry(tmp_path: Path, monkeypatch) -> None:
    from msmon.validate import registry

    package = tmp_path / "site" / "fake_registry_pkg"
    package.mkdir(parents=True)
    module = package / "__init__.py"
    module.write_text("NAMES = []\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(registry, "REGISTRY_PACKAGES", ("fake_registry_pkg",))
    monkeypatch.setenv("MSMON_CACHE_DIR", str(tmp_path / "cache"))
    before = registry._cache_file()
    assert before == registry._cache_file() and before.parent == tmp_path / "cache" / "registry"
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert registry._cache_file() != before
