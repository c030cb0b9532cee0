"""Which attempt of a run a training process is, and the step it resumed from.

``msmon run`` starts each attempt of a run (the first, a ``--resume``, an automatic restart) with the attempt in the
rank's spec (msmon.runner.protocol.RankSpec); the rank hands it to its session, which hands it to the backends (they
continue their files and runs from that step; TensorBoard purges what comes after it) and to the health detectors
(they start warm).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Attempt:
    """Attempt ``number`` (1 = the first) of a run; ``resumed_from_step`` None when it trains from the start."""

    number: int
    resumed_from_step: int | None = None
