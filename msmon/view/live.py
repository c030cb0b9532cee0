"""The live panel of `msmon run`: a Rich panel at the bottom of the terminal, fed like any session listener.

The session hands it records (``on_record``), alerts (``on_alert``) and its status (``on_status``: dropped
records, the last step's time, the planned steps) on the writer thread; those calls only store values.
Text given to ``print_above`` (the training's captured console output, msmon's log lines) is printed
above the panel. The panel's own thread does every bit of drawing.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from msmon.listener import Listener, SessionStatus
from msmon.util import internal_errors
from msmon.util.durations import format_duration
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import as_number, fmt_number
from msmon.view.progress import METRICS, StepClock

SPARK = "▁▂▃▄▅▆▇█"
HISTORY = 48
STALE_HEARTBEAT_S = 60.0


def sparkline(values: list[float]) -> Text:
    """Unicode bars over the finite values; non-finite points are a red '!' (one span per run of a style)."""
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
    span = hi - lo
    text = Text()
    run = ""
    for value in values:
        if not math.isfinite(value):
            char = "!"
        else:
            char = SPARK[int((value - lo) / span * (len(SPARK) - 1)) if span > 0 else len(SPARK) // 2]
        if run and (char == "!") != (run[0] == "!"):
            text.append(run, style="bold red" if run[0] == "!" else "cyan")
            run = ""
        run += char
    if run:
        text.append(run, style="bold red" if run[0] == "!" else "cyan")
    return text


def progress_bar(fraction: float | None, width: int = 28) -> Text:
    """A bar of box-drawing characters (plain Text: far cheaper to render than a Rich table)."""
    if fraction is None:
        return Text("━" * width, style="grey37")
    done = max(0, min(width, round(fraction * width)))
    bar = Text("━" * done, style="magenta" if done < width else "green")
    bar.append("━" * (width - done), style="grey37")
    return bar


class LiveView(Listener):
    """The panel; ``start()`` shows it, ``close()`` prints what is left and draws it one last time."""

    def __init__(self, total_steps: int | None, console: Console, refresh_per_second: float = 4.0) -> None:
        self.clock = StepClock(total_steps)
        self.console = console
        self.history: dict[str, deque[float]] = {key: deque(maxlen=HISTORY) for key, _ in METRICS}
        self.latest: JsonObject = {}
        self.alerts: deque[JsonObject] = deque(maxlen=3)
        self.alert_total = 0
        self.status: SessionStatus | None = None
        self.started = time.time()
        self.interval = 1.0 / refresh_per_second
        self._lock = threading.Lock()
        self._text: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="msmon-live-view", daemon=True)
        self._live = Live(get_renderable=self._render, console=self.console, auto_refresh=False, transient=False,
                          redirect_stdout=False, redirect_stderr=False)

    def start(self) -> LiveView:
        self._live.start()
        self._thread.start()
        return self

    # -- listener side (the session's writer thread): store only ---------------------------------
    def on_record(self, record: JsonObject) -> None:
        with self._lock:
            self.latest = record
            self.clock.add_record(record)
            for key, _ in METRICS:
                value = as_number(record.get(key))
                if value is not None:
                    self.history[key].append(value)

    def on_alert(self, alert: JsonObject) -> None:
        with self._lock:
            self.alerts.append(alert)
            self.alert_total += 1

    def on_status(self, status: SessionStatus) -> None:
        with self._lock:
            self.status = status
            self.clock.learn_total(status.total_steps)

    def print_above(self, text: str) -> None:
        """Text to print above the panel (complete lines are printed at the next redraw); once the panel is
        closed, straight to the terminal."""
        with self._lock:
            if not self._stop.is_set():
                self._text.append(text)
                return
        self.console.file.write(text)
        self.console.file.flush()

    def write(self, text: str) -> int:
        """The panel as a stream (for a logging handler): the text goes above it."""
        self.print_above(text)
        return len(text)

    def flush(self) -> None:
        """Written text is printed by the panel's thread."""

    def close(self) -> None:
        """Print what is buffered, draw the final panel and leave it on the screen."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._pump(final=True)
        self._live.stop()

    # -- the view's thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._pump(final=False)
            except Exception as exc:  # noqa: BLE001 - the view must never take the run down: counted, drawn again
                internal_errors.report("the live view", exc)

    def _pump(self, final: bool) -> None:
        """Print complete buffered lines above the panel, then redraw it."""
        with self._lock:
            text = "".join(self._text)
            cut = len(text) if final else text.rfind("\n") + 1
            self._text = [text[cut:]] if text[cut:] else []
        if text[:cut]:
            self.console.print(Text.from_ansi(text[:cut].rstrip("\n")), soft_wrap=True, highlight=False)
        self._live.refresh()

    def _render(self) -> Panel:
        now = time.time()
        with self._lock:
            latest = dict(self.latest)
            history = {key: list(values) for key, values in self.history.items()}
            alerts = list(self.alerts)
            alert_total = self.alert_total
            status = self.status
            rate, total = self.clock.steps_per_s(), self.clock.total_steps
        step = latest.get("step")
        live_step = getattr(status, "last_step", None)
        if isinstance(live_step, int) and live_step > 0 and (not isinstance(step, int) or live_step > step):
            step = live_step  # the session counts every step, not only logged ones
        eta = max(0.0, (total - step) / rate) if rate and total and isinstance(step, int) else None
        text = Text(no_wrap=True, overflow="ellipsis")
        elapsed = format_duration(now - self.started, fine=True)
        if step is None:
            text.append("waiting for the first logged step (graph compile)", style="yellow")
            text.append(f"  elapsed {elapsed}")
        else:
            text.append(f"step {step}" + (f"/{total}" if total else ""), style="bold")
            text.append("  ")
            text.append_text(progress_bar(step / total if total else None))
            pct = f"  {100 * step / total:5.1f}%" if total else ""
            speed = f"  {rate:.2f} steps/s" if rate else ""
            text.append(f"{pct}  eta {format_duration(eta, fine=True)}{speed}  elapsed {elapsed}")
        for key, label in METRICS:
            values = history[key]
            if values:
                text.append(f"\n{label:<10}", style="bold")
                style = "bold red" if not math.isfinite(values[-1]) else ""
                text.append(f"{fmt_number(values[-1]):>11}  ", style=style)
                text.append_text(sparkline(values))
        text.append("\n")
        last_end = getattr(status, "last_end_wall", None) or as_number(latest.get("time"))
        if last_end is not None:
            age = now - last_end
            style = "yellow" if age > STALE_HEARTBEAT_S else "green"
            text.append(f"heartbeat {format_duration(age, fine=True)} ago   ", style=style)
        dropped = getattr(status, "dropped_records", None)
        if isinstance(dropped, int):
            text.append(f"dropped records {dropped}   ", style="red" if dropped else "")
        text.append(f"alerts {alert_total}", style="bold red" if alert_total else "")
        for alert in alerts:
            color = "red" if alert.get("severity") == "critical" else "yellow"
            text.append(f"\n! step {alert.get('step')} {alert.get('detector')}: {alert.get('message')}", style=color)
        return Panel(text, title="msmon", title_align="left", border_style="blue")


def open_panel(total_steps: int | None, terminal: TextIO | None = None) -> LiveView:
    """Show the panel on ``terminal`` (default: stdout)."""
    return LiveView(total_steps, Console(file=terminal, highlight=False)).start()
