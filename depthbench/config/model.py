"""The looped model's config, its presets (CPU to paper scale, and the Ouro- and Huginn-shaped
serving shapes), and the KV-cache layouts a model's loops imply."""

from __future__ import annotations

from dataclasses import dataclass

from depthbench.config.base import ConfigError, PlainConfig, bounded, require
from depthbench.schedules import MAX_DEPTH


@dataclass(frozen=True, kw_only=True)
class ModelConfig(PlainConfig):
    vocab_size: int = 0            # 0: taken from the dataset at train time
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 0                  # 0: 4 * d_model
    n_prelude: int = 0             # unshared layers before the loop
    n_core: int = 1                # shared layers applied n_loops times
    n_coda: int = 0                # unshared layers after the loop
    injection: str = "concat"      # concat | add | none: how the prelude output enters each loop
    init_state: str = "zeros"      # zeros | random | prelude: the state before the first loop
    norm: str = "pre"              # pre | sandwich | residual (the stream renormalized)
    qk_norm: bool = False          # RMSNorm on queries and keys per head (bounds attention logits)
    rope: bool = True              # rotary positions; else learned absolute positions
    max_seq_len: int = 256
    tie_embeddings: bool = False
    exit_gate: bool = False        # a learned per-loop halting probability
    n_grad_loops: int = 0          # truncated backprop: gradients through the last n loops (0 = all)
    init_std: float = 0.02
    # the residual output projections' init is divided by sqrt(2 (n_prelude + init_loops n_core +
    # n_coda)): 4 counts the core as run 4 times (GPT-2 style at a typical depth); 1 counts each
    # unique layer once, assuming no loop count (Table 3's recipe, so no arm starts tuned to K=4)
    init_loops: int = 4
    # another architecture's modules under depthbench's schedules (``train --model-from``); these
    # keys leave the config's dict (and so every record and stage key) where they are unset
    arch: str = "looped"           # looped | ouro | huginn (depthbench.models' ports)
    n_kv_heads: int = 0            # ports: grouped-query KV heads (0: n_heads)
    norm_eps: float = 1e-6         # ports: RMSNorm eps
    rope_base: float = 10000.0     # ports: the rotary base (Ouro's rope_theta, Huginn's rope_base)
    init_from: str = ""            # ports: start from this checkpoint's weights (ouro:DIR, ...)
    embed_scale: float = 0.0       # huginn: embeddings multiplied by this (0: none), as its source

    def to_dict(self) -> dict:
        d = super().to_dict()
        for k, v in {**PORT_DEFAULTS, **QUIET_DEFAULTS}.items():
            if d[k] == v:
                del d[k]
        return d

    def __post_init__(self):
        self._check_types()
        self._check_port()
        for f in ("d_model", "n_heads", "n_core", "max_seq_len", "init_loops"):
            require(isinstance(getattr(self, f), int) and getattr(self, f) >= 1, f,
                   f"must be a positive integer (got {getattr(self, f)!r})")
        for f in ("vocab_size", "d_ff", "n_prelude", "n_coda", "n_grad_loops"):
            require(isinstance(getattr(self, f), int) and getattr(self, f) >= 0, f,
                   f"must be an integer >= 0 (got {getattr(self, f)!r})")
        require(self.d_model % self.n_heads == 0, "n_heads",
               f"must divide d_model={self.d_model} (got {self.n_heads})")
        require(not self.rope or (self.d_model // self.n_heads) % 2 == 0, "n_heads",
               "rope needs an even head dimension")
        require(self.injection in ("concat", "add", "none"), "injection",
               f"must be concat, add or none (got {self.injection!r})")
        require(self.init_state in ("zeros", "random", "prelude"), "init_state",
               f"must be zeros, random or prelude (got {self.init_state!r})")
        require(self.injection != "none" or self.init_state == "prelude", "injection",
               "'none' needs init_state='prelude', or the loop never sees the input")
        require(self.norm in ("pre", "sandwich", "residual"), "norm",
                f"must be pre, sandwich or residual (got {self.norm!r})")
        require(0 < self.init_std <= 1, "init_std", "must be in (0, 1]")
        require(self.init_loops <= 4096, "init_loops", "must be between 1 and 4096")
        bounded(self, {"d_model": 1 << 16, "n_heads": 1024, "d_ff": 1 << 20, "n_prelude": 1024,
                        "n_core": 1024, "n_coda": 1024, "max_seq_len": 1 << 20,
                        "vocab_size": 1 << 24, "n_grad_loops": MAX_DEPTH})

    def _check_port(self):
        require(self.arch in ARCHS, "arch", f"must be one of {', '.join(ARCHS)} (got {self.arch!r})")
        if self.arch == "looped":
            require(all(getattr(self, k) == v for k, v in PORT_DEFAULTS.items()), "arch",
                    "n_kv_heads, norm_eps, rope_base, init_from and embed_scale apply to a port "
                    "(arch ouro or huginn)")
            return
        kv = self.n_kv_heads or self.n_heads
        require(kv >= 1 and self.n_heads % kv == 0, "n_kv_heads", f"must divide n_heads={self.n_heads}")
        require(0 < self.norm_eps < 1 and self.rope_base > 1, "norm_eps", "norm_eps in (0, 1), rope_base > 1")
        require(not self.exit_gate and not self.n_grad_loops, "arch",
                f"{self.arch} trains without exit_gate and n_grad_loops (full backprop)")
        require(self.arch == "huginn" or (self.n_prelude == 0 and self.n_coda == 0), "arch",
                "ouro loops every layer: n_prelude and n_coda must be 0")
        require(self.embed_scale >= 0 and (self.arch == "huginn" or not self.embed_scale),
                "embed_scale", "is Huginn's embedding scale: a number >= 0 on arch huginn")

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def shape(self) -> LoopShape:
        """The shape of the model this config builds (its stages' matmul parameters)."""
        if self.arch != "looped":
            return self._port_shape()
        d, layer = self.d_model, 4 * self.d_model ** 2 + 2 * self.d_model * self.ff
        return LoopShape(vocab_size=self.vocab_size, d_model=d, n_heads=self.n_heads,
                         n_kv_heads=self.n_heads, head_dim=d // self.n_heads,
                         n_prelude=self.n_prelude, n_core=self.n_core, n_coda=self.n_coda,
                         max_seq_len=self.max_seq_len, exit_gate=self.exit_gate,
                         prelude_params=self.n_prelude * layer,
                         core_params=self.n_core * layer + (2 * d * d if self.injection == "concat" else 0),
                         coda_params=self.n_coda * layer, head_params=d * self.vocab_size,
                         gate_params=d if self.exit_gate else 0)


    def _port_shape(self) -> LoopShape:
        """A port's shape: Ouro's SwiGLU layers (gate, up, down) with separate q/k/v/o; Huginn's
        gated MLP (fc of 2 ff, proj) with one fused Wqkv and a concat adapter."""
        d, h = self.d_model, self.n_heads
        dh, kv = d // h, self.n_kv_heads or h
        attn = d * (h + 2 * kv) * dh + h * dh * d
        layer = attn + 3 * d * self.ff
        adapter = 2 * d * d if self.arch == "huginn" else 0
        return LoopShape(vocab_size=self.vocab_size, d_model=d, n_heads=h, n_kv_heads=kv, head_dim=dh,
                         n_prelude=self.n_prelude, n_core=self.n_core, n_coda=self.n_coda,
                         max_seq_len=self.max_seq_len, exit_gate=False,
                         prelude_params=self.n_prelude * layer,
                         core_params=self.n_core * layer + adapter,
                         coda_params=self.n_coda * layer, head_params=d * self.vocab_size)


def shape_of(cfg: ModelConfig | LoopShape) -> LoopShape:
    """A model config's shape, or the shape given (what the cost models take)."""
    return cfg.shape if isinstance(cfg, ModelConfig) else cfg


ARCHS = ("looped", "ouro", "huginn")
# keys that leave the config's dict at their default, so records and stage keys written before
# the key existed stay valid
QUIET_DEFAULTS = {"init_loops": 4}
PORT_DEFAULTS = {"arch": "looped", "n_kv_heads": 0, "norm_eps": 1e-6, "rope_base": 10000.0,
                 "init_from": "", "embed_scale": 0.0}


@dataclass(frozen=True, kw_only=True)
class LoopShape:
    """What the evaluators, the serving engine and the cost models need to know of any looped
    model (``depthbench.models.LoopedModel``): its stages' layer counts, the attention's widths
    (GQA: ``n_kv_heads`` < ``n_heads``), and each stage's matmul parameters (multiply-adds per
    token): ``core_params`` is one loop's (its layers and any adapter between loops),
    ``head_params`` the output head's, ``gate_params`` an exit gate's (read after every loop)."""
    vocab_size: int
    d_model: int                   # the width of the recurrent state (and of the embeddings)
    n_heads: int
    n_kv_heads: int
    head_dim: int
    n_prelude: int
    n_core: int
    n_coda: int
    max_seq_len: int
    exit_gate: bool
    prelude_params: int
    core_params: int
    coda_params: int
    head_params: int
    gate_params: int = 0

    @property
    def q_width(self) -> int:
        """Query heads x head dim: the width QK^T and AV are computed at."""
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """KV heads x head dim: the width of one cached key (or value) per position and layer."""
        return self.n_kv_heads * self.head_dim


# ---- presets -----------------------------------------------------------------------------------
# tiny: a fully looped model (no prelude or coda, one shared layer, about 75k parameters) sized
# against the tiny dataset (768 people x 48 record bits: about 0.5 bits per parameter) so that no
# schedule saturates at the full budget on the name-only reading. Additive injection keeps an
# identity path across loops: with the concat adapter, uniform:1-16 with full backprop stayed
# on its loss plateau (docs/calibration.md). The init counts the one unique layer once
# (init_loops = 1, as table3 runs it): no depth is favoured at init.
def tiny_model() -> ModelConfig:
    return ModelConfig(d_model=64, n_heads=4, n_prelude=0, n_core=1, n_coda=0, injection="add",
                       init_loops=1)


def small_model() -> ModelConfig:
    return ModelConfig(d_model=128, n_heads=4, n_prelude=1, n_core=2, n_coda=1)


def paper_200m_model() -> ModelConfig:
    """About 200M parameters: 2 prelude, 6 core, 2 coda layers at width 1280."""
    return ModelConfig(d_model=1280, n_heads=10, n_prelude=2, n_core=6, n_coda=2,
                       init_state="random", max_seq_len=512)


def paper_1b_model() -> ModelConfig:
    """About 1B parameters: 2 prelude, 16 core, 2 coda layers at width 2048."""
    return ModelConfig(d_model=2048, n_heads=16, n_prelude=2, n_core=16, n_coda=2,
                       init_state="random", max_seq_len=512)


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


def model_preset(name: str) -> ModelConfig:
    if name not in MODEL_PRESETS:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {', '.join(MODEL_PRESETS)}")
    return MODEL_PRESETS[name]()


KV_POLICIES = ("depth_indexed", "last_exited", "skip_exited", "single", "first_then_shared")


def kv_layout(policy: str, max_depth: int) -> tuple[int, bool, bool]:
    """(private slots per core layer, whether a shared slot follows them, whether exits copy)
    of a KV policy: ``depth_indexed``, ``last_exited``, ``skip_exited``, ``single`` or
    ``first_then_shared[:N]`` (N private loops, default 1). See ``serving.kvcache``."""
    name, sep, arg = str(policy).partition(":")
    if name == "first_then_shared":
        n = 1
        if sep:
            if not arg.isdigit() or not 1 <= int(arg) < max_depth:
                raise ConfigError(f"KV policy {policy!r}: N must be an integer in 1..{max_depth - 1} "
                                  "(max_depth - 1)")
            n = int(arg)
        return n, True, False
    if sep or name not in KV_POLICIES:
        raise ConfigError(f"unknown KV policy {policy!r}; choose one of {', '.join(KV_POLICIES)} "
                          "(first_then_shared:N for N private loops)")
    return {"depth_indexed": (max_depth, False, False), "last_exited": (max_depth, False, True),
            "skip_exited": (max_depth, False, False), "single": (0, True, False)}[name]


def copies_on_exit(policy: str, max_depth: int, depths) -> int:
    """Per core layer, how many (slot, position) entries an exit copies (``last_exited``)."""
    if policy != "last_exited":
        return 0
    return int(sum(max_depth - int(d) for d in depths))
