"""The reference docs are generated from the code and must not drift."""

from __future__ import annotations

from pathlib import Path

from msmon.cli.docgen import render_cli
from msmon.cli.docgen import render_config as render
from msmon.validate.codes import CODES

REPO = Path(__file__).resolve().parents[1]


def test_config_reference_is_current() -> None:
    assert (REPO / "docs" / "config.md").read_text(encoding="utf-8") == render(), (
        "docs/config.md is stale: run `python -m msmon.cli.docgen`"
    )


def test_cli_reference_is_current() -> None:
    rendered = render_cli()
    for group, subcommands in (("board", ("start", "status", "stop")),
                               ("backup-config", ("save", "list", "diff", "restore"))):
        for name in subcommands:  # the subcommands' own help, not only the group's list of them
            assert f"## `msmon {group} {name}`" in rendered and f"Usage: msmon {group} {name}" in rendered
    assert (REPO / "docs" / "cli.md").read_text(encoding="utf-8") == rendered, (
        "docs/cli.md is stale: run `python -m msmon.cli.docgen`"
    )


def test_every_emitted_code_is_documented() -> None:
    import re

    emitted = set()
    for path in (REPO / "msmon").rglob("*.py"):
        emitted |= set(re.findall(r'"(MS\d{3})"', path.read_text(encoding="utf-8")))
    assert emitted - set(CODES) == set()


def test_a_detectors_switch_is_explained_by_its_settings_docstring() -> None:
    from dataclasses import dataclass

    import pytest

    from msmon.config.coerce import field_docs
    from msmon.config.health import DetectorSettings, HealthSettings, LossSpikeSettings

    meanings = {row[0]: row[3] for row in field_docs(HealthSettings)}
    assert meanings["loss_spike.enabled"] == LossSpikeSettings.__doc__
    assert meanings["loss_spike.action"].startswith("log (alerts.jsonl and msmon.log only)")
    assert meanings["enabled"] == "run the health detectors and the stall check"

    @dataclass(frozen=True)
    class Undocumented(DetectorSettings):
        window: int = 5

    with pytest.raises(TypeError, match="Undocumented needs a docstring"):
        field_docs(Undocumented)
