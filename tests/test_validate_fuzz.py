"""Random YAML documents and random monitor_config values never make a traceback escape."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from msmon.cli.main import app
from msmon.config.schema import MonitorSettings

KEYS = [*MonitorSettings.__dataclass_fields__, "monitor_on", "step_interval", "bogus", "health"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.sampled_from(["file", "mindinsight", "mlflow", "auto", "../x", "${oc.env:NOPE}",
                                           "${now:%Y}", "监控", "a b", "${", "}"]),
)
values = st.recursive(scalars, lambda children: st.lists(children, max_size=4) | st.dictionaries(
    st.sampled_from(KEYS + ["stall", "timeout_s", "tracking_uri"]), children, max_size=4), max_leaves=12)
monitor_sections = st.dictionaries(st.sampled_from(KEYS), values, max_size=8)
runner = CliRunner()


def _invoke(path: Path, *extra: str) -> None:
    result = runner.invoke(app, ["validate", str(path), *extra])
    assert result.exit_code in (0, 1, 2), result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    assert "internal error" not in result.output  # msmon's own breakage is a failure, not an accepted exit 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(section=monitor_sections)
def test_random_monitor_config_values(tmp_path: Path, section) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"monitor_config": section}, allow_unicode=True))
    _invoke(path)
    _invoke(path, "--json")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=string.printable + "：监控\x00\t{}[]&*!%@`|>-", max_size=200))
def test_random_yaml_documents(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(text, encoding="utf-8")
    _invoke(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=st.lists(st.text(alphabet=string.ascii_letters + "._=[]{}$:'\" ,", max_size=30), max_size=3))
@example(overrides=["[="])  # found by this test: omegaconf's key parser raised IndexError
def test_random_overrides(tmp_path: Path, overrides: list[str]) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("monitor_config:\n  run_name: r1\n")
    _invoke(path, *[o for o in overrides if not o.startswith("-")])


def test_a_scalar_document_is_a_one_line_error(tmp_path: Path) -> None:
    """Found by the fuzz test: the document "0" made OmegaConf assert (an internal error)."""
    for text in ("0", "1.5", "true", "- a\n- b\n", "~"):
        path = tmp_path / "cfg.yaml"
        path.write_text(text)
        result = runner.invoke(app, ["validate", str(path)])
        assert result.exit_code == 1 and "the top level must be a mapping" in result.output, (text, result.output)


@pytest.mark.parametrize("override", ["[=1", "no_equals_sign", "a=[1", "=1"])
def test_every_malformed_override_is_a_usage_error(tmp_path: Path, override: str) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("monitor_config:\n  run_name: r1\n")
    result = runner.invoke(app, ["validate", str(path), override])
    assert result.exit_code == 2, result.output
    assert "override" in result.output and "Traceback" not in result.output


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(port=st.integers(-10, 70000), master_port=st.integers(-10, 70000),
       name=st.text(alphabet=string.ascii_letters + "._-/ é", min_size=0, max_size=300),
       override=st.text(alphabet=string.ascii_letters + "._=[]{}$:'\" ,", max_size=20))
def test_random_ports_names_and_overrides_never_make_an_internal_error(tmp_path: Path, monkeypatch, port: int,
                                                                       master_port: int, name: str,
                                                                       override: str) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"run_mode": "train", "monitor_config": {"run_name": name}}))
    args = ["run", str(path), "--dry-run", "--board", "--port", str(port), "--master-port", str(master_port)]
    result = runner.invoke(app, [*args, *([override] if override and not override.startswith("-") else [])])
    assert result.exit_code in (0, 1, 2), result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), repr(
        result.exception)
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert list(tmp_path.iterdir()) == [path]  # a dry run creates nothing
