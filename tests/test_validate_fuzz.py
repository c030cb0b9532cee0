"""Random YAML documents and random monitor_config values never make a traceback escape."""

from __future__ import annotations

import shutil
import string
import uuid
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


SHM = "/dev/shm"  # noqa: S108 - a tmpfs: each example's directory there is removed at its end
SAVE_DIR_BASES = ["{tmp}", "{tmp}/file", "/proc", "/proc/self", "/proc/self/fd/0", "/sys/kernel", "/dev", "/dev/null",
                  SHM + "/{unique}", "relative", ".", "~"]
save_dir_parts = st.lists(st.sampled_from(["x", "..", ".", "a" * 300, "監控", "y" * 120, "-n", "$HOME", "${now:%Y}",
                                           "file", "fd", "0"]), max_size=3)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from(SAVE_DIR_BASES), parts=save_dir_parts)
@example(base="/proc", parts=[])  # found by a new user: valid, then an internal error creating /proc/<project>
@example(base="/sys/kernel", parts=["x"])
@example(base="{tmp}", parts=["a" * 300])  # ENAMETOOLONG from Path.exists: an internal error before
def test_random_save_dirs_are_judged_by_what_they_are(tmp_path: Path, monkeypatch, base: str,
                                                        parts: list[str]) -> None:
    """Any save_dir: validate never makes an internal error, and a save_dir it accepts under the test's own
    directory is one msmon can create the run directory in (else a one-line MsmonError)."""
    from msmon.config.loader import load_config
    from msmon.errors import MsmonError
    from msmon.runner.rundir import create_run_dir
    from msmon.validate.validator import validate

    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    unique = f"msmon-fuzz-{tmp_path.name}"
    save_dir = "/".join([base.format(tmp=tmp_path, unique=unique), *parts])
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"monitor_config": {"run_name": "r1", "save_dir": save_dir}}))
    _invoke(path)
    result = validate(load_config(path))
    resolved = (tmp_path / Path(save_dir).expanduser()).resolve()
    if result.valid and resolved.is_relative_to(tmp_path):
        try:  # a fresh run directory each example: a failure here is msmon's one-line error, never an exception
            create_run_dir(resolved / "p" / uuid.uuid4().hex)
        except MsmonError as exc:
            assert exc.message.startswith("cannot create the run directory"), exc.message
    shutil.rmtree(f"{SHM}/{unique}", ignore_errors=True)


@pytest.mark.parametrize("save_dir", ["/proc", "/proc/self/x", "/sys/kernel/x", "/dev/x"])
def test_a_save_dir_on_a_kernel_file_system_is_refused_before_the_run(tmp_path: Path, save_dir: str) -> None:
    """Found by a new user: validate called save_dir /proc valid, then `msmon run` died with an internal error."""
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"run_mode": "train", "monitor_config": {"run_name": "r1", "save_dir": save_dir}}))
    for command in (["validate", str(path)], ["run", str(path), "--plain"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1 and "lies on the kernel's" in result.output, result.output
        assert "internal error" not in result.output


PATH_COMMANDS = [["report"], ["replay"], ["compare"], ["status"], ["probe"], ["runs"], ["resume"], ["board", "start"],
                 ["validate"], ["init"], ["export", "quickstart", "-o"], ["backup-config", "save"], ["doctor"]]


@pytest.mark.parametrize("command", PATH_COMMANDS, ids=lambda command: "-".join(command))
@pytest.mark.parametrize("shape", ["name_too_long", "under_a_file", "kernel_fs"])
def test_every_path_argument_of_an_unusual_shape_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     command: list[str], shape: str) -> None:
    """A run directory or file given with a name too long (report, replay, status, runs, board start and compare
    were internal errors: Path.exists raises ENAMETOOLONG), under a file, or on a kernel file system; probe too."""
    monkeypatch.chdir(tmp_path)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    path = {"name_too_long": str(tmp_path / ("y" * 300)), "under_a_file": str(plain / "run"),
            "kernel_fs": "/proc/self/msmon_run"}[shape]
    after = {"compare": [path], "probe": ["profile"]}.get(command[0], [])
    result = runner.invoke(app, [*command, path, *after])
    assert result.exit_code not in (0, None) and not isinstance(result.exception, (OSError, AttributeError)), (
        result.output, repr(result.exception))
    assert "internal error" not in result.output and "Traceback" not in result.output, result.output
    assert plain.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt"]
