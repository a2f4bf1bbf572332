"""Building blocks the ports share: RMSNorm with the checkpoint's eps, the two RoPE layouts, and
attention over a KV cache with grouped-query heads."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) in float32, cast back, times ``weight``."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


def rope_angles(inv_freq: torch.Tensor, pos: torch.Tensor):
    """cos, sin of ``pos * inv_freq``: (T, dh/2) for (T,) positions, (B, 1, T, dh/2) for (B, T)."""
    f = pos.float()[..., None] * inv_freq                                # (.., T, dh/2)
    if pos.dim() == 2:
        f = f[:, None]
    return f.cos(), f.sin()


def rope_half(x: torch.Tensor, cos, sin) -> torch.Tensor:
    """Half-split RoPE (channel i rotates with channel i + dh/2), on (B, H, T, dh), in float32."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).type_as(x)


def rope_pairs(x: torch.Tensor, cos, sin) -> torch.Tensor:
    """Interleaved RoPE (channels 2i and 2i+1 rotate together), on (B, H, T, dh), in float32."""
    x2 = x.float().unflatten(-1, (-1, 2))
    a, b = x2[..., 0], x2[..., 1]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2).type_as(x)


def attend(q, k, v, cache=None, mask=None) -> torch.Tensor:
    """q: (B, H, T, dh); k, v: (B, H_kv, T, dh) of the new positions. The cache (if any) stores
    and returns the KV heads; query heads share them in groups (GQA). Causal where ``mask`` is
    None, else the boolean (B, 1, T, L) mask. Returns (B, T, H * dh)."""
    if cache is not None:
        k, v = cache.extend(k, v)                                          # (B, H_kv, L, dh)
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    if mask is None:
        assert k.shape[2] == q.shape[2], "a cached attention call needs an explicit mask"
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    B, H, T, dh = y.shape
    return y.transpose(1, 2).reshape(B, T, H * dh)
