"""The steps between two logs: their outputs held unread on the training thread, read at the logging step.

One slot per step of the interval (``step % log_interval``) keeps (step, end time, step seconds, ``net_outputs``)
and reads nothing: on Ascend every read is a host-device sync. At the logging step ``drain`` returns them in step
order and empties the slots, so at most ``log_interval - 1`` steps' outputs stay alive unread; ``step_values``
reads one step's values once, for the interval statistics and the flight recorder alike.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, NamedTuple

from msmon.engine.grad_groups import GradGroups
from msmon.engine.record import to_float

#: The scalar outputs ``step_values`` can read (``overflow`` as 0/1).
SCALARS: tuple[str, ...] = ("loss", "grad_norm", "learning_rate", "loss_scale", "overflow")


class Held(NamedTuple):
    """One step between two logs."""

    step: int
    end: float  # time.monotonic() at its end
    seconds: float  # its duration (the mean over the steps of one call when sinking)
    outputs: Any  # its net_outputs, unread


def step_values(parts: dict[str, Any], names: Collection[str], groups: GradGroups | None) -> dict[str, Any]:
    """The values of one step's named outputs (``names`` of ``SCALARS``; the ``grad_norm/<group>`` norms when
    ``groups`` is given and the step returned its squared sums). Each is one read."""
    values: dict[str, Any] = {}
    for name in SCALARS:
        value = parts.get(name)
        if name in names and value is not None:
            values[name] = int(bool(to_float(value))) if name == "overflow" else to_float(value)
    if groups is not None and parts.get("local_norm") is not None:
        values.update(groups.norms(parts["local_norm"]))
    return values


class HeldSteps:
    """Preallocated slots for the steps of one log interval (written and drained on the training thread)."""

    def __init__(self, interval: int) -> None:
        self._slots: list[Held | None] = [None] * max(1, interval)
        self._empty: tuple[None, ...] = (None,) * len(self._slots)

    def hold(self, held: Held) -> None:
        """Keep a reference to a step's outputs (no read)."""
        self._slots[held.step % len(self._slots)] = held

    def drain(self) -> list[Held]:
        """The held steps in step order; the slots are emptied (the outputs are released)."""
        held = sorted((h for h in self._slots if h is not None), key=lambda h: h.step)
        self._slots[:] = self._empty
        return held

    def pending(self) -> list[Held]:
        """The steps held now (any thread: one C-level copy of the slot list, nothing read)."""
        return [h for h in list(self._slots) if h is not None]
