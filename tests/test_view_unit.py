"""Report, compare and live view on synthesized run directories (the documented formats), plus Chromium."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import require_tool, run_msmon
from launch import pty_chunks

from msmon.errors import MsmonError
from msmon.util.jsonfiles import read_jsonl
from msmon.util.numbers import nonfinite_kind
from msmon.view.compare import compare_runs, differing_keys
from msmon.view.live import sparkline
from msmon.view.progress import PlainView, StepClock, plain_line
from msmon.view.report import build_report
from msmon.view.series import load_run, run_overrides
from msmon.view.sketch import downsample

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0")


def make_run(root: Path, name: str, steps: int = 300, every: int = 10, lr: float = 5e-3, seed: int = 0,
             spike_at: int | None = 2000, nan_at: int | None = 1500, alerts: bool = True,
             half_line: bool = False) -> Path:
    """A run directory as the runner, file backend and health monitor write it."""
    run = root / "proj" / name
    run.mkdir(parents=True)
    t0 = 1_764_467_817.0
    with (run / "metrics.jsonl").open("w") as handle:
        for i in range(1, steps + 1):
            step = i * every
            loss = 6.9 * math.exp(-step / 800) + 0.3 + 0.01 * ((i * 7919) % 13)
            if step == spike_at:
                loss = 9.7
            if step == nan_at:
                loss = math.nan
            record = {"step": step, "time": t0 + step * 0.03, "rank": 0, "loss": loss,
                      "grad_norm": 0.8 + step / 3000, "learning_rate": lr * min(1.0, step / 300),
                      "throughput": 4200.0 + (i % 5), "global_step": step, "step_time_ms": 30.4}
            handle.write(json.dumps(record) + "\n")
        if half_line:
            handle.write('{"step": 99999, "loss": 0.')
    if alerts:
        rows = [
            {"time": t0 + 45, "step": nan_at, "detector": "nonfinite", "severity": "critical",
             "message": "loss is NaN at step 1500", "values": {"loss": math.nan}, "action": "alert"},
            {"time": t0 + 60, "step": spike_at, "detector": "loss_spike", "severity": "warning",
             "message": "loss jumped to 9.7 (4.1x its recent mean) <b>", "values": {"loss": 9.7}, "action": "log"},
        ]
        (run / "alerts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"run_name": name, "project_name": "proj", "status": "completed", "start_time": "2026-11-30T01:00:00+00:00",
            "end_time": "2026-11-30T01:02:05+00:00", "last_step": steps * every, "total_steps": steps * every,
            "command": ["msmon", "run", "c.yaml"], "alert_count": 2 if alerts else 0, "dropped_records": 0}
    (run / "run.json").write_text(json.dumps(info))
    (run / "config.yaml").write_text(textwrap.dedent(f"""\
        seed: {seed}
        runner_config: {{batch_size: 2, epochs: 1}}
        lr_schedule:
          type: CosineWithWarmUpLR
          learning_rate: {lr}
        model: {{model_config: {{hidden_size: 64, num_layers: 2}}}}
        monitor_config:
          run_name: {name}
          token: ${{oc.env:TOKEN}}
        """))
    resolved = f"enable_monitor: true\nrun_name: {name}\nlog_interval: {every}\n"
    (run / "monitor_config.resolved.yaml").write_text(resolved)
    return run


def page_data(html: str) -> dict[str, Any]:
    match = re.search(r'<script id="msmon-data" type="application/json">(.*?)</script>', html, re.S)
    assert match, "no embedded data"
    return json.loads(match.group(1))


def chromium_open(html: Path, tmp: Path, height: int = 1800) -> tuple[Path, str]:
    """Open ``html`` in headless Chromium: screenshot + DOM after scripts ran; fail on any console message."""
    binary = shutil.which("chromium-browser") or require_tool("chromium", "apt-get install -y chromium")
    shot = tmp / f"{html.stem}.png"
    dom = ""
    for mode in ("--dump-dom", f"--screenshot={shot}"):
        proc = subprocess.run(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}", f"--window-size=1280,{height}",
             mode, html.resolve().as_uri()],
            capture_output=True, text=True, timeout=120,
        )
        console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
        assert not console, console
        if mode == "--dump-dom":
            dom = proc.stdout
    assert shot.is_file() and shot.stat().st_size > 20_000
    return shot, dom


# --- reading runs -------------------------------------------------------------------------------------------


def test_read_jsonl_skips_half_written_tail_and_counts_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "loss": NaN}\nnot json\n{"step": 2, "loss": "Infinity"}\n{"step": 3, "lo')
    lines = read_jsonl(path)
    assert [r["step"] for r in lines.rows] == [1, 2]
    assert lines.bad_lines == 1 and lines.truncated_tail


def test_load_run_keeps_nonfinite_values_and_notes_problems(tmp_path: Path) -> None:
    run = load_run(make_run(tmp_path, "a", half_line=True))
    drawn = run.sketch("loss").draw()
    assert drawn.total == 300 and drawn.x == sorted(drawn.x) and len(drawn.x) == 299
    assert (1500, "nan") in drawn.nonfinite
    assert any("half-written" in note for note in run.notes)
    assert run.metrics()[:4] == ["loss", "grad_norm", "learning_rate", "throughput"]


def test_load_run_errors_are_msmon_errors(tmp_path: Path) -> None:
    with pytest.raises(MsmonError, match="run directory not found"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MsmonError, match="no metrics.jsonl"):
        load_run(tmp_path / "empty")


def test_downsample_keeps_spikes_dips_and_nonfinite_of_100k_steps() -> None:
    steps = list(range(100_000))
    values = [1.0 + 0.001 * math.sin(i / 50) for i in steps]
    values[31_337], values[77_777], values[50_000], values[60_000] = 50.0, -3.0, math.nan, math.inf
    drawn = downsample(steps, values, max_points=4000)
    assert len(drawn.x) <= 4000 and drawn.total == 100_000
    assert max(drawn.y) == 50.0 and drawn.x[drawn.y.index(50.0)] == 31_337
    assert min(drawn.y) == -3.0 and drawn.x[drawn.y.index(-3.0)] == 77_777
    assert drawn.nonfinite == [(50_000, "nan"), (60_000, "inf")]
    assert drawn.x == sorted(drawn.x)


def test_downsample_is_exact_below_the_limit() -> None:
    drawn = downsample([1, 2, 3], [0.5, math.nan, 0.25])
    assert drawn.x == [1, 3] and drawn.y == [0.5, 0.25] and drawn.nonfinite == [(2, "nan")]


# --- report ---------------------------------------------------------------------------------------------------


def test_report_html_embeds_series_alerts_metadata_and_config(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "a")
    html = build_report(load_run(run_dir))
    data = page_data(html)
    panels = {p["metric"]: p for p in data["panels"]}
    assert list(panels)[:4] == ["loss", "grad_norm", "learning_rate", "throughput"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    loss = panels["loss"]["series"][0]
    assert loss["x"] == [r["step"] for r in records if math.isfinite(r["loss"])]
    assert loss["y"] == [r["loss"] for r in records if math.isfinite(r["loss"])]
    assert loss["nonfinite"] == [[1500, "nan"]]
    assert [(a["n"], a["step"], a["severity"]) for a in data["alerts"]] == [(1, 1500, "critical"), (2, 2000, "warning")]
    assert "loss jumped to 9.7 (4.1x its recent mean) &lt;b&gt;" in html
    assert "${oc.env:TOKEN}" in html and "CosineWithWarmUpLR" in html
    assert re.search(r"(src|href)=\"(https?:)?//", html) is None  # nothing fetched at view time


HOSTILE = """<script>alert("x")</script>' onmouseover="alert(1)" \"&"""


def test_report_and_compare_render_names_and_messages_as_text(tmp_path: Path) -> None:
    """A run name, a status or an alert message that looks like markup stays text (Jinja2 autoescape)."""
    a, b = make_run(tmp_path, "a"), make_run(tmp_path, "b", lr=1e-3)
    info = json.loads((a / "run.json").read_text())
    (a / "run.json").write_text(json.dumps({**info, "run_name": HOSTILE, "status": HOSTILE, "error": HOSTILE}))
    with (a / "alerts.jsonl").open("a") as handle:
        handle.write(json.dumps({"time": 1.0, "step": 10, "detector": HOSTILE, "severity": HOSTILE,
                                 "message": HOSTILE, "values": {HOSTILE: 1.0}, "action": HOSTILE}) + "\n")
    report = build_report(load_run(a))
    comparison = tmp_path / "c.html"
    assert run_msmon("compare", str(a), str(b), "--out", str(comparison)).code == 0
    for html in (report, comparison.read_text()):
        assert html.count("<script") == 2  # the page's own data and plotting script, nothing injected
        assert 'onmouseover="alert(1)"' not in html and '<script>alert("x")' not in html
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&#39; onmouseover=&#34;alert(1)&#34;" in html
    assert HOSTILE in [a["message"] for a in page_data(report)["alerts"]]  # the plot's tooltip gets the text as data


def test_report_of_100k_steps_stays_small(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "big", steps=100_000, every=1, spike_at=64_000, nan_at=90_000)
    html = build_report(load_run(run_dir))
    data = page_data(html)
    loss = data["panels"][0]["series"][0]
    assert len(loss["x"]) <= 4000 and loss["total"] == 100_000
    assert max(loss["y"]) == 9.7 and [90_000, "nan"] in loss["nonfinite"]
    assert len(html) < 2_000_000


def test_report_cli_writes_html_and_pngs(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "a", half_line=True)
    out = tmp_path / "r.html"
    result = run_msmon("report", str(run_dir), "--out", str(out), "--png", str(tmp_path / "png"))
    assert result.code == 0, result.stderr
    assert out.is_file() and "report: " in result.stdout
    from matplotlib import image

    names = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert names == ["grad_norm.png", "learning_rate.png", "loss.png", "overview.png", "step_time_ms.png",
                     "throughput.png"]
    for path in (tmp_path / "png").iterdir():
        pixels = image.imread(path)
        assert path.stat().st_size > 10_000
        assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::7]}) > 20


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "NOPE"], "error: run directory not found: NOPE"),
        (["report", "."], "error: no metrics.jsonl in ."),
        (["report", "RUN", "--out", "no/such/dir/r.html"], "error: directory of --out does not exist"),
        (["compare", "RUN"], "error: compare needs at least two runs"),
        (["compare", "RUN", "NOPE"], "error: run directory not found: NOPE"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    make_run(tmp_path, "a")
    args = [str(tmp_path / "proj" / "a") if a == "RUN" else a for a in args]
    result = run_msmon(*args, cwd=tmp_path)
    assert result.code in (1, 2)
    assert result.stderr.startswith(message) and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


# --- compare --------------------------------------------------------------------------------------------------


def test_differing_keys_are_exactly_the_changed_ones_hyperparameters_first() -> None:
    a = {"seed": 0, "opt": {"type": "AdamW"}, "lr_schedule": {"learning_rate": 0.005}, "monitor_config": {"x": 1},
         "model": {"hidden_size": 64}, "zeta": [1, 2]}
    b = {"seed": 1, "opt": {"type": "AdamW"}, "lr_schedule": {"learning_rate": 0.001}, "monitor_config": {"x": 2},
         "model": {"hidden_size": 64}, "zeta": [1, 3], "extra": True}
    keys = [key for key, _ in differing_keys([a, b])]
    assert keys == ["lr_schedule.learning_rate", "seed", "extra", "zeta", "monitor_config.x"]


def test_compare_cli_terminal_tables_and_html(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a")
    b = make_run(tmp_path, "b", lr=1e-3, seed=3, alerts=False)
    comparison = compare_runs([a, b])
    assert [k for k, _ in comparison.diff] == ["lr_schedule.learning_rate", "seed"]  # the config that trained
    assert [k for k, _ in comparison.monitor_diff] == ["monitor_config.run_name"]  # msmon's keys, apart
    assert comparison.summaries[1].best_loss == min(load_run(b).sketch("loss").draw().y)
    result = run_msmon("compare", str(a), str(b), env={"COLUMNS": "160"})
    assert result.code == 0, result.stderr
    for text in ("lr_schedule.learning_rate", "0.005", "0.001", "seed", "final loss", "best loss"):
        assert text in result.stdout
    out = tmp_path / "c.html"
    assert run_msmon("compare", str(a), str(b), "--out", str(out)).code == 0
    data = page_data(out.read_text())
    loss = data["panels"][0]
    assert [s["name"] for s in loss["series"]] == ["a", "b"]
    assert loss["series"][1]["y"] == load_run(b).sketch("loss").draw().y


def test_overrides_of_the_run_command_count_as_config(tmp_path: Path) -> None:
    command = ["msmon", "run", "c.yaml", "seed=9", "--port", "8081", "--plain", "lr_schedule.learning_rate=1.e-2"]
    assert run_overrides({"command": command}) == ["seed=9", "lr_schedule.learning_rate=1.e-2"]
    assert run_overrides({"overrides": ["a=1"], "command": command}) == ["a=1"]
    a, b = make_run(tmp_path, "a"), make_run(tmp_path, "b")
    info = json.loads((b / "run.json").read_text())
    (b / "run.json").write_text(json.dumps({**info, "command": command}))
    run = load_run(b)
    assert run.config is not None and run.config["seed"] == 9 and run.config["lr_schedule"]["learning_rate"] == 0.01
    assert [k for k, _ in compare_runs([a, b]).diff] == ["lr_schedule.learning_rate", "seed"]


def test_compare_of_the_same_training_from_a_yaml_and_its_export_lists_no_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two identical trainings, one from the quickstart and one from its `msmon export` (interpolations resolved,
    msmon's keys removed), were 24 differing keys; now the configs that trained are identical and msmon's keys are
    shown apart. Piped in 80 columns both run names were cut to `llama_...`: no name is cut."""
    from msmon.runner.plan import RunRequest, prepare
    from msmon.runner.protocol import ViewOptions
    from msmon.runner.results import RankResults
    from msmon.runner.supervise import Supervisor
    from msmon.status import RunStatus

    monkeypatch.chdir(tmp_path)
    exported = tmp_path / "exported.yaml"
    assert run_msmon("export", "quickstart", "-o", str(exported), cwd=tmp_path).code == 0
    names = ("llama_tiny_20261203_210338", "llama_tiny_20261203_210339")
    runs = []
    for config, name in zip(("quickstart", str(exported)), names, strict=True):
        _, plan = prepare(RunRequest(config=config, overrides=[f"monitor_config.run_name={name}",
                                                                "monitor_config.save_dir=./logs"]))
        assert plan is not None
        run = Supervisor(plan, say=lambda line: None, view=ViewOptions())
        run.create()
        run.finish(RunStatus.COMPLETED, RankResults())
        runs.append(plan.run_dir)
    comparison = compare_runs(runs)
    assert comparison.diff == [] and comparison.no_diff_text() == "The configs that trained are identical."
    assert ("monitor_config.run_name", list(names)) in comparison.monitor_diff
    result = run_msmon("compare", *map(str, runs), env={"COLUMNS": "80"})
    assert result.code == 0, result.stderr
    assert all(result.stdout.count(name) >= 2 for name in names) and "…" not in result.stdout, result.stdout


# --- live view ------------------------------------------------------------------------------------------------


def test_plain_view_prints_one_line_per_record(capsys: pytest.CaptureFixture[str]) -> None:
    view = PlainView(100)
    view.on_record({"step": 10, "time": 1.0, "loss": 2.5, "grad_norm": math.nan, "learning_rate": 5e-3})
    view.on_record({"step": 20, "time": 2.0, "loss": 2.25, "throughput": 4000.0})
    view.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "msmon: step 10/100  loss 2.5  grad_norm NaN  lr 0.005"
    assert lines[1] == "msmon: step 20/100  loss 2.25  tokens/s 4000  eta 8.0s"


def test_plain_view_defers_to_the_verbose_session_line(capsys: pytest.CaptureFixture[str]) -> None:
    view = PlainView(None, verbose=True)
    view.on_record({"step": 10, "time": 1.0, "loss": 2.5})
    assert capsys.readouterr().out == ""


def test_sparkline_and_clock() -> None:
    assert sparkline([1.0, 2.0, math.nan, 3.0]).plain == "▁▄!█"
    clock = StepClock(100)
    clock.add(10, 0.0)
    clock.add(20, 1.0)
    assert clock.eta() == 8.0
    assert plain_line({"step": 20}, clock) == "msmon: step 20/100  eta 8.0s"


LIVE_SCRIPT = """
import logging, math, pathlib, sys, tempfile, time
log = logging.getLogger("mindformers_like")
handler = logging.StreamHandler(sys.stdout)  # made before the view, like mindformers' own handler
handler.setFormatter(logging.Formatter("MFLOG %(message)s"))
log.addHandler(handler)
log.setLevel(logging.INFO)
from msmon.runner.console import capture_console, show_progress
from msmon.runner.protocol import ViewOptions
options = ViewOptions(plain="--plain" in sys.argv, framework_logs="--quiet" not in sys.argv, total_steps=200)
console = capture_console(options, pathlib.Path(tempfile.mkdtemp()) / "console.log")  # as msmon's training process
view = show_progress(options, console, verbose=False)
late = logging.getLogger("made_while_the_panel_shows")  # like mindformers imported after the panel appeared
late.addHandler(logging.StreamHandler(sys.stdout))
for step in range(10, 210, 10):
    log.info("step:[%d/200] loss: %.3f", step, 6.9 * math.exp(-step / 80))
    print("printed", step)
    view.on_record({"step": step, "time": time.time(), "loss": 6.9 * math.exp(-step / 80), "grad_norm": 0.5,
                    "learning_rate": 5e-3, "throughput": 4000.0})
    if step == 120:
        view.on_alert({"step": step, "time": time.time(), "detector": "grad_norm_growth", "severity": "warning",
                       "message": "grad_norm grew 3x while loss fell"})
    time.sleep(0.05)
view.close()
console.capture.stop()
late.warning("LATE line after close")
print("DONE")
"""


def run_in_pty(argv: list[str], env: dict[str, str], columns: int = 120, rows: int = 40, cwd: Path | None = None,
               timeout: float = 60) -> bytes:
    """Run a child with its stdin/stdout/stderr on a new pseudo-terminal; return everything it wrote."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True, cwd=cwd)
    os.close(slave)
    try:
        out = b"".join(pty_chunks(master, idle_timeout_s=timeout))
    finally:
        proc.kill() if proc.poll() is None else None
        proc.wait(timeout=30)
        os.close(master)
    return out


def test_live_panel_on_a_pty_and_plain_lines_on_a_pipe(tmp_path: Path) -> None:
    script = tmp_path / "live.py"
    script.write_text(LIVE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")} | {"TERM": "xterm-256color"}
    raw = run_in_pty([sys.executable, str(script)], env).decode("utf-8", "replace")
    assert "\x1b[2K" in raw and "\x1b[1A" in raw  # the panel is erased and redrawn in place
    out = ANSI.sub("", raw)
    assert "╭─ msmon" in out and "step 200/200" in out
    assert "grad_norm_growth: grad_norm grew 3x while loss fell" in out
    for step in range(10, 210, 10):  # mindformers-like log lines and prints still reach the terminal
        assert f"MFLOG step:[{step}/200]" in out and f"printed {step}" in out
    assert out.rstrip().endswith("LATE line after close\r\nDONE")
    assert "msmon: step" not in out
    piped = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    lines = [line for line in piped.stdout.splitlines() if line.startswith("msmon: step")]
    assert len(lines) == 20 and lines[-1].startswith("msmon: step 200/200  loss 0.5664")
    assert "╭" not in piped.stdout and "\x1b[" not in piped.stdout
    no_color = run_in_pty([sys.executable, str(script)], env | {"NO_COLOR": "1"}).decode("utf-8", "replace")
    assert "╭─ msmon" in no_color and "step 200/200" in no_color  # NO_COLOR removes colour, not the panel
    assert not re.search(r"\x1b\[[0-9;]*(3[0-9]|9[0-7]|38;)[0-9;]*m", no_color), "a colour under NO_COLOR"
    assert re.search(r"\x1b\[[0-9;]*(3[0-9]|9[0-7]|38;)[0-9;]*m", raw)  # the control: colours without it
    quiet = ANSI.sub("", run_in_pty([sys.executable, str(script), "--quiet"], env).decode("utf-8", "replace"))
    plain = ANSI.sub("", run_in_pty([sys.executable, str(script), "--plain", "--quiet"], env).decode("utf-8",
                                                                                                      "replace"))
    for shown in (quiet, plain):  # the quiet rule, with the panel and with plain lines: no info line, no print
        assert "MFLOG step:" not in shown and "printed 10" not in shown and "framework's output is in" in shown
    assert "msmon: step 200/200" in plain and "╭" not in plain


def test_live_panel_stays_at_the_bottom_in_tmux(tmp_path: Path) -> None:
    require_tool("tmux", "apt-get install -y tmux")
    script = tmp_path / "live.py"
    script.write_text(LIVE_SCRIPT)
    done = tmp_path / "done"
    socket = f"msmon-test-{os.getpid()}"
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    command = f"{sys.executable} {script}; touch {done}; sleep 60"
    subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "40", command], check=True,
                   env={k: v for k, v in os.environ.items() if k != "NO_COLOR"})
    try:
        import time

        deadline = time.monotonic() + 300
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        screen = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    lines = screen.rstrip("\n").splitlines()
    assert lines[-2:] == ["LATE line after close", "DONE"]
    assert screen.count("╭─ msmon") == 1  # one panel, not a trail of copies
    top = next(i for i, line in enumerate(lines) if line.startswith("╭─ msmon"))
    assert "MFLOG step:[200/200]" in lines[top - 2] and "printed 200" in lines[top - 1]
    panel = "\n".join(lines[top:])
    assert "step 200/200" in panel and "100.0%" in panel and "loss" in panel and "alerts 1" in panel


# --- the page in a real browser -------------------------------------------------------------------------------


def test_report_and_compare_render_in_chromium_without_console_errors(tmp_path: Path) -> None:
    big = make_run(tmp_path, "big", steps=100_000, every=1, spike_at=64_000, nan_at=90_000)
    other = make_run(tmp_path, "other", lr=1e-3)
    report = tmp_path / "report.html"
    assert run_msmon("report", str(big), "--out", str(report)).code == 0
    shot, dom = chromium_open(report, tmp_path)
    assert 'data-msmon-ready="5"' in dom
    compare = tmp_path / "compare.html"
    assert run_msmon("compare", str(big), str(other), "--out", str(compare)).code == 0
    _, dom = chromium_open(compare, tmp_path)
    assert 'data-msmon-ready="5"' in dom
    from matplotlib import image

    pixels = image.imread(shot)
    assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::11]}) > 20


def test_every_reader_spells_nan_and_inf_alike(tmp_path: Path) -> None:
    """One table of NaN/Inf spellings: the report once refused "+inf" that replay accepted."""
    from msmon.records import parse_record

    run = make_run(tmp_path, "spell", steps=3, alerts=False)
    rows = [{"step": 40, "time": 2.0, "loss": "+inf"}, {"step": 50, "time": 3.0, "loss": "-Infinity"},
            {"step": 60, "time": 4.0, "loss": "NaN"}]
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows))
    drawn = load_run(run).sketch("loss").draw()
    assert drawn.nonfinite == [(40, "inf"), (50, "-inf"), (60, "nan")]
    for row, (_, kind) in zip(rows, drawn.nonfinite, strict=True):
        assert nonfinite_kind(parse_record(json.dumps(row), "f:1")["loss"]) == kind
