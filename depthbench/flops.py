"""The analytical FLOP model (DESIGN.md section 5).

Counting multiply-adds as 2 FLOPs, per token of a sequence of length T:

    block params        P_b = 4 d^2 (qkv 3d^2, out d^2) + 2 d ff (MLP up and down); for another
                         architecture each stage's own matmul parameters (``of_shape``)
    attention per layer  4 T d (QK^T: 2 T d, AV: 2 T d; the full T x T square, as
                         FlopCounterMode and the PaLM/nanoGPT convention count it)
    non-looped           F0 = 2 (n_prelude + n_coda) P_b + 2 d V (head) + 4 T d (n_prelude + n_coda)
    one loop             Fr = 2 (n_core P_b + 2 d^2 [concat adapter]) + 4 T d n_core
    forward(K)           F0 + K Fr
    training step(K)     3 (F0 + g Fr) + (K - g) Fr,  g = K or n_grad_loops (truncated backprop):
                         backward costs twice the forward of the layers that get gradients;
                         loops run without autograd cost their forward only; with the exit
                         gate, + (K - 1) readouts (coda + head) for the gate's targets.
    serving ceiling      (F0 + K_max Fr) / (F0 + d_mean Fr)

Embedding lookups, norms and activations are not matmuls and are left out (a few % at most).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthbench.config import LoopShape, ModelConfig
from depthbench.schedules import Schedule


@dataclass(frozen=True)
class FlopModel:
    f0: float   # per-token forward FLOPs of everything outside the loop
    fr: float   # per-token forward FLOPs of one loop
    n_grad_loops: int
    readout: float  # per-token FLOPs of one extra coda + head readout (all-depth sweeps)
    gate_readouts: bool = False  # training reads out every loop to teach the exit gate

    @classmethod
    def of(cls, cfg: ModelConfig, seq_len: int) -> FlopModel:
        return cls.of_shape(cfg.shape, seq_len, cfg.n_grad_loops)

    @classmethod
    def of_shape(cls, shape: LoopShape, seq_len: int, n_grad_loops: int = 0) -> FlopModel:
        """From any looped model's shape (``model.shape``): each stage's own matmul parameters
        (SwiGLU, GQA, adapters and gates included), attention at the query width."""
        s, T = shape, seq_len
        attn = 4 * T * s.q_width
        f0 = 2 * (s.prelude_params + s.coda_params + s.head_params) + attn * (s.n_prelude + s.n_coda)
        fr = 2 * (s.core_params + s.gate_params) + attn * s.n_core
        readout = 2 * (s.coda_params + s.head_params) + attn * s.n_coda
        return cls(float(f0), float(fr), n_grad_loops, float(readout), s.exit_gate)

    def forward(self, k: int) -> float:
        return self.f0 + k * self.fr

    def sweep(self, k_max: int) -> float:
        """One forward that reads out every depth 1..k_max."""
        return self.forward(k_max) + (k_max - 1) * self.readout

    def train_step(self, k: int) -> float:
        g = min(k, self.n_grad_loops) if self.n_grad_loops else k
        # the gate's targets come from a forward-only readout after every earlier loop
        extra = (k - 1) * self.readout if self.gate_readouts else 0.0
        return 3 * (self.f0 + g * self.fr) + (k - g) * self.fr + extra

    def ceiling(self, k_max: int, mean_depth: float) -> float:
        return self.forward(k_max) / (self.f0 + mean_depth * self.fr)


def schedule_flops(fm: FlopModel, schedule: Schedule, steps: int, seed: int,
                   tokens_per_step: int) -> float:
    """Modeled training FLOPs of a whole run: the sum over its steps' depths."""
    counts = np.bincount(schedule.depths(steps, seed))                 # steps at each depth
    return float(sum(n * fm.train_step(k) for k, n in enumerate(counts.tolist()) if n)) * tokens_per_step


def match_steps(fm: FlopModel, schedule: Schedule, target_flops: float, total_hint: int,
                seed: int, tokens_per_step: int) -> int:
    """Steps for which ``schedule`` spends ``target_flops`` (the compute-matched run).

    The schedule's draws depend on the total step count (switch points, ramps), so the count
    is searched: the largest N whose modeled FLOPs do not exceed the target."""
    lo, hi = 1, max(2, total_hint)
    while schedule_flops(fm, schedule, hi, seed, tokens_per_step) < target_flops:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if schedule_flops(fm, schedule, mid, seed, tokens_per_step) <= target_flops:
            lo = mid
        else:
            hi = mid - 1
    return lo


def matched_run_steps(ref_fm: FlopModel, ref_schedule: Schedule, ref_steps: int, ref_seed: int,
                      ref_tokens_per_step: int, fm: FlopModel, schedule: Schedule, seed: int,
                      tokens_per_step: int) -> int:
    """The compute-matched run's steps: those at which ``schedule`` spends the modeled training
    FLOPs of the reference run (``ref_*``). ``train.matched_steps`` reads the reference from its
    run record; ``depthbench run`` plans it from the reference's stage before it exists."""
    target = schedule_flops(ref_fm, ref_schedule, ref_steps, ref_seed, ref_tokens_per_step)
    return match_steps(fm, schedule, target, ref_steps, seed, tokens_per_step)
