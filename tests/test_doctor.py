"""`msmon doctor`: the real environment's versions, each known-bad rule as a finding, and the run's blocking subset."""

from __future__ import annotations

import json
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from conftest import run_msmon, tree_snapshot
from helpers_training import write_quickstart_config

from msmon import compat
from msmon.errors import MsmonError
from msmon.ops import doctor

GOOD = {"mindspore": "2.9.0", "mindformers": "1.9.0", "mindinsight": "2.3.1", "protobuf": "3.20.1", "pandas": "1.5.3",
        "marshmallow": "3.26.2"}


def codes(findings) -> list[str]:
    return [f.code for f in findings]


@pytest.mark.compat_smoke
def test_doctor_json_reports_the_real_versions_of_this_environment(tmp_path: Path) -> None:
    result = run_msmon("doctor", "--json", cwd=tmp_path)
    report = json.loads(result.stdout)
    for name in ("mindspore", "mindformers", "mindinsight", "protobuf", "tensorboard", "tensorboardX", "mlflow"):
        assert report["versions"][name] == metadata.version(name), name
    assert report["python"] == platform.python_version()
    assert report["tested_pair"] is True  # CI runs this in every venv of the tested matrix
    assert report["devices"]["CPU"]["available"] is True
    assert report["msrun"] and Path(report["msrun"]).name == "msrun"
    assert report["ok"] is True and result.code == 0, report["findings"]
    assert not any(f["severity"] == "error" for f in report["findings"])


def test_doctor_screen_is_short_and_ends_with_the_verdict(tmp_path: Path) -> None:
    result = run_msmon("doctor", cwd=tmp_path)
    lines = result.stdout.splitlines()
    assert result.code == 0 and len(lines) <= 24
    assert lines[0].split() == ["python", platform.python_version()]
    assert f"mindformers   {metadata.version('mindformers')}   (tested pair)" in lines
    assert lines[-1].startswith("ok: 0 error(s)")


def test_doctor_imports_neither_mindspore_nor_mindformers() -> None:
    heavy = "('mindspore', 'mindformers', 'mindinsight', 'mlflow', 'tensorboard')"
    code = (f"from msmon.ops.doctor import diagnose; import sys; diagnose(); "
            f"print([m for m in {heavy} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_doctor_with_config_checks_save_dir_device_and_a_busy_port(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_msmon("doctor", str(config), "--port", str(port), "--json", cwd=tmp_path)
    report = json.loads(result.stdout)
    assert report["config"]["save_dir"] == str(tmp_path / "monitor_logs") and report["config"]["save_dir_ok"]
    assert report["config"]["free_mb"] > 0 and report["config"]["device_target"] == "CPU"
    assert report["config"]["port_free"] is False
    assert "MS911" in [f["code"] for f in report["findings"]] and result.code == 0  # a warning


def test_doctor_with_config_whose_save_dir_is_a_file_and_target_is_ascend_exits_1(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file")
    config = write_quickstart_config(tmp_path, save_dir=str(tmp_path / "taken"),
                                     overrides={"context.device_target": "Ascend"})
    result = run_msmon("doctor", str(config), "--port", "0", cwd=tmp_path)
    assert result.code == 1
    assert any(line.startswith("error MS203 monitor_config.save_dir") for line in result.stdout.splitlines())
    assert any(line.startswith("error MS910 context.device_target") for line in result.stdout.splitlines())
    assert result.stdout.splitlines()[-1].startswith("problems: 2 error(s)")


def test_doctor_with_a_missing_config_is_one_line_exit_1(tmp_path: Path) -> None:
    result = run_msmon("doctor", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert result.code == 1 and result.stderr.count("\n") == 1 and "nope.yaml" in result.stderr
    assert "Traceback" not in result.stderr


# -- each rule -----------------------------------------------------------------------------------------------


def test_a_tested_pair_with_good_tools_has_no_finding() -> None:
    assert doctor.check_framework(GOOD) == [] and doctor.check_known_bad(GOOD) == []


def test_protobuf_newer_than_mindinsight_accepts() -> None:
    (finding,) = doctor.check_known_bad({**GOOD, "protobuf": "7.34.0"})
    assert finding.code == "MS906" and not finding.is_error
    assert "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION" in finding.message
    (pin,) = doctor.check_known_bad({**GOOD, "protobuf": "3.20.3"})
    assert pin.code == "MS906" and "pin" in pin.message


def test_pandas_2_breaks_mindinsight_lineage_pages() -> None:
    (finding,) = doctor.check_known_bad({**GOOD, "pandas": "2.2.3"})
    assert finding.code == "MS907" and "iteritems" in finding.message and "pandas<2" in finding.hint


def test_marshmallow_4_breaks_mindinsight_searches() -> None:
    (finding,) = doctor.check_known_bad({**GOOD, "marshmallow": "4.4.0"})
    assert finding.code == "MS912" and "HTTP 500" in finding.message and "marshmallow<4" in finding.hint
    assert doctor.check_known_bad(GOOD) == []


def test_without_mindinsight_its_combinations_do_not_matter_but_its_absence_does() -> None:
    assert codes(doctor.check_known_bad({**GOOD, "mindinsight": None, "protobuf": "7.34.0", "pandas": "3.0"})) == [
        "MS905"]


def test_mindformers_2_needs_the_unpublished_hyper_parallel() -> None:
    findings = doctor.check_framework({"mindspore": "2.10.0", "mindformers": "2.0.0"})
    assert codes(findings) == ["MS903", "MS904"]
    assert findings[0].is_error and "hyper_parallel" in findings[0].message and "not published" in findings[0].message
    assert "outside msmon's supported ranges" in findings[1].message


def test_an_untested_pair_inside_the_ranges_is_a_warning() -> None:
    (finding,) = doctor.check_framework({"mindspore": "2.9.0", "mindformers": "1.8.0"})
    assert finding.code == "MS904" and not finding.is_error and "inside msmon's supported ranges" in finding.message


def test_missing_framework_is_blocking() -> None:
    findings = doctor.blocking_findings({"mindspore": None, "mindformers": None})
    assert codes(findings) == ["MS902", "MS902"] and all(f.is_error for f in findings)
    assert doctor.blocking_findings({"mindspore": "2.9.0", "mindformers": "1.8.0"}) == []  # untested: not blocking


def test_python_other_than_3_11() -> None:
    assert doctor.check_python((3, 11, 7)) == []
    assert codes(doctor.check_python((3, 12, 1))) == ["MS901"]


def test_msrun_missing() -> None:
    assert codes(doctor.check_msrun(None, "2.9.0")) == ["MS908"] and doctor.check_msrun("/x/msrun", "2.9.0") == []


def test_devices_and_the_config_target(tmp_path: Path) -> None:
    cann = compat.CannInfo(tmp_path, "8.3.RC1")
    here = doctor.devices({"cpu", "ascend", "gpu"}, [], [], None, "2.9.0")
    assert here["CPU"].available and not here["Ascend"].available and not here["GPU"].available
    assert codes(doctor.check_device_target("Ascend", here)) == ["MS910"]
    assert doctor.check_device_target("CPU", here) == []
    npu = doctor.devices({"cpu", "ascend"}, ["davinci0", "davinci1"], [], cann, "2.9.0")
    assert npu["Ascend"].available and "2 NPU(s), CANN 8.3.RC1" in npu["Ascend"].detail
    assert npu["Ascend"].to_dict()["cann"] == "8.3.RC1" and not npu["GPU"].available
    no_cann = doctor.devices({"cpu", "ascend"}, ["davinci0"], [], None, "2.9.0")
    assert not no_cann["Ascend"].available and "no CANN toolkit" in no_cann["Ascend"].detail
    assert not doctor.devices(set(), [], [], None, None)["CPU"].available


def test_cann_that_mindspore_does_not_accept() -> None:
    old = compat.CannInfo(Path("/usr/local/Ascend/ascend-toolkit/latest"), "7.0.RC1")
    assert codes(doctor.check_cann("2.9.0", old, ["davinci0"])) == ["MS909"]
    assert doctor.check_cann("2.9.0", old, []) == []  # no NPU: nothing runs on it anyway


# -- msmon run performs the blocking subset before it creates anything -----------------------------------------


def test_run_without_mindformers_stops_before_creating_anything(tmp_path: Path, monkeypatch) -> None:
    from msmon.runner.plan import RunRequest, prepare

    config = write_quickstart_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(compat, "installed_versions", lambda names=compat.REPORTED: {**GOOD, "mindformers": None})
    before = tree_snapshot(tmp_path)
    with pytest.raises(MsmonError, match=r"mindformers is not installed \[MS902\]") as caught:
        prepare(RunRequest(config=str(config)))
    assert "msmon doctor" in caught.value.hint and caught.value.exit_code == 1
    assert tree_snapshot(tmp_path) == before
