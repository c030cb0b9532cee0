"""Reference curves: an earlier run's loss, gradient norm, learning rate and step time by step, loaded from an msmon
run directory, mindformers' own log, a TensorBoard event directory or a CSV / JSON Lines table."""

from msmon.reference.curve import METRICS, ReferenceCurve, ReferenceKind
from msmon.reference.load import load_reference

__all__ = ["METRICS", "ReferenceCurve", "ReferenceKind", "load_reference"]
