"""The looped-model protocol: what every evaluator and the serving engine call on a model.

A looped model maps token ids to logits at any number of loops K::

    e   = embed_prelude(idx, pos)          embedding and the unshared layers before the loop
    s_0 = initial_state(e, pos)
    s_k = core_step(s_{k-1}, e, pos)       one loop of the shared layers (any injection of e)
    logits_k = readout(s_k, pos)           coda, final norm and head
    gate_logit(s_k)                        an exit gate's logit, where the model has one

``forward(idx, n_loops, attention_mask=None)`` and ``readouts(idx, depths, attention_mask=None)``
(every depth of ``depths`` from one pass of max(depths) loops) are built from those pieces by
``LoopedMixin``; the pieces take ``caches`` (one object per layer with ``extend(k, v) -> (k_all,
v_all)``, keys and values of shape (B, n_kv_heads, T, head_dim)) and an explicit boolean
``mask`` (B, 1, T, L), so the serving engine runs the same modules on KV-cached decode steps.
``shape`` (a ``LoopShape``) gives the stage layer counts, attention widths and each stage's
matmul parameters, from which the FLOP ceilings, serving bounds and KV sizes follow.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import torch
import torch.nn as nn

from depthbench.config import LoopShape


@runtime_checkable
class LoopedModel(Protocol):
    shape: LoopShape

    def __call__(self, idx: torch.Tensor, n_loops: int, **kw) -> torch.Tensor: ...

    def readouts(self, idx: torch.Tensor, depths, attention_mask=None) -> Iterator: ...

    def positions(self, T: int, device) -> torch.Tensor: ...

    def embed_prelude(self, idx, pos, caches=None, mask=None) -> torch.Tensor: ...

    def initial_state(self, e, pos) -> torch.Tensor: ...

    def core_step(self, s, e, pos, caches=None, mask=None) -> torch.Tensor: ...

    def readout(self, s, pos, caches=None, mask=None) -> torch.Tensor: ...

    def gate_logit(self, s) -> torch.Tensor: ...


def padding_mask(attention_mask: torch.Tensor | None, T: int, device) -> torch.Tensor | None:
    """The boolean attention mask (B, 1, T, T) of a (B, T) padding mask (1 = a real token):
    causal, and no query reads a padded key. A padded query reads itself only, so that no
    attention row is empty (an empty row is NaN, and NaN in a padded position's values would
    leak into every later loop through the zero attention weight times NaN)."""
    if attention_mask is None:
        return None
    am = attention_mask.to(device=device, dtype=torch.bool)
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    eye = torch.eye(T, dtype=torch.bool, device=device)
    return (causal & (am[:, None, None, :] | eye))                      # (B, 1, T, T)


class LoopedMixin:
    """``forward`` and ``readouts`` of a looped model from its pieces (see the module)."""

    def positions(self, T: int, device) -> torch.Tensor:
        return torch.arange(T, device=device)

    def _check_depth(self, n: int) -> None:
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"n_loops must be an integer >= 1 (got {n!r})")

    def readouts(self, idx: torch.Tensor, depths, attention_mask=None):
        """(k, logits at depth k) for every k of ``depths`` in increasing order, from one pass
        of max(depths) loops: the state after k loops is the depth-k model's."""
        want = set(depths)
        for k in want:
            self._check_depth(k)
        T = idx.shape[1]
        pos, mask = self.positions(T, idx.device), padding_mask(attention_mask, T, idx.device)
        e = self.embed_prelude(idx, pos, None, mask)
        s = self.initial_state(e, pos)
        for k in range(1, max(want) + 1):
            s = self.core_step(s, e, pos, None, mask)
            if k in want:
                yield k, self.readout(s, pos, None, mask)

    def forward(self, idx: torch.Tensor, n_loops: int, attention_mask=None) -> torch.Tensor:
        """idx: (B, T) token ids; (B, T, V) logits after ``n_loops`` loops."""
        self._check_depth(n_loops)
        return next(self.readouts(idx, [n_loops], attention_mask))[1]

    def gate_logit(self, s):
        raise NotImplementedError(f"{type(self).__name__} has no exit gate")


def matmul_params(modules) -> int:
    """Multiply-adds per token of the linear layers in ``modules`` (2-D weights, embeddings
    excluded): what the FLOP model counts."""
    n = 0
    for m in modules:
        for sub in m.modules():
            if isinstance(sub, nn.Linear):
                n += sub.weight.numel()
    return n
