"""The looped (recurrent-depth) transformer.

    idx -> embedding -> prelude (unshared) -> e
    s_0 = init_state(e)                                   zeros | random | e
    s_k = core(inject(s_{k-1}, e))  for k = 1..K          core: n_core shared layers
    logits_k = head(norm(coda(s_k)))                      any k can be read out

Design choices:
- Depth is an argument: ``forward(idx, n_loops=K)``. The model never samples K.
- The state after k loops is the depth-k model's state, so ``all_depths=True`` reads out the
  coda and head after every loop and returns every depth's logits from one pass.
- Input injection: ``concat`` is a linear adapter on [s, e] (2d -> d), ``add`` is s + e,
  ``none`` relies on init_state='prelude'.
- ``init_state='random'`` draws fresh noise while training and uses a fixed position-indexed
  noise buffer in eval mode, so that evaluation and KV-cached decoding are deterministic and
  agree with the full forward.
- Truncated backprop: the first K - n_grad_loops loops run without autograd.
- Attention takes an optional ``cache`` (anything with ``extend(k, v) -> (k_all, v_all)``) and
  an explicit mask, so the serving engine can run the same modules on KV-cached decode steps.
- Norm placement: ``pre`` normalizes each sublayer's input; ``sandwich`` its output too;
  ``residual`` (Huginn's core) also renormalizes the residual stream after each sublayer, so
  the state keeps one scale however many loops run (under ``pre``, ``add`` injection puts the
  input into the stream once per loop and the stream grows with K, so each later loop moves
  its normalized input less).
- ``qk_norm`` normalizes queries and keys per head, so attention logits stay bounded however
  large the recurrent state grows over many loops.
- All initialization is in ``_init_weights``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from depthbench.config import ModelConfig
from depthbench.models.protocol import LoopedMixin, padding_mask


class Rotary(nn.Module):
    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0):
        super().__init__()
        inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        t = torch.arange(max_seq_len, dtype=torch.float32)
        freqs = torch.outer(t, inv)                                        # (S, dh/2)
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x: (B, T, ..., dh), token-major (the projection's own layout, so that the products
        below run over contiguous memory; rotating queries and keys in one call); pos: (T,) or
        (B, T) positions."""
        cos, sin = self.cos[pos], self.sin[pos]                            # (.., T, dh/2)
        inner = (1,) * (x.dim() - 3)                                       # the dims after T
        cos, sin = (t.view(*t.shape[:-1], *inner, t.shape[-1]) for t in (cos, sin))
        x1, x2 = x.float().chunk(2, dim=-1)
        out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return out.type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        if cfg.qk_norm:
            self.q_norm, self.k_norm = nn.RMSNorm(self.head_dim), nn.RMSNorm(self.head_dim)
        self.qk_norm = cfg.qk_norm

    def forward(self, x, rotary, pos, cache=None, mask=None):
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim)     # token-major
        qk = qkv[:, :, :2]                                                 # (B, T, 2, H, dh)
        if self.qk_norm:
            qk = torch.stack([self.q_norm(qk[:, :, 0]), self.k_norm(qk[:, :, 1])], dim=2)
        if rotary is not None:
            qk = rotary(qk, pos)
        q, k, v = (t.transpose(1, 2) for t in (qk[:, :, 0], qk[:, :, 1], qkv[:, :, 2]))
        if cache is not None:
            k, v = cache.extend(k, v)                                      # (B, H, S, dh)
        if mask is None:
            assert k.shape[2] == T, "a cached attention call needs an explicit mask"
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                   # (B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.ff, bias=False)
        self.down = nn.Linear(cfg.ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.kind = cfg.norm
        self.norm1, self.norm2 = nn.RMSNorm(cfg.d_model), nn.RMSNorm(cfg.d_model)
        self.attn, self.mlp = Attention(cfg), MLP(cfg)
        if self.kind != "pre":
            self.post1, self.post2 = nn.RMSNorm(cfg.d_model), nn.RMSNorm(cfg.d_model)

    def forward(self, x, rotary, pos, cache=None, mask=None):
        a = self.attn(self.norm1(x), rotary, pos, cache, mask)
        if self.kind == "residual":      # the stream itself renormalized: its scale is fixed
            x = self.post1(x + a)
            return self.post2(x + self.mlp(self.norm2(x)))
        x = x + (self.post1(a) if self.kind == "sandwich" else a)
        m = self.mlp(self.norm2(x))
        return x + (self.post2(m) if self.kind == "sandwich" else m)


class LoopedTransformer(LoopedMixin, nn.Module):
    """The protocol's first implementation: ``readouts`` (every depth from one pass) and
    ``positions`` come from ``LoopedMixin``; ``forward`` adds all-depth and gate outputs."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        assert cfg.vocab_size > 0, "set vocab_size (from the dataset) before building the model"
        self.cfg = cfg
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.rotary = Rotary(d // cfg.n_heads, cfg.max_seq_len) if cfg.rope else None
        if not cfg.rope:
            self.pos_embed = nn.Embedding(cfg.max_seq_len, d)
        self.prelude = nn.ModuleList(Block(cfg) for _ in range(cfg.n_prelude))
        self.core = nn.ModuleList(Block(cfg) for _ in range(cfg.n_core))
        self.coda = nn.ModuleList(Block(cfg) for _ in range(cfg.n_coda))
        if cfg.injection == "concat":
            self.adapter = nn.Linear(2 * d, d, bias=False)
        self.norm = nn.RMSNorm(d)
        self.head = nn.Linear(d, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight
        if cfg.exit_gate:
            self.gate = nn.Linear(d, 1)
        if cfg.init_state == "random":
            self.register_buffer("state_noise", torch.zeros(cfg.max_seq_len, d))
        self._init_weights()

    def _init_weights(self):
        std = self.cfg.init_std
        # residual output projections are scaled down by the number of residual additions on
        # a token's path with the core counted init_loops times (GPT-2 style)
        n_res = 2 * (self.cfg.n_prelude + self.cfg.init_loops * self.cfg.n_core + self.cfg.n_coda)
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue
            s = std / math.sqrt(n_res) if name.endswith(("proj.weight", "down.weight")) else std
            nn.init.normal_(p, mean=0.0, std=s)
        if self.cfg.exit_gate:
            nn.init.zeros_(self.gate.bias)
        if self.cfg.init_state == "random":
            g = torch.Generator().manual_seed(0)
            self.state_noise.copy_(torch.randn(self.state_noise.shape, generator=g) * std)

    @property
    def shape(self):
        """The looped-model protocol's shape (``depthbench.models``)."""
        return self.cfg.shape

    default_depth = None   # no loop count of its own: the sweeps' default depths apply

    # ---- the pieces, also used by the serving engine -------------------------------------------
    def run_layers(self, layers, x, pos, caches=None, mask=None):
        for i, layer in enumerate(layers):
            x = layer(x, self.rotary, pos, None if caches is None else caches[i], mask)
        return x

    def embed_prelude(self, idx, pos, caches=None, mask=None):
        x = self.embed(idx)                                                # (B, T, C)
        if not self.cfg.rope:
            x = x + self.pos_embed(pos)
        return self.run_layers(self.prelude, x, pos, caches, mask)

    def initial_state(self, e, pos):
        kind = self.cfg.init_state
        if kind == "zeros":
            return torch.zeros_like(e)
        if kind == "prelude":
            return e
        if self.training:
            return torch.randn_like(e) * self.cfg.init_std
        noise = self.state_noise[pos]                                      # (T, C) or (B, T, C)
        return noise.expand_as(e).to(e.dtype)

    def inject(self, s, e):
        kind = self.cfg.injection
        if kind == "concat":
            return self.adapter(torch.cat([s, e], dim=-1))                 # (B, T, 2C) -> (B, T, C)
        return s + e if kind == "add" else s

    def core_step(self, s, e, pos, caches=None, mask=None):
        return self.run_layers(self.core, self.inject(s, e), pos, caches, mask)

    def readout(self, s, pos, caches=None, mask=None):
        return self.head(self.norm(self.run_layers(self.coda, s, pos, caches, mask)))

    def gate_logit(self, s):
        return self.gate(s).squeeze(-1)                                    # (B, T)

    # ---- the full forward ------------------------------------------------------------------------
    def forward(self, idx: torch.Tensor, n_loops: int, all_depths: bool = False,
                return_gates: bool = False, attention_mask=None):
        """idx: (B, T) token ids. Returns (B, T, V) logits at depth ``n_loops``, or with
        ``all_depths`` a (K, B, T, V) tensor of every depth's logits.

        With ``return_gates`` (training the exit gate) also returns the (K, B, T) gate logits,
        computed on the detached state, and the (K, B, T) argmax prediction after every loop,
        read out without autograd (the gate's targets). ``attention_mask`` as in ``readouts``."""
        assert n_loops >= 1
        B, T = idx.shape
        pos = self.positions(T, idx.device)
        mask = padding_mask(attention_mask, T, idx.device)
        e = self.embed_prelude(idx, pos, None, mask)
        s = self.initial_state(e, pos)
        g = self.cfg.n_grad_loops
        n_free = n_loops - g if g and self.training else 0
        outs, gates, preds = [], [], []
        for k in range(n_loops):
            last = k == n_loops - 1
            with torch.set_grad_enabled(torch.is_grad_enabled() and k >= n_free):
                s = self.core_step(s, e, pos, None, mask)
                if all_depths or last:
                    outs.append(self.readout(s, pos, None, mask))
                if return_gates:
                    gates.append(self.gate_logit(s.detach()))
                    if not last:
                        with torch.no_grad():
                            last_out = outs[-1] if all_depths else self.readout(s, pos, None, mask)
                            preds.append(last_out.argmax(-1))
        logits = torch.stack(outs) if all_depths else outs[-1]
        if return_gates:
            preds.append(outs[-1].detach().argmax(-1))
            return logits, torch.stack(gates), torch.stack(preds)
        return logits

    def num_params(self, exclude_embedding: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if exclude_embedding:
            n -= self.embed.weight.numel()
            if not self.cfg.rope:
                n -= self.pos_embed.weight.numel()
        return n
