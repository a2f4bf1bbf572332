"""Ouro (``model_type`` "ouro"): a fully looped decoder, written here from its published
architecture, with the parameter names of its checkpoints (``OuroForCausalLM``).

    s_0 = embed_tokens(idx)                              no scale, no prelude
    s_k = norm(layers(s_{k-1}))  for k = 1..K            all layers loop; the normed state is
    logits_k = lm_head(s_k),  gate_k = early_exit_gate(s_k)    carried and read out

Each layer: ``h = x + input_layernorm_2(attn(input_layernorm(x)))``, then
``h + post_attention_layernorm_2(mlp(post_attention_layernorm(h)))``; SwiGLU MLP; half-split
RoPE; grouped-query attention without biases. Ouro's loop count is the checkpoint's
``total_ut_steps`` (``default_depth``); any K >= 1 runs here.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from depthbench.config import LoopShape
from depthbench.models.layers import RMSNorm, attend, rope_angles, rope_half
from depthbench.models.protocol import LoopedMixin, matmul_params, padding_mask


class OuroAttention(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d, self.h, self.h_kv, self.dh = c["hidden_size"], c["n_heads"], c["n_kv_heads"], c["head_dim"]
        self.q_proj = nn.Linear(d, self.h * self.dh, bias=False)
        self.k_proj = nn.Linear(d, self.h_kv * self.dh, bias=False)
        self.v_proj = nn.Linear(d, self.h_kv * self.dh, bias=False)
        self.o_proj = nn.Linear(self.h * self.dh, d, bias=False)

    def forward(self, x, rope, cache=None, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.dh).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.h_kv, self.dh).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.h_kv, self.dh).transpose(1, 2)
        q, k = rope_half(q, *rope), rope_half(k, *rope)
        return self.o_proj(attend(q, k, v, cache, mask))


class OuroMLP(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d, ff = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class OuroLayer(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d, eps = c["hidden_size"], c["eps"]
        self.self_attn, self.mlp = OuroAttention(c), OuroMLP(c)
        self.input_layernorm, self.input_layernorm_2 = RMSNorm(d, eps), RMSNorm(d, eps)
        self.post_attention_layernorm = RMSNorm(d, eps)
        self.post_attention_layernorm_2 = RMSNorm(d, eps)

    def forward(self, x, rope, cache=None, mask=None):
        h = x + self.input_layernorm_2(self.self_attn(self.input_layernorm(x), rope, cache, mask))
        return h + self.post_attention_layernorm_2(self.mlp(self.post_attention_layernorm(h)))


class OuroBody(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d = c["hidden_size"]
        self.embed_tokens = nn.Embedding(c["vocab_size"], d)
        self.layers = nn.ModuleList(OuroLayer(c) for _ in range(c["n_layers"]))
        self.norm = RMSNorm(d, c["eps"])
        self.early_exit_gate = nn.Linear(d, 1)
        dh = c["head_dim"]
        inv = 1.0 / c["rope_theta"] ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh)
        self.register_buffer("inv_freq", inv, persistent=False)


class OuroLM(LoopedMixin, nn.Module):
    kind = "ouro"

    def __init__(self, c: dict):
        super().__init__()
        self.c = dict(c)
        self.model = OuroBody(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.default_depth = c["default_depth"]
        self.exit_threshold = c.get("exit_threshold")
        layers = list(self.model.layers)
        self.shape = LoopShape(
            vocab_size=c["vocab_size"], d_model=c["hidden_size"], n_heads=c["n_heads"],
            n_kv_heads=c["n_kv_heads"], head_dim=c["head_dim"], n_prelude=0, n_core=len(layers),
            n_coda=0, max_seq_len=c["max_seq_len"], exit_gate=True, prelude_params=0,
            core_params=matmul_params(layers), coda_params=0,
            head_params=matmul_params([self.lm_head]),
            gate_params=matmul_params([self.model.early_exit_gate]))

    def optional_keys(self) -> tuple[str, ...]:
        return ("lm_head.weight",) if self.c["tie_word_embeddings"] else ()

    def _rope(self, pos):
        return rope_angles(self.model.inv_freq, pos)

    def embed_prelude(self, idx, pos, caches=None, mask=None):
        return self.model.embed_tokens(idx)

    def initial_state(self, e, pos):
        return e

    def core_step(self, s, e, pos, caches=None, mask=None):
        rope = self._rope(pos)
        for i, layer in enumerate(self.model.layers):
            s = layer(s, rope, None if caches is None else caches[i], mask)
        return self.model.norm(s)

    def readout(self, s, pos, caches=None, mask=None):
        return self.lm_head(s)

    def gate_logit(self, s):
        return self.model.early_exit_gate(s).squeeze(-1)

    def _loops(self, idx, n_loops: int, attention_mask=None, logits_too: bool = True):
        """(B, T, K) exit distribution and (B, T, K, V) logits of every loop (None without
        ``logits_too``), from one pass: p_t = lambda_t prod_{s<t} (1 - lambda_s) for t < K, the
        rest at K."""
        T = idx.shape[1]
        pos, mask = self.positions(T, idx.device), padding_mask(attention_mask, T, idx.device)
        s = self.embed_prelude(idx, pos)
        survive, pdf, logits = torch.ones(idx.shape, device=idx.device), [], []
        for k in range(1, n_loops + 1):
            s = self.core_step(s, s, pos, None, mask)
            if logits_too:
                logits.append(self.readout(s, pos))
            if k < n_loops:
                lam = torch.sigmoid(self.gate_logit(s).float())
                pdf.append(lam * survive)
                survive = survive * (1 - lam)
        pdf.append(survive)
        return torch.stack(pdf, -1), torch.stack(logits, -2) if logits_too else None

    def exit_pdf(self, idx, n_loops: int, attention_mask=None) -> torch.Tensor:
        """(B, T, K) Ouro's exit distribution over loops 1..K from the gates."""
        return self._loops(idx, n_loops, attention_mask, logits_too=False)[0]

    def exit_logits(self, idx, n_loops: int, attention_mask=None, threshold: float | None = None):
        """Ouro's exit read-outs over ``n_loops`` loops: with ``threshold`` q, each token's logits
        at the first loop whose cumulative exit probability reaches q (the last loop if none),
        and that loop (B, T), 1-based; without, the exit-probability-weighted sum of every
        loop's logits (``use_weighted_exit``) and None."""
        pdf, logits = self._loops(idx, n_loops, attention_mask)            # (B,T,K), (B,T,K,V)
        if threshold is None:
            return (pdf[..., None] * logits).sum(-2), None
        hit = pdf.cumsum(-1) >= threshold
        hit[..., -1] = True
        depth = hit.float().argmax(-1)                                      # first loop reaching q
        pick = depth[..., None, None].expand(*depth.shape, 1, logits.shape[-1])
        return logits.gather(-2, pick)[..., 0, :], depth + 1
