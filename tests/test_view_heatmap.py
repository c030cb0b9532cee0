"""The report's gradient-norm heatmap (groups x steps, log norm over each group's own median): cell values, spikes
and non-finite values kept through downsampling, the group series kept out of the line plots, names as text, and
the page drawn by a real browser without console errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

from conftest import run_msmon
from test_view_unit import chromium_open, make_run, page_data

from msmon.view.heatmap import heatmap
from msmon.view.report import build_report
from msmon.view.series import load_run

GROUPS = ("embedding", "layers.0", "layers.1", "final_norm", "head")
BASE = {"embedding": 0.8, "layers.0": 1.2, "layers.1": 0.9, "final_norm": 0.05, "head": 0.6}


def add_groups(run: Path, spike: tuple[str, int] = ("layers.1", 1210), nan: tuple[str, int] = ("head", 1500),
               odd: str | None = None, prefix: str = "grad_norm/") -> None:
    """Give every record of ``run`` per-group series of ``prefix``: each group at its base level (x1.5 every 7th
    log), ``spike`` x20 at one step, ``nan`` NaN at one step, and an ``odd`` group name when given."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        record = json.loads(line)
        for group in (*GROUPS, *([odd] if odd else [])):
            value = BASE.get(group, 0.1) * (1.5 if i % 7 == 0 else 1.0)
            if (group, record["step"]) == spike:
                value *= 20
            if (group, record["step"]) == nan:
                value = math.nan
            record[f"{prefix}{group}"] = value
        out.append(json.dumps(record))
    (run / "metrics.jsonl").write_text("\n".join(out) + "\n")


def test_cells_are_log_norms_over_each_groups_median(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "groups", steps=300, every=10)
    add_groups(run_dir)
    data = heatmap(load_run(run_dir))
    assert data is not None and data["groups"] == list(GROUPS)
    assert data["baseline"]["layers.0"] == 1.2 and len(data["starts"]) == 300
    row = data["cells"][GROUPS.index("layers.1")]
    assert row[data["starts"].index(1210)] == math.log10(20) and row[data["starts"].index(20)] == 0.0
    assert data["cells"][GROUPS.index("head")][data["starts"].index(1500)] == "nan"


def test_downsampling_keeps_the_spike_and_the_nan_of_100k_steps(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "long", steps=100_000, every=1, spike_at=None, nan_at=None, alerts=False)
    add_groups(run_dir, spike=("layers.0", 64_321), nan=("embedding", 90_001))
    data = heatmap(load_run(run_dir))
    assert data is not None and len(data["starts"]) == 600
    row = data["cells"][GROUPS.index("layers.0")]
    column = next(c for c, (lo, hi) in enumerate(zip(data["starts"], data["ends"], strict=True)) if lo <= 64_321 <= hi)
    assert row[column] == math.log10(20) and max(v for v in row if isinstance(v, float)) == math.log10(20)
    assert "nan" in data["cells"][GROUPS.index("embedding")]


def test_the_report_draws_groups_as_a_heatmap_not_as_plots(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "page")
    add_groups(run_dir, odd="layers.<b>x</b>")
    with (run_dir / "alerts.jsonl").open("a") as handle:
        handle.write(json.dumps({"time": 1.8e9, "step": 1200, "detector": "grad_explosion", "severity": "warning",
                                 "message": "growing; led by layers.1 (x20.0)", "values": {"groups": {"led_by": [1]}},
                                 "action": "alert", "context_file": "context/step_1200_grad_explosion.jsonl"}) + "\n")
    html = build_report(load_run(run_dir))
    data = page_data(html)
    assert not [p for p in data["panels"] if p["metric"].startswith("grad_norm/")]
    assert data["heatmap"]["groups"][-1] == "layers.<b>x</b>"
    assert "Gradient norm by group (6)" in html and "layers.<b>" not in html.split('id="msmon-data"')[0]
    assert "<code>context/step_1200_grad_explosion.jsonl</code>" in html and "groups=" not in html
    assert "Gradient norm by group" not in build_report(load_run(make_run(tmp_path, "plain")))


def test_the_update_ratios_are_a_second_heatmap_and_no_plots(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "updates", steps=300, every=10)
    add_groups(run_dir, spike=("layers.0", 1210), prefix="update_ratio/")
    add_groups(run_dir, prefix="weight_norm/")
    html = build_report(load_run(run_dir))
    data = page_data(html)
    assert data["heatmap"] is None and data["update_heatmap"]["groups"] == list(GROUPS)
    row = data["update_heatmap"]["cells"][GROUPS.index("layers.0")]
    assert row[data["update_heatmap"]["starts"].index(1210)] == math.log10(20)
    assert not [p for p in data["panels"] if "/" in p["metric"]]  # weight norms and ratios are no plots of their own
    assert "Update-to-weight ratio by group (5)" in html and "Gradient norm by group" not in html


def test_the_heatmap_renders_in_chromium_without_console_errors(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "browser", steps=2000, every=10, spike_at=None)
    add_groups(run_dir, spike=("layers.1", 15_000))
    add_groups(run_dir, spike=("layers.0", 12_000), prefix="update_ratio/")
    report = tmp_path / "report.html"
    assert run_msmon("report", str(run_dir), "--out", str(report)).code == 0
    shot, dom = chromium_open(report, tmp_path, height=2400)
    assert 'data-msmon-heatmap="5"' in dom and 'data-msmon-update-heatmap="5"' in dom
    assert 'data-msmon-ready="5"' in dom
    compare = tmp_path / "compare.html"
    assert run_msmon("compare", str(run_dir), str(make_run(tmp_path, "other")), "--out", str(compare)).code == 0
    _, dom = chromium_open(compare, tmp_path)
    assert "data-msmon-heatmap=" not in dom and 'data-msmon-ready="5"' in dom


def test_the_report_draws_each_moe_layers_routing_summaries_not_a_plot_per_expert(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "moe")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    routing = {f"moe/layer_{i}/expert_{e}": 640.0 for i in range(2) for e in range(4)}
    routing.update({f"moe/layer_{i}/{name}": 1.0 for i in range(2) for name in ("max_load", "cv", "idle_experts")})
    rows = [json.dumps({**json.loads(line), **routing}) for line in lines]
    (run_dir / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    drawn = {p["metric"] for p in page_data(build_report(load_run(run_dir)))["panels"]}
    assert {m for m in drawn if m.startswith("moe/")} == {
        f"moe/layer_{i}/{name}" for i in range(2) for name in ("max_load", "cv", "idle_experts")}
