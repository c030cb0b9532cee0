"""Where mindformers 1.8-1.9 reads a training YAML's keys, for the whole-job check of ``msmon validate`` (plain
data; the lists of keys themselves are read from the installed mindformers, msmon.validate.introspect).

- the config template (``mindformers/tools/register/template.py``): its sections, the general keys, which sections
  raise ``KeyError`` on an unknown key (``_raise_error_for_unexpected_key``);
- the modules where the whole YAML is ``config`` / ``self.config`` (the Trainer, the context) or ``task_config``
  (``TrainingArguments``): every top-level key they read or write (an attribute, ``get``, ``getattr``, ``hasattr``
  or a subscript), scanned from their source;
- the few keys mindformers reads without declaring them where the scan sees them (below);
- which ``type:`` sections mindformers builds from which registry, and which of them get the section's other keys
  as their class's constructor arguments.
"""

from __future__ import annotations

#: mindformers' modules (relative to its package) -> the names the whole training YAML has in them (the Trainer's,
#: the context's; ``TrainingArguments`` writes its fields into ``task_config``).
TOP_LEVEL_READERS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("trainer/trainer.py", "trainer/base_trainer.py", "trainer/utils.py",
                     "core/context/build_context.py", "core/context/parallel.py"), ("config", "self.config")),
    "trainer/training_args.py": ("task_config",),
}
#: Attribute names the scan sees on those objects that are methods of the config (a dict), not keys.
CONFIG_METHODS = frozenset({
    "get", "pop", "items", "keys", "values", "update", "copy", "setdefault", "endswith", "get_value", "to_dict",
    "merge_from_dict", "convert_args_to_mindformers_config",
})
#: Top-level keys mindformers reads outside those modules: ``base_config`` (MindFormerConfig loads the files it names
#: first). The keys ``run_mindformer.py`` sets from its own flags are msmon.config.launch_flags'.
UNDECLARED_TOP_LEVEL_KEYS = frozenset({"base_config"})
#: Sections msmon itself owns at the top level (checked by msmon's own checks, MS001-MS012).
MSMON_SECTIONS = frozenset({"monitor_config"})

#: A ``type:`` location -> the registry (``MindFormerModuleType``) mindformers looks its class up in. A ``[]``
#: location is a list of entries.
TYPE_REGISTRIES: dict[str, str] = {
    "trainer": "trainer",
    "runner_wrapper": "wrapper",
    "runner_wrapper.scale_sense": "wrapper",
    "optimizer": "optimizer",
    "lr_schedule": "lr",
    "model.model_config": "config",
    "model.arch": "models",
    "train_dataset.data_loader": "dataset_loader",
    "eval_dataset.data_loader": "dataset_loader",
    "train_dataset_task": "dataset",
    "eval_dataset_task": "dataset",
    "metric": "metric",
    "processor": "processor",
    "processor.tokenizer": "tokenizer",
    "callbacks[]": "callback",
    "eval_callbacks[]": "callback",
}
#: The locations whose other keys mindformers hands to the class's constructor as they are
#: (``MindFormerRegister.get_instance_from_cfg`` / ``get_instance``; build_callback, build_optim, build_lr,
#: build_wrapper, build_metric). Not the datasets (their task turns ``dataset_dir`` into the loader's arguments), not
#: the model (its config class takes any key).
ARGUMENT_LOCATIONS = frozenset({
    "runner_wrapper", "runner_wrapper.scale_sense", "optimizer", "lr_schedule", "metric", "callbacks[]",
    "eval_callbacks[]",
})
#: Keys of those sections mindformers (or msmon's own CPU support) takes out before the constructor sees them.
CONSUMED_KEYS = frozenset({"type", "auto_register"})
