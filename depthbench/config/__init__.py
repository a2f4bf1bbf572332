"""Configs: keyword-only dataclasses of plain values, validated in ``__post_init__`` (the error
names the field), presets as functions. No torch import here.

``ModelConfig`` and ``TrainConfig`` are a model's shape and its training recipe; ``TrainJob``,
``EvalConfig``, ``ProbeConfig``, ``ServeConfig`` and ``ReportConfig`` are what one stage action
needs (paths included), the same object whether the CLI builds it from options, ``--config``
reads it from a file, or ``depthbench run`` builds it from a spec."""

from depthbench.config.base import ConfigError, read_config_file
from depthbench.config.model import (
    KV_POLICIES,
    MODEL_PRESETS,
    LoopShape,
    ModelConfig,
    copies_on_exit,
    huginn_like_model,
    kv_layout,
    model_preset,
    ouro_like_model,
    paper_1b_model,
    paper_200m_model,
    shape_of,
    small_model,
    tiny_model,
)
from depthbench.config.stages import (
    DEFAULT_SERVE_MODES,
    EVAL_SPLITS,
    MODES,
    SERVE_MODES,
    EvalConfig,
    GenerateJob,
    Mode,
    PrepareTextConfig,
    ProbeConfig,
    ReportConfig,
    RunConfig,
    ServeConfig,
    SimConfig,
    depths_ok,
    one_of,
)
from depthbench.config.train import (
    DEVICES,
    TRACKERS,
    TRAIN_PRESETS,
    TrainConfig,
    TrainJob,
    resolve_presets,
    split_sets,
    train_preset,
)

__all__ = [
    "ConfigError", "read_config_file", "KV_POLICIES", "MODEL_PRESETS", "LoopShape", "ModelConfig",
    "copies_on_exit", "huginn_like_model", "kv_layout", "model_preset", "ouro_like_model",
    "paper_1b_model", "paper_200m_model", "shape_of", "small_model", "tiny_model", "DEFAULT_SERVE_MODES",
    "EVAL_SPLITS", "MODES", "Mode", "SERVE_MODES", "EvalConfig", "GenerateJob", "PrepareTextConfig",
    "ProbeConfig", "ReportConfig", "RunConfig", "ServeConfig",
    "SimConfig", "depths_ok", "one_of", "DEVICES", "TRACKERS", "TRAIN_PRESETS", "TrainConfig", "TrainJob",
    "resolve_presets", "split_sets", "train_preset",
]
