"""Names for the values that enter msmon from libraries it does not own, and stay untyped here.

MindSpore, mindformers, OmegaConf, protobuf, MLflow, TensorBoard and matplotlib ship no type information msmon can
rely on, and msmon imports them only inside functions (a CPU-only install, ``msmon --help`` without MindSpore), so
their classes are not at hand for annotations. A value one of them hands msmon is typed ``Any`` under one of the
names below, which says what it is; everything msmon builds itself has a real type. Decoded JSON is the other
outside input: ``msmon.util.jsonfiles.JsonObject``. The architecture test lets ``Any`` be imported only here and
there.
"""

from __future__ import annotations

from typing import Any

#: MindSpore's ``cb_params`` (``run_context.original_args()``): a namespace whose fields vary with the version.
CallbackParams = Any
#: MindSpore's ``RunContext``, handed to a callback's hooks.
RunContext = Any
#: A MindSpore ``Callback`` (msmon's own is a subclass built inside a function, over MindSpore's base class).
Callback = Any
#: A MindSpore tensor or parameter, or the numpy array read from one.
Tensor = Any
#: A MindSpore ``nn.Cell``: the network, its train-step wrapper, one of its layers, a stand-in msmon patches in.
Cell = Any
#: A MindSpore optimizer (a Cell with ``learning_rate`` and ``global_step`` of a version-dependent shape).
Optimizer = Any
#: A MindSpore dataset handed to ``Model.train``.
Dataset = Any
#: A MindSpore profiler.
Profiler = Any
#: A mindformers object: its ``MindFormerConfig``, ``TrainingArguments``, ``Trainer``, a registered class.
Mindformers = Any
#: A value of a parsed config (mindformers' training YAML, msmon's section, an OmegaConf node, a TOML table msmon
#: ships): any YAML or TOML value, as written.
ConfigValue = Any
#: A protobuf message (MindInsight's lineage, TensorBoard's summaries), built from the installed library's classes.
ProtoMessage = Any
#: A writer or client of an optional backend library (TensorBoard's or MindInsight's summary writer, MLflow's
#: client, matplotlib's axes).
BackendClient = Any
#: An argument or result of a foreign function msmon wraps or stands in for, passed through unread.
Passed = Any
