"""Physics before history, for a loss that does not move: a model trained from scratch starts at the chance level
ln(vocab_size) and leaves it in its first updates at the peak learning rate (it learns the tokens' frequencies
first). A loss still at its first level some steps after the warm-up means nothing learns: a learning rate of 0,
frozen parameters, a gradient that never reaches the weights, labels that carry nothing.
"""

from __future__ import annotations

import math
import statistics

from msmon.config.health import FlatStartSettings
from msmon.config.schedule import Schedule
from msmon.health.alert import Signal
from msmon.health.detectors.base import metric
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number

LEVEL_LOGS = 5  # recent logs whose median is the loss level
FROM_SCRATCH = 0.1  # a first loss within 10% of ln(vocab_size): a model trained from scratch


class FlatStartDetector:
    """Fires once, at the first log ``steps`` training steps after the schedule's warm-up, when the loss has never
    left the chance level: the median of the last 5 logged losses stayed within ``band`` of ln(vocab_size) at every
    log until then. Only a run whose first logged loss is near the chance level (within 10%) is judged: a
    fine-tuning run starts lower and may move little.

    It cannot fire on a healthy start: the recorded quickstart traces leave a 2% band around ln(1000) within 100
    steps after their warm-up at learning rates from 1e-3 to 2e-2, at log_interval 1 and 10 (down, or first up 3% at
    the largest); a loss exactly constant is also the dead_series detector's (from its 5th log).
    """

    name = "flat_start"

    def __init__(self, settings: FlatStartSettings, vocab_size: int | None, schedule: Schedule) -> None:
        self.settings = settings
        self.vocab_size = vocab_size if vocab_size is not None and vocab_size >= 2 else None
        self.chance = math.log(self.vocab_size) if self.vocab_size is not None else None
        self.schedule = schedule
        self._recent: list[float] = []
        self._done = False  # judged, not from scratch, or the loss moved

    def observe(self, record: JsonObject) -> Signal | None:
        loss, step, chance = metric(record, "loss"), record.get("step"), self.chance
        if self._done or chance is None or loss is None or not math.isfinite(loss) or not isinstance(step, int):
            return None
        if not self._recent and abs(loss - chance) > FROM_SCRATCH * chance:
            self._done = True  # not trained from scratch
            return None
        self._recent = [*self._recent[1 - LEVEL_LOGS:], loss]
        level = statistics.median(self._recent)
        if abs(level - chance) > self.settings.band * chance:
            self._done = True  # it moved
            return None
        deadline = (self.schedule.warmup_end or 0) + self.settings.steps
        if step < deadline or len(self._recent) < LEVEL_LOGS:
            return None
        self._done = True
        return Signal(
            "critical",
            f"the loss has not left the chance level ln({self.vocab_size}) = {fmt_number(chance, 4)}: "
            f"{fmt_number(level, 5)} at step {step}, {self.settings.steps} steps after the warm-up: nothing learns; "
            "check the learning rate, frozen parameters and the labels",
            {"loss": loss, "level": level, "chance_level": chance},
            onset_step=deadline,
        )

