"""The prose of the docs against the code: every default, threshold and code range a sentence states is checked
here, so a change in the code that the docs do not follow fails (docs/config.md and docs/cli.md are generated and
checked by test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from msmon.config.schema import MonitorSettings
from msmon.validate.codes import CODES

REPO = Path(__file__).resolve().parent.parent
DEFAULTS = MonitorSettings()

#: (file, a sentence with one or more ``(?P<key>...)`` numbers, {group: the settings path it states}).
CLAIMS = [
    ("docs/health.md", r"the slowness must last (?P<a>\d+) steps \(`min_steps`\)",
     {"a": "health.throughput_drop.min_steps"}),
    ("docs/health.md", r"Now it\s+is (?P<a>[\d.]+) x for (?P<b>\d+) steps \(`fraction`, `min_steps`\)",
     {"a": "health.throughput_drop.fraction", "b": "health.throughput_drop.min_steps"}),
    ("docs/health.md", r"max\(`factor` x the slowest of the last\s+`recent` step durations, `floor_s`\) = "
                       r"max\((?P<a>\d+) x slowest, (?P<b>\d+) s\)",
     {"a": "health.stall.factor", "b": "health.stall.floor_s"}),
    ("docs/health.md", r"the timeout is at least `slow_step_timeout_s` \((?P<a>\d+) minutes\)",
     {"a": ("health.stall.slow_step_timeout_s", 60)}),
    ("docs/health.md", r"> (?P<a>[\d.]+) x the other ranks' median and >= (?P<b>\d+) ms more, at every logged step for "
                       r"(?P<c>\d+) steps [^;]*; not in the first (?P<d>\d+) steps",
     {"a": "health.slow_rank.ratio", "b": "health.slow_rank.min_excess_ms", "c": "health.slow_rank.window_steps",
      "d": "health.slow_rank.skip_steps"}),
    ("docs/health.md", r"over the last (?P<a>\d+) steps \(R² >= (?P<b>[\d.]+)\) that grows >= (?P<c>\d+) MiB over "
                       r"them; not in the first (?P<d>\d+) steps",
     {"a": "health.memory_growth.window_steps", "b": "health.memory_growth.min_fit",
      "c": "health.memory_growth.min_growth_mb", "d": "health.memory_growth.skip_steps"}),
    ("docs/health.md", r"routes more than (?P<a>[\d.]+) of its tokens to one expert .* on (?P<b>\d+) consecutive logs",
     {"a": "health.moe_collapse.fraction", "b": "health.moe_collapse.patience"}),
    ("docs/health.md", r"exactly 0 tokens on consecutive logs \(at least 2\) spanning (?P<a>\d+) steps",
     {"a": "health.moe_dead_experts.steps"}),
    ("docs/health.md", r"lowest median of (?P<a>\d+) logs so far\) \+ (?P<b>[\d.]+) and above (?P<c>[\d.]+) x that "
                       r"low, on (?P<d>\d+) consecutive logs",
     {"a": "health.moe_imbalance_growth.level_logs", "b": "health.moe_imbalance_growth.rise",
      "c": "health.moe_imbalance_growth.ratio", "d": "health.moe_imbalance_growth.patience"}),
]


def settings_value(path: str) -> float:
    value: object = DEFAULTS
    for part in path.split("."):
        value = getattr(value, part)
    return float(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "pattern", "keys"), CLAIMS, ids=[f"{c[0]}:{'/'.join(map(str, c[2].values()))}"
                                                                   for c in CLAIMS])
def test_every_stated_default_is_the_codes(name: str, pattern: str, keys: dict) -> None:
    text = (REPO / name).read_text(encoding="utf-8")
    found = re.search(pattern, text)
    assert found, f"{name}: the sentence /{pattern}/ is gone: update CLAIMS with the new wording"
    for group, stated in keys.items():
        path, unit = stated if isinstance(stated, tuple) else (stated, 1)
        assert float(found.group(group)) * unit == settings_value(path), (
            f"{name} says {found.group(group)} for {path}; the code's default is {settings_value(path) / unit:g}")


def unreleased(changelog: str) -> str:
    start = changelog.index("## [Unreleased]")
    return changelog[start:changelog.index("\n## [", start + 1)]


def test_every_code_range_the_docs_state_exists_and_a_family_range_is_whole() -> None:
    """Every code of a range the docs state (``MS805-MS808``) exists, and "Codes MS901-MS911", a whole family,
    ends at its last code (MS912 exists): in docs/, the README and the CHANGELOG's unreleased part."""
    texts = {path.name: path.read_text(encoding="utf-8") for path in (REPO / "docs").glob("*.md")}
    texts["README.md"] = (REPO / "README.md").read_text(encoding="utf-8")
    texts["CHANGELOG.md (Unreleased)"] = unreleased((REPO / "CHANGELOG.md").read_text(encoding="utf-8"))
    ranges = 0
    for name, text in texts.items():
        for found in re.finditer(r"(Codes )?\b(MS(\d)(\d\d))-(MS\3(\d\d))\b", text):
            whole, first, family, low, last, high = found.groups()
            stated = {f"MS{family}{n:02d}" for n in range(int(low), int(high) + 1)}
            missing = sorted(stated - set(CODES))
            assert not missing, f"{name}: {first}-{last} names {missing}, which do not exist"
            if whole:
                members = sorted(code for code in CODES if code.startswith(f"MS{family}"))
                assert (first, last) == (members[0], members[-1]), f"{name}: Codes {first}-{last}; the family is " \
                    f"{members[0]}-{members[-1]}"
            ranges += 1
    assert ranges >= 3, "the ranges the docs state are gone: the test reads nothing"


def test_what_config_md_says_of_types_and_a_missing_section_is_what_validate_does(tmp_path: Path) -> None:
    from msmon.config.loader import load_config
    from msmon.validate.section import check_section
    from msmon.validate.validator import validate

    text = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    assert "`monitor_type: file` and `track_metrics: loss` are one-item" in text
    assert "without one, monitoring is off (`enable_monitor` false, MS000)" in text
    settings, findings = check_section({"monitor_type": "File", "track_metrics": "loss"})
    assert (settings.monitor_type, settings.track_metrics) == (["file"], ["loss"])
    assert not [f for f in findings if f.severity == "error"]
    _, strict = check_section({"log_interval": "10", "verbose": "yes"})
    assert {f.path for f in strict if f.code == "MS002"} == {"monitor_config.log_interval", "monitor_config.verbose"}
    config = tmp_path / "train.yaml"
    config.write_text("model: {}\n")
    result = validate(load_config(config))
    assert result.settings.enable_monitor is False and "MS000" in {f.code for f in result.findings}
