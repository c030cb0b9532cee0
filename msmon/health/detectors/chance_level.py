"""Physics before history: a causal language model's cross-entropy starts at ln(vocab_size), the loss of a
uniform guess over the vocabulary, and only falls from there. A loss well above that level is worse than chance: a
learning rate that blew the model up in its first updates, a broken initialisation, wrong labels. Judged from the
first log, with no baseline to learn: a run wrong from its first steps has no healthy past to compare with.
"""

from __future__ import annotations

import math

from msmon.config.health import ChanceLevelSettings
from msmon.health.alert import Signal
from msmon.health.detectors.base import Breaches, metric
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number


class ChanceLevelDetector:
    """Fires when the loss stays above ``factor`` x ln(vocab_size) for ``patience`` consecutive logs; re-arms once
    the loss is below that limit again. Silent without a vocabulary size (nothing to judge against).

    It cannot fire on a healthy start: an untrained model's logits are near zero, so its first loss is ln(vocab_size)
    to within a few hundredths (6.92 for the quickstarts' 1,000 tokens against ln(1000) = 6.91), and a loss that
    adds other terms (a multi-token-prediction loss weighted 0.3, a router's balance loss) stays below 1.5 x that.
    """

    name = "chance_level"

    def __init__(self, settings: ChanceLevelSettings, vocab_size: int | None) -> None:
        self.settings = settings
        self.vocab_size = vocab_size if vocab_size is not None and vocab_size >= 2 else None
        self.chance = math.log(self.vocab_size) if self.vocab_size is not None else None
        self._breaches = Breaches(settings.patience)

    def observe(self, record: JsonObject) -> Signal | None:
        loss = metric(record, "loss")
        if self.chance is None or loss is None or not math.isfinite(loss):  # a NaN is the nonfinite detector's
            return None
        limit = self.settings.factor * self.chance
        if not self._breaches.update(loss > limit, record.get("step")):
            return None
        return Signal(
            "critical",
            f"loss {fmt_number(loss, 5)} is above {fmt_number(self.settings.factor)} x the chance level "
            f"ln({self.vocab_size}) = {fmt_number(self.chance, 4)} (a uniform guess over the vocabulary) since step "
            f"{self._breaches.since}: the model is worse than chance; check the learning rate, the initialisation and "
            "the labels",
            {"loss": loss, "chance_level": self.chance, "limit": limit, "vocab_size": self.vocab_size},
            onset_step=self._breaches.since,
        )
