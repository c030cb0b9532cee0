"""run_mindformer.py's flags on `msmon run` / `msmon export`: same names, the same keys set."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_msmon
from helpers_training import write_quickstart_config

from msmon.config.launch_flags import LAUNCH_FLAGS, parse_launch_flags
from msmon.errors import ExitCode, MsmonError


def test_flags_become_the_keys_run_mindformer_sets_after_the_plain_overrides() -> None:
    plain, flags = parse_launch_flags([
        "seed=1", "--run_mode", "finetune", "--load_checkpoint=/ckpt/it's.ckpt", "--use_parallel", "true",
        "--epochs", "3", "--options", "a.b=1", "c=x", "--register_path", "mods", "--resume_training", "last.ckpt",
    ])
    assert plain == ["seed=1"] and flags.register_path == "mods"
    assert flags.overrides == ("run_mode='finetune'", "load_checkpoint='/ckpt/it''s.ckpt'", "use_parallel=True",
                               "runner_config.epochs=3", "resume_training='last.ckpt'", "a.b=1", "c=x")


@pytest.mark.parametrize(("args", "message"), [
    (["--plian"], "no such option: --plian"),
    (["--seed"], "--seed needs a value"),
    (["--seed", "one"], "expected an integer"),
    (["--use_parallel", "yes"], "expected True or False"),
])
def test_a_wrong_flag_is_a_usage_error(args: list[str], message: str) -> None:
    with pytest.raises(MsmonError, match=message) as raised:
        parse_launch_flags(args)
    assert raised.value.exit_code == ExitCode.USAGE


def test_every_flag_names_a_distinct_key() -> None:
    assert len({f.key for f in LAUNCH_FLAGS}) == len({f.name for f in LAUNCH_FLAGS}) == len(LAUNCH_FLAGS)


def test_export_and_dry_run_take_the_flags_and_refuse_a_typo(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path)
    exported = run_msmon("export", str(config), "--run_mode", "finetune", "--batch_size", "4", cwd=tmp_path)
    assert exported.code == 0, exported.stderr
    assert "run_mode: finetune" in exported.stdout and "batch_size: 4" in exported.stdout
    typo = run_msmon("run", str(config), "--dry-run", "--bacth_size", "4", cwd=tmp_path)
    assert typo.code == ExitCode.USAGE and "no such option: --bacth_size" in typo.stderr
    assert "Traceback" not in typo.stderr and not (tmp_path / "monitor_logs").exists()
