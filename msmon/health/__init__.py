"""Training health: detectors, the stall watchdog, alerts and actions."""
