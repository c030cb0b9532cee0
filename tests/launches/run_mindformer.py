"""What mindformers' own ``run_mindformer.py`` does for a training (the script lives in mindformers' repository, not
in its wheel): ``--register_path DIR`` becomes ``REGISTER_PATH`` and joins ``sys.path`` (auto_register), the YAML is
loaded with ``MindFormerConfig(path)`` (the config template applied), then the output path, the context, the
Trainer and ``train()``. No msmon import."""

import argparse
import os
import sys

from mindformers import MindFormerConfig, Trainer
from mindformers.core.context import build_context
from mindformers.utils.file_utils import set_output_path

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--register_path", default=None)
args = parser.parse_args()
if args.register_path is not None:
    os.environ["REGISTER_PATH"] = args.register_path
    if args.register_path not in sys.path:
        sys.path.append(args.register_path)
config = MindFormerConfig(args.config)
set_output_path(config.output_dir)
build_context(config)
Trainer(config).train()
