"""``tensorboard`` backend: event files written with tensorboardX (readable by TensorBoard's reader).

One event per record holds every metric (tensorboardX computes its CRCs in pure Python unless the
``crc32c`` package is installed: one event instead of one per metric costs a fraction of the CPU).
The run's hyperparameters go in the HParams plugin format (a session start at open; the results as scalars
and the session end with its status at close), so TensorBoard's HParams dashboard lists every run.
"""

from __future__ import annotations

import json
import logging
import time

from msmon.config.hyperparameters import Value
from msmon.engine.backends.base import Backend, metric_items
from msmon.foreign import BackendClient, ProtoMessage
from msmon.status import RunStatus
from msmon.util.jsonfiles import JsonObject

HPARAMS_PLUGIN = "hparams"
SESSION_START_TAG = "_hparams_/session_start_info"  # the tags tensorboard.plugins.hparams.metadata reads
SESSION_END_TAG = "_hparams_/session_end_info"
#: msmon's final status -> the HParams session status (the plugin has no "aborted").
SESSION_STATUS: dict[RunStatus, str] = {RunStatus.COMPLETED: "STATUS_SUCCESS", RunStatus.FAILED: "STATUS_FAILURE",
                  RunStatus.STOPPED_BY_MONITOR: "STATUS_FAILURE"}


def hparams_summary(tag: str, **data: ProtoMessage) -> ProtoMessage:
    """A Summary holding one HParams plugin message (``session_start_info`` or ``session_end_info``)."""
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata

    content = HParamsPluginData(version=0, **data).SerializeToString()
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=HPARAMS_PLUGIN, content=content))
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata)])


def session_start(hyperparameters: dict[str, Value]) -> ProtoMessage:
    from tensorboardX.proto.plugin_hparams_pb2 import SessionStartInfo

    info = SessionStartInfo(start_time_secs=time.time())
    for name, value in hyperparameters.items():
        if isinstance(value, str):
            info.hparams[name].string_value = value
        else:
            info.hparams[name].number_value = float(value)
    return hparams_summary(SESSION_START_TAG, session_start_info=info)


def session_end(status_name: str) -> ProtoMessage:
    """The HParams session end with the plugin's status (``STATUS_SUCCESS``, ...)."""
    from tensorboardX.proto.api_pb2 import Status
    from tensorboardX.proto.plugin_hparams_pb2 import SessionEndInfo

    info = SessionEndInfo(status=Status.Value(status_name), end_time_secs=time.time())
    return hparams_summary(SESSION_END_TAG, session_end_info=info)


def write_results(writer: BackendClient, results: dict[str, Value], status_name: str) -> None:
    """The results as scalars (``final_loss``, ``best_loss``, ``steps``: HParams metrics) and the session end with
    ``status_name``, at the last logged step."""
    from tensorboardX.proto.summary_pb2 import Summary

    step = int(results["steps"])
    values = [Summary.Value(tag=name, simple_value=float(value)) for name, value in results.items()
              if not isinstance(value, str)]
    writer.add_summary(Summary(value=values), step)
    writer.add_summary(session_end(status_name), step)


class TensorBoardBackend(Backend):
    """One scalar per metric at the record's step and wall time; alerts as text under ``alerts``."""

    name = "tensorboard"
    heavy = True
    in_run_dir = True
    keeps_run_facts = True  # the HParams session: hyperparameters at the start, results and status at the end
    status_names = SESSION_STATUS
    other_status = "STATUS_UNKNOWN"  # the plugin has no "aborted"

    _writer: BackendClient = None
    _started = False

    @property
    def flush_interval_s(self) -> float:
        return self.settings.tensorboard.flush_secs

    def prepare(self) -> None:
        import tensorboardX.proto.api_pb2  # noqa: F401
        import tensorboardX.proto.plugin_hparams_pb2  # noqa: F401
        import tensorboardX.summary  # noqa: F401

        # tensorboardX warns on every non-finite value; msmon records NaN/Inf on purpose
        logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)

    def open(self) -> None:
        from tensorboardX import FileWriter

        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._writer = FileWriter(str(self.run_dir), flush_secs=max(1, int(self.flush_interval_s)))
        attempt = self.attempt
        if attempt is not None and attempt.resumed_from_step is not None:
            self._purge_after(attempt.resumed_from_step)
        if not self._started:  # once per run (a reopen after a failure continues the session)
            self._started = True
            self._writer.add_summary(session_start(self.facts.hyperparameters), 0)

    def _purge_after(self, step: int) -> None:
        """A resumed run: TensorBoard hides the earlier files' events after ``step`` (what tensorboardX's
        ``SummaryWriter(purge_step=step + 1)`` writes: a session START at that step)."""
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self._writer.add_event(Event(step=step + 1, file_version="brain.Event:2"))
        self._writer.add_event(Event(step=step + 1, session_log=SessionLog(status=SessionLog.START)))

    def write(self, records: list[JsonObject]) -> None:
        from tensorboardX.proto.summary_pb2 import Summary

        for record in records:
            values = [Summary.Value(tag=key, simple_value=value) for key, value in metric_items(record)]
            self._writer.add_summary(Summary(value=values), int(record["step"]), record.get("time"))

    def write_alert(self, alert: JsonObject) -> None:
        text = f"**{alert.get('severity', 'warning')}** {alert.get('detector', '')}: {alert.get('message', '')}"
        values = alert.get("values")
        if values:
            text += f"\n\n`{json.dumps(values, default=str)}`"
        from tensorboardX.summary import text as text_summary

        self._writer.add_summary(text_summary("alerts", text), int(alert.get("step") or 0), alert.get("time"))

    def flush(self) -> None:
        self._writer.flush()

    def close(self, status: RunStatus | None) -> None:
        """At the run's end (any final status): the results as scalars at the last step, then the session end;
        a backend stopped before it (the disk guard, failures) only closes its file."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            if status is not None:
                write_results(writer, self.facts.results(status), self.status_name(status))
        finally:
            writer.close()

