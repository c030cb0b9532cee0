"""Trains the way users' own scripts do, with no msmon import: the YAML loaded with ``MindFormerConfig(path)``, the
context built, ``Trainer(config).train()`` (``--finetune``: ``finetune()``)."""

import argparse

from mindformers import MindFormerConfig, Trainer
from mindformers.core.context import build_context

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--finetune", action="store_true")
args = parser.parse_args()
config = MindFormerConfig(args.config)
build_context(config)
trainer = Trainer(config)
trainer.finetune() if args.finetune else trainer.train()
