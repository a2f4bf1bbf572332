"""Configs of the model and the trainer: keyword-only dataclasses of plain values, validated in
``__post_init__`` (the error names the field), presets as functions. No torch import here."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from depthbench.errors import UserError


class ConfigError(UserError, ValueError):
    """A config value that is out of range or of the wrong kind."""


def _check(cond: bool, field: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{field}: {msg}")


# the deepest loop count any spec or option may name: far beyond the field's models (Huginn
# serves at up to 64-128 loops), small enough that no depth can ask for an absurd allocation
MAX_DEPTH = 1024


def _bounded(cfg, limits: dict[str, int]) -> None:
    """Upper bounds far above any real use, so that no value can ask for an absurd allocation
    or a run of centuries."""
    for f, hi in limits.items():
        _check(getattr(cfg, f) <= hi, f, f"must be at most {hi} (got {getattr(cfg, f)})")


def _type_problem(value, annotation: str) -> str | None:
    """Why ``value`` does not fit the field annotation (strictly: no bool for int, no string
    for bool, finite floats only), or None."""
    if annotation == "bool":
        return None if isinstance(value, bool) else "must be true or false"
    if annotation == "int":
        return None if type(value) is int else "must be an integer"
    if annotation == "float":
        ok = type(value) in (int, float) and math.isfinite(value)
        return None if ok else "must be a finite number"
    if annotation == "str":
        return None if isinstance(value, str) else "must be a string"
    if annotation == "tuple[int, ...]":
        ok = isinstance(value, (list, tuple)) and all(type(v) is int for v in value)
        return None if ok else "must be a list of integers"
    raise AssertionError(f"no type check for {annotation}")


class _Plain:
    """JSON round trip with unknown keys refused and every field's type checked."""

    def _check_types(self) -> None:
        for f in dataclasses.fields(self):
            problem = _type_problem(getattr(self, f.name), f.type)
            if problem:
                raise ConfigError(f"{f.name}: {problem} (got {getattr(self, f.name)!r})")
            if f.type == "float":
                object.__setattr__(self, f.name, float(getattr(self, f.name)))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} key(s): {', '.join(unknown)}; known: "
                              f"{', '.join(sorted(known))}")
        try:
            return cls(**d)
        except TypeError as e:
            raise ConfigError(f"{cls.__name__}: {e}") from None

    def replace(self, **kw):
        return self.from_dict({**self.to_dict(), **kw})


@dataclass(frozen=True, kw_only=True)
class ModelConfig(_Plain):
    vocab_size: int = 0            # 0: taken from the dataset at train time
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 0                  # 0: 4 * d_model
    n_prelude: int = 0             # unshared layers before the loop
    n_core: int = 1                # shared layers applied n_loops times
    n_coda: int = 0                # unshared layers after the loop
    injection: str = "concat"      # concat | add | none: how the prelude output enters each loop
    init_state: str = "zeros"      # zeros | random | prelude: the state before the first loop
    norm: str = "pre"              # pre | sandwich
    qk_norm: bool = False          # RMSNorm on queries and keys per head (bounds attention logits)
    rope: bool = True              # rotary positions; else learned absolute positions
    max_seq_len: int = 256
    tie_embeddings: bool = False
    exit_gate: bool = False        # a learned per-loop halting probability
    n_grad_loops: int = 0          # truncated backprop: gradients through the last n loops (0 = all)
    init_std: float = 0.02

    def __post_init__(self):
        self._check_types()
        for f in ("d_model", "n_heads", "n_core", "max_seq_len"):
            _check(isinstance(getattr(self, f), int) and getattr(self, f) >= 1, f,
                   f"must be a positive integer (got {getattr(self, f)!r})")
        for f in ("vocab_size", "d_ff", "n_prelude", "n_coda", "n_grad_loops"):
            _check(isinstance(getattr(self, f), int) and getattr(self, f) >= 0, f,
                   f"must be an integer >= 0 (got {getattr(self, f)!r})")
        _check(self.d_model % self.n_heads == 0, "n_heads",
               f"must divide d_model={self.d_model} (got {self.n_heads})")
        _check(not self.rope or (self.d_model // self.n_heads) % 2 == 0, "n_heads",
               "rope needs an even head dimension")
        _check(self.injection in ("concat", "add", "none"), "injection",
               f"must be concat, add or none (got {self.injection!r})")
        _check(self.init_state in ("zeros", "random", "prelude"), "init_state",
               f"must be zeros, random or prelude (got {self.init_state!r})")
        _check(self.injection != "none" or self.init_state == "prelude", "injection",
               "'none' needs init_state='prelude', or the loop never sees the input")
        _check(self.norm in ("pre", "sandwich"), "norm", f"must be pre or sandwich (got {self.norm!r})")
        _check(0 < self.init_std <= 1, "init_std", "must be in (0, 1]")
        _bounded(self, {"d_model": 1 << 16, "n_heads": 1024, "d_ff": 1 << 20, "n_prelude": 1024,
                        "n_core": 1024, "n_coda": 1024, "max_seq_len": 1 << 20,
                        "vocab_size": 1 << 24, "n_grad_loops": MAX_DEPTH})

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model


@dataclass(frozen=True, kw_only=True)
class TrainConfig(_Plain):
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
            _check(isinstance(getattr(self, f), int) and getattr(self, f) >= 1, f,
                   f"must be a positive integer (got {getattr(self, f)!r})")
        for f in ("warmup_steps", "eval_every", "ckpt_every", "seed", "threads", "eval_people"):
            _check(isinstance(getattr(self, f), int) and getattr(self, f) >= 0, f,
                   f"must be an integer >= 0 (got {getattr(self, f)!r})")
        _check(self.lr > 0, "lr", f"must be > 0 (got {self.lr})")
        _check(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "must be in [0, 1]")
        _check(self.lr_schedule in ("wsd", "cosine"), "lr_schedule",
               f"must be wsd or cosine (got {self.lr_schedule!r})")
        _check(0 <= self.decay_frac <= 1, "decay_frac", "must be in [0, 1]")
        _check(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "beta1", "betas must be in [0, 1)")
        _check(self.grad_clip >= 0, "grad_clip", "must be >= 0 (0 disables clipping)")
        _check(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        _check(all(isinstance(d, int) and d >= 1 for d in self.eval_depths), "eval_depths",
               "must be positive integers")
        _check(self.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda")
        _check(all(k <= MAX_DEPTH for k in self.eval_depths), "eval_depths",
               f"must be at most {MAX_DEPTH}")
        _bounded(self, {"steps": 10**9, "batch_size": 1 << 20, "log_every": 10**9,
                        "warmup_steps": 10**9, "eval_every": 10**9, "ckpt_every": 10**9,
                        "seed": 2**32 - 1, "threads": 1024, "eval_people": 1 << 30})


# ---- presets -----------------------------------------------------------------------------------
# tiny: a fully looped model (no prelude or coda, one shared layer) sized against the tiny
# dataset so that depth matters: at depth 1 it cannot reach the 70-bit ceiling.
def tiny_model() -> ModelConfig:
    # truncated backprop through the last 4 loops (as Huginn trains): with full backprop through
    # up to 16 loops, uniform:1-16 stayed on its loss plateau on some seeds (docs/calibration.md)
    return ModelConfig(d_model=64, n_heads=4, n_prelude=0, n_core=1, n_coda=0, n_grad_loops=4)


def small_model() -> ModelConfig:
    return ModelConfig(d_model=128, n_heads=4, n_prelude=1, n_core=2, n_coda=1)


def paper_200m_model() -> ModelConfig:
    """About 200M parameters: 2 prelude, 6 core, 2 coda layers at width 1280."""
    return ModelConfig(d_model=1280, n_heads=10, n_prelude=2, n_core=6, n_coda=2,
                       init_state="random", n_grad_loops=8, max_seq_len=512)


def paper_1b_model() -> ModelConfig:
    """About 1B parameters: 2 prelude, 16 core, 2 coda layers at width 2048."""
    return ModelConfig(d_model=2048, n_heads=16, n_prelude=2, n_core=16, n_coda=2,
                       init_state="random", n_grad_loops=8, max_seq_len=512)


def ouro_like_model() -> ModelConfig:
    """Shaped like Ouro-1.4B: fully looped, 24 layers applied 4 times, width 2048 (serving only)."""
    return ModelConfig(d_model=2048, n_heads=16, n_prelude=0, n_core=24, n_coda=0,
                       injection="none", init_state="prelude", vocab_size=49152, max_seq_len=4096)


def huginn_like_model() -> ModelConfig:
    """Shaped like Huginn-3.5B: 2 prelude, 4 core, 2 coda layers at width 5280 (serving only)."""
    return ModelConfig(d_model=5280, n_heads=55, n_prelude=2, n_core=4, n_coda=2,
                       init_state="random", vocab_size=65536, max_seq_len=4096)


MODEL_PRESETS = {"tiny": tiny_model, "small": small_model, "paper-200m": paper_200m_model,
                 "paper-1b": paper_1b_model, "ouro-like": ouro_like_model,
                 "huginn-like": huginn_like_model}

TRAIN_PRESETS = {
    # calibrated in docs/calibration.md (benchmarks/calibrate.py): the same recipe for every
    # schedule. Weight decay erases memorized facts (uniform:1-16 recalled 45 bits/person after
    # 800 steps without it, 19 after 1000 steps with 0.1); batch 64 gives more updates per FLOP.
    "tiny": lambda: TrainConfig(steps=1000, batch_size=64, weight_decay=0.0),
    "small": lambda: TrainConfig(steps=4000, batch_size=128, lr=2e-3, ckpt_every=500),
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


def model_preset(name: str) -> ModelConfig:
    if name not in MODEL_PRESETS:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {', '.join(MODEL_PRESETS)}")
    return MODEL_PRESETS[name]()


def train_preset(name: str) -> TrainConfig:
    if name not in TRAIN_PRESETS:
        raise ConfigError(f"unknown training preset {name!r}; choose one of "
                          f"{', '.join(TRAIN_PRESETS)}")
    return TRAIN_PRESETS[name]()
