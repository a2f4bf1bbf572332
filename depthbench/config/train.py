"""Training configs: the optimizer and loop settings (``TrainConfig``) with their presets, and
a train stage's whole job (``TrainJob``: data, model, training and schedule)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from depthbench.config.base import ConfigError, PlainConfig, bounded, require
from depthbench.config.model import ModelConfig, model_preset
from depthbench.errors import UserError
from depthbench.schedules import MAX_DEPTH, parse_schedule


@dataclass(frozen=True, kw_only=True)
class TrainConfig(PlainConfig):
    steps: int = 600
    batch_size: int = 128          # global batch (sequences), split across ranks
    lr: float = 3e-3
    min_lr_ratio: float = 0.0      # the LR decays to lr * min_lr_ratio
    warmup_steps: int = 50
    lr_schedule: str = "wsd"       # wsd (warmup-stable-decay) | cosine
    decay_frac: float = 0.2        # wsd: the decay phase is the last decay_frac of training
    decay_at_switch: bool = False  # wsd: start the decay at the depth schedule's switch instead
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 10
    eval_every: int = 0            # 0: no eval during training
    eval_depths: tuple[int, ...] = (1, 4, 16)
    eval_people: int = 256         # people of eval_reordered read by the in-training eval
    ckpt_every: int = 200          # 0: only the final checkpoint (and keep_steps)
    keep_steps: tuple[int, ...] = ()   # extra steps whose checkpoints are kept
    device: str = "auto"           # auto | cpu | cuda
    compile: bool = False
    threads: int = 0               # CPU threads (0: torch's default; pipeline workers use 1 each)

    def __post_init__(self):
        self._check_types()
        object.__setattr__(self, "eval_depths", tuple(self.eval_depths))
        object.__setattr__(self, "keep_steps", tuple(self.keep_steps))
        for f in ("steps", "batch_size", "log_every"):
            require(isinstance(getattr(self, f), int) and getattr(self, f) >= 1, f,
                   f"must be a positive integer (got {getattr(self, f)!r})")
        for f in ("warmup_steps", "eval_every", "ckpt_every", "seed", "threads", "eval_people"):
            require(isinstance(getattr(self, f), int) and getattr(self, f) >= 0, f,
                   f"must be an integer >= 0 (got {getattr(self, f)!r})")
        require(self.lr > 0, "lr", f"must be > 0 (got {self.lr})")
        require(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "must be in [0, 1]")
        require(self.lr_schedule in ("wsd", "cosine"), "lr_schedule",
               f"must be wsd or cosine (got {self.lr_schedule!r})")
        require(0 <= self.decay_frac <= 1, "decay_frac", "must be in [0, 1]")
        require(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "beta1", "betas must be in [0, 1)")
        require(self.grad_clip >= 0, "grad_clip", "must be >= 0 (0 disables clipping)")
        require(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        require(all(isinstance(d, int) and d >= 1 for d in self.eval_depths), "eval_depths",
               "must be positive integers")
        require(self.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda")
        require(all(k <= MAX_DEPTH for k in self.eval_depths), "eval_depths",
               f"must be at most {MAX_DEPTH}")
        bounded(self, {"steps": 10**9, "batch_size": 1 << 20, "log_every": 10**9,
                        "warmup_steps": 10**9, "eval_every": 10**9, "ckpt_every": 10**9,
                        "seed": 2**32 - 1, "threads": 1024, "eval_people": 1 << 30})

    def tokens_per_step(self, seq_len: int) -> int:
        """Tokens one step trains on: every position of a batch that predicts a next token."""
        return self.batch_size * (seq_len - 1)


TRAIN_PRESETS = {
    # calibrated in docs/calibration.md (the record before the name-only reading, p512-add-s1500): the
    # same recipe for every schedule, full backprop. At 1000 steps uniform:1-16 and fixed:4 missed
    # the 8-seed criterion (worst seed 0.79 of the median; SD 6.4% of the ceiling); at 1500 every
    # quickstart schedule meets it. No weight decay: it erases memorized facts; batch 64 gives
    # more updates per FLOP than 256 at this size.
    # The LR and decay are table3's (its sweep, depthbench run table3-lr: uniform:1-16's LR,
    # the decay after both of table3's switches); the earlier preset's LR 3e-3 and 20% decay are
    # pinned in the specs that ran at them.
    "tiny": lambda: TrainConfig(steps=1500, batch_size=64, weight_decay=0.0, lr=1.2e-2,
                                decay_frac=0.1, compile=True),
    "small": lambda: TrainConfig(steps=4000, batch_size=128, lr=2e-3, ckpt_every=500,
                                 compile=True),
    "paper-200m": lambda: TrainConfig(steps=20000, batch_size=512, lr=6e-4, warmup_steps=1000,
                                      ckpt_every=1000, device="cuda", compile=True),
    "paper-1b": lambda: TrainConfig(steps=40000, batch_size=1024, lr=3e-4, warmup_steps=2000,
                                    ckpt_every=1000, device="cuda", compile=True),
}


def split_sets(pairs: dict) -> tuple[dict, dict]:
    """``--set`` keys go to the model or the training config by field name (``model.`` or
    ``train.`` prefixes decide where a name could be both)."""
    mf = {f.name for f in dataclasses.fields(ModelConfig)}
    tf = {f.name for f in dataclasses.fields(TrainConfig)}
    model, train = {}, {}
    for k, v in pairs.items():
        key = k.split(".", 1)[1] if k.startswith(("model.", "train.")) else k
        if k.startswith("model.") or (key in mf and not k.startswith("train.")):
            if key not in mf:
                raise ConfigError(f"--set {k}: unknown model config key")
            model[key] = v
        elif key in tf:
            train[key] = v
        else:
            raise ConfigError(f"--set {k}: unknown config key; model keys: "
                              f"{', '.join(sorted(mf))}; training keys: {', '.join(sorted(tf))}")
    return model, train


def train_preset(name: str) -> TrainConfig:
    if name not in TRAIN_PRESETS:
        raise ConfigError(f"unknown training preset {name!r}; choose one of "
                          f"{', '.join(TRAIN_PRESETS)}")
    return TRAIN_PRESETS[name]()


def resolve_presets(preset: str, sets: dict | None = None, model: dict | None = None,
                    train: dict | None = None) -> tuple[ModelConfig, TrainConfig]:
    """The one resolution of a model and training config, for the CLI, the pipeline and the
    spec alike: the preset's configs, then the ``model`` and ``train`` tables given (a
    ``--config`` file's), then the ``--set`` pairs (split by field name)."""
    m_over, t_over = split_sets(sets or {})
    return (ModelConfig.from_dict({**model_preset(preset).to_dict(), **complete(model or {}),
                                   **m_over}),
            TrainConfig.from_dict({**train_preset(preset).to_dict(), **(train or {}), **t_over}))


def complete(model: dict) -> dict:
    """A model table as ``ModelConfig.to_dict`` wrote it (a run's record, a plan's stage
    config) omits the keys at their quiet defaults; laid over a preset whose value differs
    (tiny's ``init_loops = 1``) it would take the preset's. A table with every other field is
    such a record: its omitted quiet keys are the defaults it was written with."""
    from depthbench.config.model import PORT_DEFAULTS, QUIET_DEFAULTS
    fields = {f.name for f in dataclasses.fields(ModelConfig)} - set(PORT_DEFAULTS) - set(QUIET_DEFAULTS)
    if not fields <= set(model):
        return model
    return {**PORT_DEFAULTS, **QUIET_DEFAULTS, **model}


DEVICES = ("auto", "cpu", "cuda")


# the experiment trackers a run can be logged to (depthbench.trackers): views of its rows
TRACKERS = ("tensorboard", "trackio", "wandb")


@dataclass(frozen=True, kw_only=True)
class TrainJob(PlainConfig):
    """One training run: ``train.run_train(job)``."""
    data: str                      # dataset directory
    out: str                       # run directory
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    schedule: str = "uniform:1-16"
    resume: bool = False           # continue the run in out (start it if there is none)
    match_flops: str = ""          # RUN: train.steps becomes the steps that spend RUN's FLOPs
    keep_after_switch: tuple[int, ...] = ()  # also keep the checkpoints at switch + k
    results: str = ""              # directory for result rows (kinds curve and run); "": none
    tags: dict = field(default_factory=dict)  # extra columns of every result row
    # a shared prefix (neither changes what the run computes; ``depthbench run`` sets them where
    # runs of a grid make the same first updates, see train.shared_steps):
    start_from: str = ""           # RUN: a new run starts from RUN's checkpoint at start_step,
    start_step: int = 0            # which holds this run's own state there (checked)
    share_steps: tuple[int, ...] = ()  # also keep the checkpoints at these steps (runs start there)
    # a live view (neither changes what the run computes): log the curve to this tracker as it
    # trains, under tracker_dir ("": tracker/ beside the run directory)
    tracker: str = ""
    tracker_dir: str = ""

    @property
    def depth_schedule(self):
        """``schedule`` parsed (a ``schedules.Schedule``), where the config entered."""
        return self._schedule

    @classmethod
    def from_dict(cls, d: dict):
        d = dict(d)
        for key, sub in (("model", ModelConfig), ("train", TrainConfig)):
            if key in d and not isinstance(d[key], (dict, sub)):
                raise ConfigError(f"{key} must be a table of {sub.__name__} keys (got "
                                  f"{type(d[key]).__name__})")
            if isinstance(d.get(key), dict):
                d[key] = sub.from_dict(d[key])
        return super().from_dict(d)

    def __post_init__(self):
        self._check_types()
        try:   # parsed once, here
            object.__setattr__(self, "_schedule", parse_schedule(self.schedule))
        except UserError as e:
            raise ConfigError(f"schedule: {e}") from None
        require(all(k >= 0 for k in self.keep_after_switch), "keep_after_switch", "must be >= 0")
        require(all(k >= 1 for k in self.share_steps), "share_steps", "must be steps >= 1")
        require(self.start_step >= 0, "start_step", "must be >= 0")
        require(bool(self.start_from) == (self.start_step > 0), "start_from",
               "start_from (a run directory) and start_step (>= 1) go together")
        require(bool(self.data) and bool(self.out), "data", "data and out must be given")
        require(self.tracker in ("",) + TRACKERS, "tracker",
               f"unknown tracker {self.tracker!r}; choose one of {', '.join(TRACKERS)}")
