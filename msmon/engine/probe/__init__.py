"""Probes: costly measurements a running training takes on request over a window of steps (docs/probe.md)."""
