"""Which attempt of a run a training process is, and the step it resumed from.

``msmon run`` starts each attempt of a run (the first, a ``--resume``, an automatic restart) with ``MSMON_ATTEMPT``
in the training process's environment, which msrun passes on to every rank: the backends continue their files and
runs from that step (TensorBoard purges what comes after it) and the health detectors start warm.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

ENV = "MSMON_ATTEMPT"


@dataclass(frozen=True)
class Attempt:
    """Attempt ``number`` (1 = the first) of a run; ``resumed_from_step`` None when it trains from the start."""

    number: int
    resumed_from_step: int | None = None

    def env(self) -> dict[str, str]:
        """The environment that tells a training process about this attempt."""
        return {ENV: json.dumps({"attempt": self.number, "resumed_from_step": self.resumed_from_step})}


def current(environ: Mapping[str, str] | None = None) -> Attempt | None:
    """The attempt this process belongs to (None outside ``msmon run``, or when the value is unreadable)."""
    raw = (os.environ if environ is None else environ).get(ENV)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        step = data.get("resumed_from_step")
        return Attempt(int(data["attempt"]), int(step) if step is not None else None)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
