"""The live view of `msmon run`: a Rich panel at the bottom of a terminal, or one plain line per logged step."""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

SPARK = "▁▂▃▄▅▆▇█"
HISTORY = 48
METRICS: tuple[tuple[str, str], ...] = (
    ("loss", "loss"), ("grad_norm", "grad_norm"), ("learning_rate", "lr"), ("throughput", "tokens/s"),
)


def fmt(value: float | None) -> str:
    """A compact metric value; NaN/Inf spelled out."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    magnitude = abs(value)
    if magnitude and (magnitude < 1e-3 or magnitude >= 1e5):
        return f"{value:.3e}"
    return f"{value:.4g}"


def fmt_duration(seconds: float | None) -> str:
    """Seconds as 1h02m03s / 2m03s / 3.4s."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else f"{rest // 60}m{rest % 60:02d}s"


def sparkline(values: list[float]) -> Text:
    """Unicode bars over the finite values; non-finite points are a red '!' (one span per run of a style)."""
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
    span = hi - lo
    chars = []
    for value in values:
        if not math.isfinite(value):
            chars.append("!")
        else:
            chars.append(SPARK[int((value - lo) / span * (len(SPARK) - 1)) if span > 0 else len(SPARK) // 2])
    text = Text()
    run = ""
    for char in chars:
        if run and (char == "!") != (run[0] == "!"):
            text.append(run, style="bold red" if run[0] == "!" else "cyan")
            run = ""
        run += char
    if run:
        text.append(run, style="bold red" if run[0] == "!" else "cyan")
    return text


def _isatty(stream: Any) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def _number(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class StepClock:
    """Step rate and ETA from the (step, time) pairs of recent records."""

    def __init__(self, total_steps: int | None) -> None:
        self.total_steps = total_steps if total_steps and total_steps > 0 else None
        self.points: deque[tuple[int, float]] = deque(maxlen=20)
        self.first_time: float | None = None

    def add(self, step: int, when: float) -> None:
        if self.first_time is None:
            self.first_time = when
        self.points.append((step, when))

    def steps_per_s(self) -> float | None:
        if len(self.points) < 2:
            return None
        (s0, t0), (s1, t1) = self.points[0], self.points[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None

    def eta(self) -> float | None:
        rate = self.steps_per_s()
        if rate is None or self.total_steps is None or not self.points:
            return None
        return max(0.0, (self.total_steps - self.points[-1][0]) / rate)


def progress_bar(fraction: float | None, width: int = 28) -> Text:
    """A bar of box-drawing characters (plain Text: far cheaper to render than a Rich table)."""
    if fraction is None:
        return Text("━" * width, style="grey37")
    done = max(0, min(width, round(fraction * width)))
    bar = Text("━" * done, style="magenta" if done < width else "green")
    bar.append("━" * (width - done), style="grey37")
    return bar


def plain_line(record: dict[str, Any], clock: StepClock) -> str:
    """One line per logged step: step/total, the main metrics, ETA."""
    step = record.get("step")
    total = f"/{clock.total_steps}" if clock.total_steps else ""
    parts = [f"step {step}{total}"]
    for key, label in METRICS:
        value = _number(record, key)
        if value is not None:
            parts.append(f"{label} {fmt(value)}")
    eta = clock.eta()
    if eta is not None:
        parts.append(f"eta {fmt_duration(eta)}")
    return "msmon: " + "  ".join(parts)


class PlainView:
    """Not a terminal, NO_COLOR or --plain: one plain line per logged step on stdout."""

    def __init__(self, total_steps: int | None, stream: TextIO | None = None, session: Any = None) -> None:
        self.clock = StepClock(total_steps)
        self.stream = stream
        self.session = session

    def on_record(self, record: dict[str, Any]) -> None:
        step, when = record.get("step"), _number(record, "time")
        if isinstance(step, int) and when is not None:
            self.clock.add(step, when)
        if getattr(getattr(self.session, "settings", None), "verbose", False) is True:
            return  # the session's verbose mode already prints one line per logged step
        if self.clock.total_steps is None:
            total = getattr(getattr(self.session, "progress", None), "total_steps", None)
            self.clock.total_steps = total if isinstance(total, int) and total > 0 else None
        stream = self.stream or sys.stdout
        stream.write(plain_line(record, self.clock) + "\n")
        stream.flush()

    def on_alert(self, alert: dict[str, Any]) -> None:
        """Alerts are already logged by the health monitor; nothing to add on a plain stream."""

    def bind(self, session: Any = None, run_dir: str | Path | None = None) -> None:
        """Take the total step count and the verbose setting from the session."""
        if session is not None:
            self.session = session

    def close(self) -> None:
        """Nothing to release."""


class StreamCapture:
    """Stands in for sys.stdout/sys.stderr while the panel shows: a write only appends to a buffer."""

    def __init__(self, original: TextIO, sink: Any) -> None:
        self._original = original
        self._sink = sink

    def write(self, text: str) -> int:
        if self._sink is None:
            return self._original.write(text)
        self._sink(text)
        return len(text)

    def flush(self) -> None:
        """Buffered text is printed by the view's thread; after ``release`` writes go straight through."""
        if self._sink is None:
            self._original.flush()

    def release(self) -> None:
        """Write to the real stream from now on (handlers made during the panel may still hold this object)."""
        self._sink = None

    def isatty(self) -> bool:
        return self._original.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class LiveView:
    """A Rich panel kept at the bottom of the terminal by the view's own thread.

    ``on_record`` (writer thread) only stores values; text written to stdout/stderr (mindformers' log lines,
    msmon's warnings) is buffered and printed above the panel by the view thread, so neither the training
    thread nor the writer thread ever renders anything.
    """

    def __init__(self, total_steps: int | None, console: Console | None = None, refresh_per_second: float = 4.0,
                 session: Any = None, run_dir: str | Path | None = None) -> None:
        self.clock = StepClock(total_steps)
        self.console = console or Console(file=sys.stdout, highlight=False)
        self.history: dict[str, deque[float]] = {key: deque(maxlen=HISTORY) for key, _ in METRICS}
        self.latest: dict[str, Any] = {}
        self.alerts: deque[dict[str, Any]] = deque(maxlen=3)
        self.alert_total = 0
        self.started = time.time()
        self.session = session
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.interval = 1.0 / refresh_per_second
        self._alerts_offset = 0
        self._seen_alerts: set[str] = set()
        self._lock = threading.Lock()
        self._text: list[str] = []
        self._patched: list[tuple[logging.StreamHandler[Any], Any]] = []
        self._streams: tuple[Any, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="msmon-live-view", daemon=True)
        self._live = Live(get_renderable=self._render, console=self.console, auto_refresh=False, transient=False,
                          redirect_stdout=False, redirect_stderr=False)

    def start(self) -> LiveView:
        """Show the panel, capture the terminal streams and the logging handlers writing to them, start refreshing."""
        self.console.file = self.console.file  # pin the real stream before sys.stdout is replaced
        self._live.start()
        self._streams = (sys.stdout, sys.stderr)
        if _isatty(sys.stdout):  # a piped stream keeps its output: only terminal writes would garble the panel
            sys.stdout = StreamCapture(sys.stdout, self._buffer)  # type: ignore[assignment]
        if _isatty(sys.stderr):
            sys.stderr = StreamCapture(sys.stderr, self._buffer)  # type: ignore[assignment]
        self._route_handlers()
        self._thread.start()
        atexit.register(self.close)  # a run that dies without closing its session still gets its streams back
        return self

    def bind(self, session: Any = None, run_dir: str | Path | None = None) -> None:
        """Read heartbeat age and dropped records from the session, alerts from <run_dir>/alerts.jsonl."""
        if session is not None:
            self.session = session
        if run_dir is not None:
            self.run_dir = Path(run_dir)

    def on_record(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.latest = record
            step, when = record.get("step"), _number(record, "time")
            if isinstance(step, int) and when is not None:
                self.clock.add(step, when)
            for key, _ in METRICS:
                value = _number(record, key)
                if value is not None:
                    self.history[key].append(value)

    def on_alert(self, alert: dict[str, Any]) -> None:
        key = json.dumps([alert.get("time"), alert.get("step"), alert.get("detector")], default=str)
        with self._lock:
            if key in self._seen_alerts:
                return
            self._seen_alerts.add(key)
            self.alerts.append(alert)
            self.alert_total += 1

    def close(self) -> None:
        """Print what is buffered, draw the final panel, give stdout/stderr and the handlers back."""
        if self._streams is None:
            return
        atexit.unregister(self.close)
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, StreamCapture):
                stream.release()
        self._pump(final=True)
        self._live.stop()
        sys.stdout, sys.stderr = self._streams
        self._streams = None
        for handler, stream in self._patched:
            handler.setStream(stream)
        self._patched.clear()

    def _buffer(self, text: str) -> None:
        with self._lock:
            self._text.append(text)

    def _loop(self) -> None:
        tick = 0
        while not self._stop.wait(self.interval):
            try:
                self._pump(final=False)
                tick += 1
                if tick % 8 == 0:
                    self._route_handlers()
            except Exception:  # noqa: BLE001 - the view must never take the run down
                continue

    def _pump(self, final: bool) -> None:
        """Print complete buffered lines above the panel, then redraw it (view thread only)."""
        with self._lock:
            text = "".join(self._text)
            cut = len(text) if final else text.rfind("\n") + 1
            self._text = [text[cut:]] if text[cut:] else []
        if text[:cut]:
            self.console.print(Text.from_ansi(text[:cut].rstrip("\n")), soft_wrap=True, highlight=False)
        self._live.refresh()

    def _route_handlers(self) -> None:
        """Logging handlers made before the panel hold the real stdout/stderr: point them at the capture."""
        if self._streams is None:
            return
        capture = {id(original): current for original, current in zip(self._streams, (sys.stdout, sys.stderr),
                                                                        strict=True) if original is not current}
        loggers = [logging.getLogger()] + [
            item for item in list(logging.Logger.manager.loggerDict.values()) if isinstance(item, logging.Logger)
        ]
        for logger in loggers:
            for handler in list(logger.handlers):
                if isinstance(handler, logging.FileHandler) or not isinstance(handler, logging.StreamHandler):
                    continue
                target = capture.get(id(handler.stream))
                if target is not None and not isinstance(handler.stream, StreamCapture):
                    self._patched.append((handler, handler.stream))
                    handler.setStream(target)

    def _read_alert_file(self) -> None:
        if self.run_dir is None:
            return
        path = self.run_dir / "alerts.jsonl"
        try:
            with path.open("rb") as handle:
                handle.seek(self._alerts_offset)
                chunk = handle.read()
        except OSError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._alerts_offset += len(complete)
        for line in complete.decode("utf-8", "replace").splitlines():
            try:
                alert = json.loads(line)
            except ValueError:
                continue
            if isinstance(alert, dict):
                self.on_alert(alert)

    def _heartbeat_age(self, now: float) -> float | None:
        progress = getattr(self.session, "progress", None)
        last = getattr(progress, "last_end_wall", None)
        if isinstance(last, int | float) and last > 0:
            return now - last
        when = _number(self.latest, "time")
        return now - when if when is not None else None

    def _dropped(self) -> int | None:
        value = getattr(self.session, "dropped_records", None)
        if value is None:
            value = getattr(getattr(getattr(self.session, "writer", None), "queue", None), "dropped", None)
        return value if isinstance(value, int) else None

    def _progress(self) -> tuple[int | None, int | None]:
        """The session's own step counter and total (every step, not only logged ones) when bound."""
        progress = getattr(self.session, "progress", None)
        step, total = getattr(progress, "last_step", None), getattr(progress, "total_steps", None)
        return (step if isinstance(step, int) and step > 0 else None), (total if isinstance(total, int) else None)

    def _render(self) -> Panel:
        """Called on Rich's refresh thread."""
        self._read_alert_file()
        now = time.time()
        with self._lock:
            latest = dict(self.latest)
            history = {key: list(values) for key, values in self.history.items()}
            alerts = list(self.alerts)
            alert_total = self.alert_total
            rate, total = self.clock.steps_per_s(), self.clock.total_steps
        step = latest.get("step")
        live_step, live_total = self._progress()
        if live_step is not None and (not isinstance(step, int) or live_step > step):
            step = live_step
        total = total or live_total
        eta = max(0.0, (total - step) / rate) if rate and total and isinstance(step, int) else None
        text = Text(no_wrap=True, overflow="ellipsis")
        if step is None:
            text.append("waiting for the first logged step (graph compile)", style="yellow")
            text.append(f"  elapsed {fmt_duration(now - self.started)}")
        else:
            text.append(f"step {step}" + (f"/{total}" if total else ""), style="bold")
            text.append("  ")
            text.append_text(progress_bar(step / total if total else None))
            pct = f"  {100 * step / total:5.1f}%" if total else ""
            speed = f"  {rate:.2f} steps/s" if rate else ""
            text.append(f"{pct}  eta {fmt_duration(eta)}{speed}  elapsed {fmt_duration(now - self.started)}")
        for key, label in METRICS:
            values = history[key]
            if values:
                text.append(f"\n{label:<10}", style="bold")
                text.append(f"{fmt(values[-1]):>11}  ", style="bold red" if not math.isfinite(values[-1]) else "")
                text.append_text(sparkline(values))
        text.append("\n")
        age = self._heartbeat_age(now)
        if age is not None:
            text.append(f"heartbeat {fmt_duration(age)} ago   ", style="yellow" if age > 60 else "green")
        dropped = self._dropped()
        if dropped is not None:
            text.append(f"dropped records {dropped}   ", style="red" if dropped else "")
        text.append(f"alerts {alert_total}", style="bold red" if alert_total else "")
        for alert in alerts:
            color = "red" if alert.get("severity") == "critical" else "yellow"
            text.append(f"\n! step {alert.get('step')} {alert.get('detector')}: {alert.get('message')}", style=color)
        return Panel(text, title="msmon", title_align="left", border_style="blue")


def make_live_view(console_is_terminal: bool, plain: bool, total_steps: int | None, *,
                   session: Any = None, run_dir: str | Path | None = None,
                   console: Console | None = None) -> PlainView | LiveView:
    """The listener `msmon run` adds to the session: a live panel on a terminal, plain lines otherwise."""
    if plain or not console_is_terminal or "NO_COLOR" in os.environ:
        return PlainView(total_steps, session=session)
    if console is None:
        stream = sys.stdout if _isatty(sys.stdout) or not _isatty(sys.stderr) else sys.stderr
        console = Console(file=stream, highlight=False)
    return LiveView(total_steps, console=console, session=session, run_dir=run_dir).start()
