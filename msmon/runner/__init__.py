"""Launching a training: run directory, run.json, the mindformers Trainer, msrun, CPU support."""
