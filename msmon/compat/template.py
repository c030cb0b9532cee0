"""Defaults of mindformers 1.8-1.9's config template (mindformers/tools/register/template.py) that msmon's checks
reason about: the template is applied, since the training loads mindformers.yaml the way run_mindformer.py loads a
YAML (``MindFormerConfig(path)``)."""

from __future__ import annotations

#: ``MonitorConfig.dump_path``: where ``monitor_on`` dumps the local norms when the YAML names no directory.
TEMPLATE_DUMP_PATH = "./dump"
#: ``MonitorConfig.global_norm_spike_threshold``: the global norm at which mindformers' own checks act.
TEMPLATE_SPIKE_THRESHOLD = 3.0
