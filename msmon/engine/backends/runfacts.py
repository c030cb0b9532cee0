"""What the mindinsight, tensorboard and mlflow backends say about a run besides its metrics: its hyperparameters
(``msmon.config.hyperparameters``), its results once it ends, and the versions and git commit it ran with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from msmon import layout
from msmon.compat import package_version
from msmon.config.hyperparameters import RunResults, Value, hyperparameters
from msmon.foreign import ConfigValue
from msmon.status import Attempt
from msmon.util.git import git_commit
from msmon.util.jsonfiles import JsonObject, read_jsonl

#: Tag name -> installed package whose version it holds.
VERSION_TAGS: dict[str, str] = {
    "msmon_version": "msmon", "mindspore_version": "mindspore", "mindformers_version": "mindformers",
}


def kept_records(run_dir: Path, attempt: Attempt | None) -> list[JsonObject]:
    """In a resumed attempt (a resume, a restart): what the run's earlier attempts logged up to the resume step
    (``metrics.jsonl`` in ``run_dir``); otherwise, or when it cannot be read, nothing."""
    if attempt is None or not attempt.resumed_from_step:
        return []
    try:
        rows = read_jsonl(run_dir / layout.METRICS).rows
    except OSError:
        return []
    return [row for row in rows if isinstance(row.get("step"), int) and row["step"] <= attempt.resumed_from_step]


class RunFacts:
    """The hyperparameters of ``config`` (read once), and the results of the records written so far (in a resumed
    attempt, also those the run kept from its earlier attempts in ``run_dir``)."""

    def __init__(self, config: Mapping[str, ConfigValue] | None, run_dir: Path | None = None,
                 attempt: Attempt | None = None) -> None:
        self.hyperparameters: dict[str, Value] = hyperparameters(config)
        self._results = RunResults().add(kept_records(run_dir, attempt) if run_dir is not None else [])

    def add(self, records: list[JsonObject]) -> None:
        """Follow the records a backend writes (final and best loss, last logged step)."""
        self._results.add(records)

    def results(self, status: str) -> dict[str, Value]:
        """``final_loss``, ``best_loss``, ``steps``, ``status`` (a loss never logged is left out)."""
        return self._results.values(status)


def run_identity(cwd: Path | None = None) -> dict[str, str]:
    """The msmon / MindSpore / mindformers versions and the git commit of ``cwd`` (the working directory of
    ``msmon run``, as in run.json); what is unknown is left out."""
    found = {tag: package_version(package) for tag, package in VERSION_TAGS.items()}
    found["git_commit"] = git_commit(cwd or Path.cwd())
    return {key: value for key, value in found.items() if value}
