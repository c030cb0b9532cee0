"""Shared pieces of the engine tests: fake backends (registered through the real registry), a tiny
plain-MindSpore training, settings, and real MindInsight / MLflow servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from msmon.config.schema import MonitorSettings
from msmon.engine.backends.base import Backend
from msmon.engine.backends.file import FileBackend
from msmon.listener import Listener
from msmon.util.files import LineFile

VENV_BIN = str(Path(sys.executable).parent)


def settings(save_dir: Path, **overrides: Any) -> MonitorSettings:
    """Monitor settings for a test run: project ``p``, run ``r``, file backend, log every 5 steps."""
    values: dict[str, Any] = {
        "monitor_type": ["file"], "project_name": "p", "run_name": "r", "save_dir": str(save_dir), "log_interval": 5,
    }
    values.update(overrides)
    return MonitorSettings(**values)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


class MemoryBackend(Backend):
    """Keeps every record and alert in memory (class-level, keyed by run directory)."""

    name = "memory"
    store: dict[str, list[dict[str, Any]]] = {}
    alerts: dict[str, list[dict[str, Any]]] = {}

    def open(self) -> None:
        self.store.setdefault(str(self.run_dir), [])
        self.alerts.setdefault(str(self.run_dir), [])

    def write(self, records: list[dict[str, Any]]) -> None:
        self.store[str(self.run_dir)].extend(records)

    def write_alert(self, alert: dict[str, Any]) -> None:
        self.alerts[str(self.run_dir)].append(alert)


class FailingBackend(Backend):
    """Raises on every call, open included."""

    name = "failing"

    def open(self) -> None:
        raise RuntimeError("failing backend: cannot open")

    def write(self, records: list[dict[str, Any]]) -> None:
        raise RuntimeError("failing backend: cannot write")

    def flush(self) -> None:
        raise RuntimeError("failing backend: cannot flush")

    def close(self, status: str) -> None:
        raise RuntimeError("failing backend: cannot close")


class BlockingBackend(MemoryBackend):
    """Blocks ``delay`` seconds in every write (then keeps the records)."""

    name = "blocking"
    delay = 2.0
    store: dict[str, list[dict[str, Any]]] = {}
    writes = 0

    def write(self, records: list[dict[str, Any]]) -> None:
        type(self).writes += 1
        time.sleep(self.delay)
        super().write(records)


class FlakyNetworkBackend(MemoryBackend):
    """A network backend whose first ``failures`` writes raise ConnectionError."""

    name = "flaky"
    network = True
    failures = 2
    store: dict[str, list[dict[str, Any]]] = {}

    def write(self, records: list[dict[str, Any]]) -> None:
        if type(self).failures > 0:
            type(self).failures -= 1
            raise ConnectionError("flaky backend: connection refused")
        super().write(records)


class DevFullBackend(FileBackend):
    """The real file backend writing to /dev/full: every flush hits a real ENOSPC from the kernel."""

    name = "devfull"

    def open(self) -> None:
        self._jsonl = LineFile(Path("/dev/full"))


FAKES = (MemoryBackend, FailingBackend, BlockingBackend, FlakyNetworkBackend, DevFullBackend)


def tiny_train(callbacks: list[Any], steps: int = 100, step_sleep_s: float = 0.0, stop_at: dict[int, Any] | None = None,
               nan_from: int | None = None) -> None:
    """Train a tiny Dense regression with ``mindspore.train.Model.train`` (loss only) on CPU.

    ``step_sleep_s`` stretches each step; ``stop_at`` maps a step to a function called at its end;
    ``nan_from`` makes the labels NaN from that step on (so the loss becomes NaN).
    """
    import mindspore as ms
    import mindspore.dataset as ds
    import numpy as np
    from mindspore import nn
    from mindspore.train import Callback, Model

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")

    def samples():
        rng = np.random.default_rng(0)
        for index in range(steps * 4):
            x = rng.normal(size=(16,)).astype(np.float32)
            y = np.array([x.sum()], np.float32)
            if nan_from is not None and index // 4 + 1 >= nan_from:
                y = np.array([np.nan], np.float32)
            yield x, y

    class Hooks(Callback):
        def on_train_step_end(self, run_context: Any) -> None:
            if step_sleep_s:
                time.sleep(step_sleep_s)
            hook = (stop_at or {}).get(run_context.original_args().cur_step_num)
            if hook is not None:
                hook()

    data = ds.GeneratorDataset(samples, ["x", "y"], shuffle=False).batch(4)
    net = nn.Dense(16, 1)
    optimizer = nn.Momentum(net.trainable_params(), nn.CosineDecayLR(0.0, 0.01, steps), 0.9)
    Model(net, nn.MSELoss(), optimizer).train(1, data, callbacks=[*callbacks, Hooks()])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - 127.0.0.1 only
        return json.loads(response.read().decode("utf-8"))


def post_json(url: str, data: dict[str, Any], timeout: float = 5.0) -> Any:
    request = urllib.request.Request(url, json.dumps(data).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return json.loads(response.read().decode("utf-8"))


def served_scalars(url: str, query: str, count: int, timeout: float = 120) -> list[dict[str, Any]]:
    """The points MindInsight at ``url`` serves for ``query`` (``train_id=...&tag=.../scalar``) once it serves
    ``count`` of them: it loads a summary file in passes, so a first answer may hold part of the series (seen with
    three test workers on two cores: 18 of 20 points); what it served at the deadline otherwise."""
    served: list[dict[str, Any]] = []

    def loaded() -> bool:
        nonlocal served
        served = get_json(f"{url}/datavisual/scalar/metadata?{query}")["metadatas"]
        return len(served) >= count

    wait_until(loaded, timeout)
    return served


def wait_until(check: Any, timeout: float, interval: float = 0.5) -> Any:
    """Call ``check`` until it returns a truthy value (exceptions count as not yet); that value or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(interval)
    return None


class MlflowServer:
    """A real ``mlflow server`` on 127.0.0.1 with a sqlite store, in its own process group."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        directory.mkdir(parents=True, exist_ok=True)
        self.log = open(directory / "mlflow_server.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [os.path.join(VENV_BIN, "mlflow"), "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{directory / 'mlflow.db'}",
             "--artifacts-destination", str(directory / "artifacts"), "--workers", "1"],
            cwd=directory, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            # no job runner: eight huey consumers the suite never uses, ~250 MB and seconds of CPU each at the start
            env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
                 "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
        if not wait_until(lambda: urllib.request.urlopen(self.url + "/health", timeout=2).status == 200, 90):
            self.stop()
            raise RuntimeError(f"mlflow server did not start: {(directory / 'mlflow_server.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()

    def kill(self) -> None:
        """SIGKILL the whole server (uvicorn and huey children too)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def api(self, path: str, **params: Any) -> Any:
        query = "&".join(f"{key}={urllib.request.quote(str(value))}" for key, value in params.items())
        return get_json(f"{self.url}/api/2.0/mlflow/{path}?{query}")


class MindInsightServer:
    """A real ``mindinsight start`` on 127.0.0.1, stopped with ``mindinsight stop --port P``."""

    def __init__(self, base_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/mindinsight"
        self.env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
        self.base_dir = base_dir
        subprocess.run(
            [os.path.join(VENV_BIN, "mindinsight"), "start", "--port", str(self.port), "--summary-base-dir",
             str(base_dir), "--reload-interval", "1"],
            env=self.env, check=True, capture_output=True, timeout=120,
        )

    def scalars(self, train_id: str, tag: str) -> list[dict[str, Any]]:
        url = f"{self.url}/datavisual/scalar/metadata?train_id={urllib.request.quote(train_id)}&tag={tag}/scalar"
        return get_json(url)["metadatas"]

    def stop(self) -> None:
        subprocess.run(
            [os.path.join(VENV_BIN, "mindinsight"), "stop", "--port", str(self.port)],
            env=self.env, capture_output=True, timeout=60,
        )


class Capture(Listener):
    """A listener that keeps every record the writer dispatched (what the callback saw)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.closed = threading.Event()

    def on_record(self, record: dict[str, Any]) -> None:
        self.records.append(dict(record))

    def close(self) -> None:
        self.closed.set()


def summary_scalars(run_dir: Path) -> dict[int, dict[str, float]]:
    """step -> {tag: value} parsed from a MindSpore summary file with MindInsight's own Event proto."""
    import struct

    from mindinsight.datavisual.proto_files import mindinsight_summary_pb2

    (path,) = sorted(p for p in Path(run_dir).glob("*.summary.*") if not p.name.endswith("_lineage"))
    data, offset, result = path.read_bytes(), 0, {}
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 12  # length + its crc
        event = mindinsight_summary_pb2.Event()
        event.ParseFromString(data[offset : offset + length])
        offset += length + 4  # data + its crc
        if event.HasField("summary"):
            result[event.step] = {value.tag: value.scalar_value for value in event.summary.value}
    return result
