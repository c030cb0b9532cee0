"""Every finding code with its meaning (stable across releases; docs/config.md is generated from it)."""

from __future__ import annotations

CODES: dict[str, str] = {
    "MS000": "warning: no monitor_config section, monitoring is off",
    "MS001": "unknown key anywhere in monitor_config (with a 'did you mean')",
    "MS002": "wrong type or value: a bool must be a bool, an int an int, a choice one of its values",
    "MS003": "monitor_config is not a section of keys",
    "MS004": "an interpolation cannot be resolved (unset environment variable, dangling reference)",
    "MS005": "a mindformers monitor_config key that the installed mindformers release does not know (another has it)",
    "MS006": "warning: a mindformers monitoring setting without effect as written: *_format 'tensorboard' without a "
    "tensorboard: section (log lines only), or a TrainingStateMonitor setting without monitor_on: True",
    "MS007": "warning: optimizer_state_format / weight_state_format: per-parameter norms outside the graph every "
    "step_interval steps (mindformers: greatly slows training)",
    "MS008": "monitor_on with a dump_path mindformers cannot use: null (a TypeError at the start), a file, "
    "or a directory whose rank_N directories hold other data (it deletes them); warning: it holds other files",
    "MS009": "warning: mindformers' own stop rules (check_for_nan_in_loss_and_grad, the global-norm spike settings) "
    "beside msmon's detectors: which one stops, which one alerts; error: two that mindformers refuses together",
    "MS010": "the config file is missing, a directory, binary, not UTF-8, empty, or not valid YAML",
    "MS011": "a file the training reads (load_checkpoint, its strategy, the model directory, the dataset) is a "
    "placeholder such as /path/to/... or does not exist; warning: a fine-tune without a checkpoint",
    "MS012": "warning: a mindformers monitoring setting and msmon's equivalent both on (two TensorBoard writers, "
    "gradient norms computed twice) or disagreeing (step_interval vs log_interval); docs/config.md maps the keys",
    "MS013": "warning: mindformers' own profiler is on (profile: True, what `msmon run --profile` passes): "
    "`msmon probe RUN profile` refuses the run and health's action: profile profiles nothing, MindSpore runs one "
    "profiler at a time",
    "MS020": "a top-level key the installed mindformers does not read, a few edits from one it reads (a misspelled "
    "section such as optimzer: is silently ignored, its defaults train): the nearest key and the line",
    "MS021": "warning: a top-level key nothing reads and no misspelling of one (not referred to as ${key} or by a "
    "YAML anchor the file uses): the training ignores it",
    "MS022": "a key mindformers' config template refuses in a strict section (runner_config, parallel_config, "
    "recompute_config, swap_config, moe_config of the legacy models): KeyError when the training loads the config",
    "MS023": "a `type:` names no class of mindformers' registry for that section: an error naming the nearest class "
    "when one is close (ValueError when mindformers builds it), else a warning",
    "MS024": "an argument of a `type:` (callback, optimizer, lr_schedule, runner_wrapper, metric) its class does not "
    "take, and the class takes no **kwargs: the nearest parameter (TypeError: unexpected keyword argument at the "
    "start)",
    "MS025": "a value mindformers requires to be a number (its template's or its class's default is one) is text that "
    "is no number, in the file or an override (lr_schedule.learning_rate=abc); warning: a number written as text",
    "MS026": "what msmon run refuses for the launch validate is given (--worker-num N, else one process): "
    "use_parallel without --worker-num, ranks without a parallel config or that its layout does not fill, an mcore "
    "model on several CPU ranks, a run_mode that does not train; the flag or key it needs",
    "MS027": "warning: a checkpoint: section (mindformers 1.9) on a release that reads none (1.8): msmon hands it "
    "none and the CheckpointMonitor's keys apply, which save differently (every, how many, prefix, where) or do not "
    "save at all",
    "MS028": "an mcore MoE model config mindformers' training graph refuses when it builds the network: "
    "moe_grouped_gemm not True, a load-balancing type its router lacks, top-k outside 1..experts, no "
    "routed_scaling_factor (each with the mindformers source line)",
    "MS029": "expert_parallel against the layout: it does not divide the number of experts, or (semi-auto) "
    "data_parallel x model_parallel",
    "MS101": "run_name has path separators, '..', characters other than letters, digits, '-', '_', '.', or more "
    "than 255 of them",
    "MS102": "project_name breaks the same rules",
    "MS103": "the run directory already holds data (use a new run_name, 'auto', or `msmon run --resume`)",
    "MS201": "with the mindinsight backend, save_dir's resolved path has non-ASCII characters (MindInsight's log "
    "parser cannot load them)",
    "MS202": "save_dir is empty or has whitespace or control characters",
    "MS203": "save_dir is a file, on a kernel file system (/proc, /sys, /dev), has a name too long, or cannot be "
             "written or created",
    "MS204": "warning: free disk under save_dir is below disk.min_free_mb",
    "MS301": "unknown metric name in track_metrics",
    "MS302": "a tracked metric is not produced by this training config (the flat-zero-line trap); a warning when "
    "enable_monitor is false, nothing without a monitor_config section",
    "MS303": "warning: a metric is listed twice (aliases count)",
    "MS304": "layer_grad_norm without a mindformers train-step wrapper that returns each gradient's squared sum "
    "(runner_wrapper absent or of another type)",
    "MS401": "log_interval below 1",
    "MS402": "warning: log_interval 1 with five or more metrics (a device sync every step on Ascend)",
    "MS403": "warning: log_interval larger than the run's total steps",
    "MS404": "flight_recorder.steps or max_files out of range (docs/health.md)",
    "MS501": "unknown backend in monitor_type",
    "MS502": "a chosen backend's Python package is not installed",
    "MS503": "mlflow chosen but mlflow.tracking_uri is not set",
    "MS504": "mlflow.tracking_uri is malformed (or a plain file store, which mlflow 3 refuses)",
    "MS601": "CPU: runner_config.sink_mode is true (steps silently multiplied)",
    "MS602": "CPU: fused RMS norm (no CPU kernel)",
    "MS603": "CPU: flash attention in a legacy model (no CPU kernel; msmon replaces the mcore models' one)",
    "MS604": "CPU: bfloat16 (no CPU Reshape kernel)",
    "MS605": "CPU: monitor_on with a non-empty dump_path or *_local_* formats (TensorDump has no CPU kernel)",
    "MS606": "CPU: the stock MFTrainOneStepCell (NPUGetFloatStatusV2 is unsupported on CPU)",
    "MS607": "warning, CPU: PyNative mode (20-50x slower)",
    "MS608": "CPU: an mcore model (use_legacy false, as mindformers reads it) that msmon's CPU support cannot "
    "train: an unknown mindformers version, PyNative mode, or an attention feature its stand-in lacks",
    "MS701": "a custom registration collides with a built-in transformers/mindformers name",
    "MS702": "warning: the module of an auto_register entry cannot be found or read",
    "MS703": "retired: a `type:` is checked against mindformers' registry on every validate (MS023)",
    "MS704": "mindformers failed to import, so the checks against its registry and template cannot run (the message "
    "says why): an error with --deep or an auto_register to check, else a warning (the training fails the same way)",
    "MS801": "a monitor_config.health value is out of range (docs/health.md)",
    "MS802": "health.alerts.webhook_url is not an http(s) URL",
    "MS803": "health.alerts.command is empty, or (warning) its program is not on PATH",
    "MS804": "warning: no lr_schedule.learning_rate, so the learning-rate checks cannot compare with a peak",
    "MS805": "lr_schedule.learning_rate negative or not finite; warning: outside the optimizer's plausible range "
    "(above 1 for Adam-style optimizers, 10 for others; below 1e-7; 0)",
    "MS806": "lr_end (min_lr) above the peak learning rate of a decaying schedule",
    "MS807": "warning: the warm-up is as long as the run or longer (warmup_ratio above 1, or warmup steps >= steps)",
    "MS808": "warning: a decaying schedule's total_steps differs from the steps the data and batch size give",
    "MS809": "a health.alerts.chat target: its url is not an http(s) URL; warning: its secret_env is unset, or a "
             "signing secret for a service without signatures",
    "MS810": "a health detector's action is rollback but the config saves no checkpoint (no CheckpointMonitor)",
    "MS811": "warning: the CheckpointMonitor's interval and keep_checkpoint_max cannot cover a rollback (no kept "
             "checkpoint would lie before a typical onset), or health.rollback.max_rollbacks is 0",
    "MS812": "warning: health.rollback.skip_steps is a large share of the data: a rollback near its end skips to "
             "the end, and one whose bad window reaches the end leaves nothing to train",
    "MS813": "monitor_config.reference: a run that is no reference source msmon reads (no such path, or not an msmon "
             "run directory, mindformers log, TensorBoard directory or CSV / JSON Lines table), or a tag not "
             "metric=tag",
    "MS814": "warning: MindSpore's compile cache is on (MS_COMPILER_CACHE_ENABLE=1 or context.enable_compile_cache): "
             "it keys graphs by the entry script, not the config, so a changed config can train an earlier graph",
    "MS901": "doctor, warning: Python is not 3.11",
    "MS902": "doctor: MindSpore or mindformers is not installed (`msmon run` stops on it)",
    "MS903": "doctor: this mindformers release imports an unpublished package that is missing (`msmon run` stops)",
    "MS904": "doctor, warning: the mindformers + MindSpore pair is not in msmon's tested matrix",
    "MS905": "doctor, warning: MindInsight is not installed (mindinsight backend, `msmon board`)",
    "MS906": "doctor, warning: protobuf newer than MindInsight 2.3.1 accepts (<=3.20.1)",
    "MS907": "doctor, warning: pandas 2 or newer breaks MindInsight's lineage and hyperparameter-importance pages",
    "MS908": "doctor, warning: msrun is not on PATH (`msmon run --worker-num` needs it)",
    "MS909": "doctor, warning: the CANN version is not one this MindSpore accepts",
    "MS910": "doctor (CONFIG): context.device_target cannot run on this machine",
    "MS911": "doctor (CONFIG), warning: the board port is busy",
    "MS912": "doctor, warning: marshmallow 4 or newer breaks MindInsight's lineage and importance searches (HTTP 500)",
}
