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


LOAD_REGISTRIES = ("import json, sys; from msmon.validate.registry_cache import load_builtins; "
                   "found = load_builtins(); "
                   "print(json.dumps({'imported': sorted(m for m in ('mindformers', 'mindspore') if m in sys.modules), "
                   "'sizes': {k: len(v) for k, v in found.names.items()}, 'classes': len(found.classes), "
                   "'sections': len(found.schema.sections)}))")


def test_the_registries_are_read_once_in_a_child_then_from_the_cache(tmp_path: Path) -> None:
    """The first call reads the installed mindformers in a child process and says so in one stderr line; the next
    reads msmon's cache; neither imports mindformers or mindspore itself."""
    import subprocess
    import sys

    env = {**os.environ, "MSMON_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.run([sys.executable, "-c", LOAD_REGISTRIES], env=env, capture_output=True, text=True,
                            check=True, timeout=600) for _ in range(2)]
    runs = [json.loads(proc.stdout.splitlines()[-1]) for proc in procs]
    said = [[line for line in proc.stderr.splitlines() if "reading the installed mindformers' registry" in line]
            for proc in procs]
    assert [len(lines) for lines in said] == [1, 0], [proc.stderr for proc in procs]
    assert said[0][0].startswith("msmon: reading the installed mindformers' registry once (about ")
    assert said[0][0].endswith(" s; cached for later calls)")
    assert [run["imported"] for run in runs] == [[], []]
    assert runs[0] == runs[1] and runs[0]["sizes"]["mindformers registry"] > 100 and runs[0]["sections"] > 10
    assert len(list((tmp_path / "cache" / "registry").glob("*.json"))) == 1


def _fake_package(site: Path, version: str | None) -> Path:
    """A package in ``site``: installed regularly (a ``name-version.dist-info`` beside it) or not (no version)."""
    package = site / "fake_registry_pkg"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("NAMES = []\n")
    for old in site.glob("fake_registry_pkg-*.dist-info"):
        for child in old.iterdir():
            child.unlink()
        old.rmdir()
    if version is not None:
        dist = site / f"fake_registry_pkg-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Name: fake_registry_pkg\nVersion: {version}\n")
        (dist / "RECORD").write_text("fake_registry_pkg/__init__.py,,\n")
    return package


def _later(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_an_edited_source_file_of_an_unversioned_package_gets_a_new_cache_entry(tmp_path: Path, monkeypatch) -> None:
    from msmon.validate import registry_cache

    package = _fake_package(tmp_path / "site", None)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(registry_cache, "REGISTRY_PACKAGES", ("fake_registry_pkg",))
    monkeypatch.setenv("MSMON_CACHE_DIR", str(tmp_path / "cache"))
    before = registry_cache.cache_file()
    assert before == registry_cache.cache_file() and before.parent == tmp_path / "cache" / "registry"
    _later(package / "__init__.py")
    assert registry_cache.cache_file() != before


def test_a_regular_install_is_fingerprinted_by_its_record_an_upgrade_or_reinstall_gets_a_new_entry(
        tmp_path: Path, monkeypatch) -> None:
    """No scan of the package's sources (mindspore has thousands): its dist-info's RECORD, which every install
    rewrites, and its version."""
    from msmon.validate import registry_cache

    site = tmp_path / "site"
    package = _fake_package(site, "1.0.0")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry_cache, "REGISTRY_PACKAGES", ("fake_registry_pkg",))
    monkeypatch.setenv("MSMON_CACHE_DIR", str(tmp_path / "cache"))
    first = registry_cache.cache_file()
    _later(package / "__init__.py")  # a source file alone (no install): the same entry
    assert registry_cache.cache_file() == first
    _later(site / "fake_registry_pkg-1.0.0.dist-info" / "RECORD")  # reinstalled
    reinstalled = registry_cache.cache_file()
    _fake_package(site, "1.1.0")  # upgraded
    upgraded = registry_cache.cache_file()
    assert len({first, reinstalled, upgraded}) == 3
