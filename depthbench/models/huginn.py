"""Huginn (``model_type`` "huginn_raven"): prelude, a recurrent core entered through a concat
adapter, and a coda, written here from its published architecture, with the parameter names of
its checkpoints (``RavenForCausalLM``).

    e   = prelude(sqrt(n_embd) * wte(idx))
    s_0 = 0                                           the original draws a random state unless
                                                      init_scale=0; depthbench names zeros
    s_k = core_block(adapter(cat([s_{k-1}, e])))      k = 1..K
    logits_k = wte^T ln_f(coda(ln_f(s_k)))            (lm_head when not tied)

Blocks are sandwich blocks, the norm after the residual add: ``x = norm_2(attn(norm_1(x)) + x)``,
``x = norm_4(mlp(norm_3(x)) + x)``; the MLP is gated (``fc`` split in two, ``proj(silu(a) * b)``);
attention takes one fused ``Wqkv``, adds ``qk_bias`` to queries and keys before interleaved
RoPE from the checkpoint's ``freqs_cis`` buffer. Only the adapter takes the config's ``bias``
(attention and MLP never have biases); the embedding scale is the config's
``init_values.embed_scale`` (sqrt(n_embd) where it is absent); the head dimension is
n_embd / n_heads. ``default_depth`` is ``mean_recurrence``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from depthbench.config import LoopShape
from depthbench.models.layers import RMSNorm, attend, rope_pairs
from depthbench.models.protocol import LoopedMixin, matmul_params


class HuginnAttention(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d, self.h, self.h_kv, self.dh = c["n_embd"], c["n_heads"], c["n_kv_heads"], c["head_dim"]
        self.Wqkv = nn.Linear(d, (self.h + 2 * self.h_kv) * self.dh, bias=False)
        if c["qk_bias"]:
            self.qk_bias = nn.Parameter(torch.zeros(2, 1, self.h, self.dh))
        self.proj = nn.Linear(self.h * self.dh, d, bias=False)

    def forward(self, x, rope, cache=None, mask=None):
        B, T, _ = x.shape
        q, k, v = self.Wqkv(x).split([self.h * self.dh, self.h_kv * self.dh, self.h_kv * self.dh], -1)
        q, k = q.view(B, T, self.h, self.dh), k.view(B, T, self.h_kv, self.dh)
        if hasattr(self, "qk_bias"):
            q, k = q + self.qk_bias[0], k + self.qk_bias[1]
        q, k = (rope_pairs(t.transpose(1, 2), *rope) for t in (q, k))       # (B, H, T, dh)
        v = v.view(B, T, self.h_kv, self.dh).transpose(1, 2)
        return self.proj(attend(q, k, v, cache, mask))


class HuginnMLP(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.fc = nn.Linear(c["n_embd"], 2 * c["intermediate_size"], bias=False)
        self.proj = nn.Linear(c["intermediate_size"], c["n_embd"], bias=False)

    def forward(self, x):
        a, b = self.fc(x).chunk(2, dim=-1)
        return self.proj(F.silu(a) * b)


class SandwichBlock(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d, eps = c["n_embd"], c["eps"]
        self.norm_1, self.norm_2 = RMSNorm(d, eps), RMSNorm(d, eps)
        self.norm_3, self.norm_4 = RMSNorm(d, eps), RMSNorm(d, eps)
        self.attn, self.mlp = HuginnAttention(c), HuginnMLP(c)

    def forward(self, x, rope, cache=None, mask=None):
        x = self.norm_2(self.attn(self.norm_1(x), rope, cache, mask) + x)
        return self.norm_4(self.mlp(self.norm_3(x)) + x)


class HuginnBody(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d = c["n_embd"]
        self.wte = nn.Embedding(c["vocab_size"], d)
        self.prelude = nn.ModuleList(SandwichBlock(c) for _ in range(c["n_prelude"]))
        self.adapter = nn.Linear(2 * d, d, bias=c["bias"])
        self.core_block = nn.ModuleList(SandwichBlock(c) for _ in range(c["n_core"]))
        self.coda = nn.ModuleList(SandwichBlock(c) for _ in range(c["n_coda"]))
        self.ln_f = RMSNorm(d, c["eps"])


class HuginnLM(LoopedMixin, nn.Module):
    kind = "huginn"

    def __init__(self, c: dict):
        super().__init__()
        self.c = dict(c)
        d, dh = c["n_embd"], c["head_dim"]
        self.transformer = HuginnBody(c)
        self.tied = c["tie_embeddings"]
        if not self.tied:
            self.lm_head = nn.Linear(d, c["vocab_size"], bias=False)
        # the rotary table, persistent as in the checkpoints ([..., 0] cos, [..., 1] sin of
        # position * rope_base^(-2i/head_dim)); the file's copy replaces this one where it has it
        inv = 1.0 / c["rope_base"] ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh)
        f = torch.outer(torch.arange(c["max_seq_len"], dtype=torch.float32), inv)
        self.register_buffer("freqs_cis", torch.stack([f.cos(), f.sin()], -1)[None, :, None])
        self.emb_scale = c.get("embed_scale") or math.sqrt(d)
        self.default_depth = c["default_depth"]
        t = self.transformer
        head = d * c["vocab_size"]
        self.shape = LoopShape(
            vocab_size=c["vocab_size"], d_model=d, n_heads=c["n_heads"], n_kv_heads=c["n_kv_heads"],
            head_dim=dh, n_prelude=len(t.prelude), n_core=len(t.core_block), n_coda=len(t.coda),
            max_seq_len=c["max_seq_len"], exit_gate=False,
            prelude_params=matmul_params(t.prelude),
            core_params=matmul_params([*t.core_block, t.adapter]),
            coda_params=matmul_params(t.coda), head_params=head)

    def optional_keys(self) -> tuple[str, ...]:
        return ("freqs_cis",)

    def _rope(self, pos):
        f = self.freqs_cis[0, :, 0][pos].float()                         # (.., T, dh/2, 2)
        if pos.dim() == 2:
            f = f[:, None]
        return f[..., 0], f[..., 1]

    def _run(self, blocks, x, pos, caches, mask):
        rope = self._rope(pos)
        for i, b in enumerate(blocks):
            x = b(x, rope, None if caches is None else caches[i], mask)
        return x

    def embed_prelude(self, idx, pos, caches=None, mask=None):
        return self._run(self.transformer.prelude, self.transformer.wte(idx) * self.emb_scale,
                         pos, caches, mask)

    def initial_state(self, e, pos):
        return torch.zeros_like(e)

    def core_step(self, s, e, pos, caches=None, mask=None):
        x = self.transformer.adapter(torch.cat([s, e], dim=-1))
        return self._run(self.transformer.core_block, x, pos, caches, mask)

    def readout(self, s, pos, caches=None, mask=None):
        t = self.transformer
        x = t.ln_f(self._run(t.coda, t.ln_f(s), pos, caches, mask))
        w = t.wte.weight if self.tied else self.lm_head.weight
        return F.linear(x, w).float()

    def latent(self, s):
        """The coda's input (``ln_f`` of the state): the original's ``latent_states``."""
        return self.transformer.ln_f(s)
