"""GPU benchmarks for one prepared run on a lent GPU: many tiny members stacked per device, and
the paper-200m preset's training step in bf16, eager and compiled, as model-FLOPs utilization.

    python benchmarks/bench_gpu.py --data data/paper --json-out docs/benchmarks/gpu.json
    python benchmarks/bench_gpu.py --quick          # the same code on a CPU, a few steps

``stack``: M members of the tiny preset (one per seed: its own initialization and its own
batches), trained as one stacked model with ``torch.func``: the members' parameters stacked on a
leading dimension, ``vmap`` of ``grad`` over members, one AdamW over the stacked tensors (AdamW is
elementwise, so this is each member's own AdamW) and gradient clipping per member. Members x
steps per second is compared with one member trained by the trainer's own ``train_step``, side by
side in one process. Every member of a stacked step runs the same depth K (a schedule's depth
draw is shared by the members; ``tests/benchmarks/test_bench_gpu.py`` checks a member against its own
trainer run at equal K). Attention runs in its math form under ``vmap``: the fused kernels have
no batching rule on a CPU, so ``vmap`` would loop over the members there.

``mfu``: the paper-200m model (on the dataset given by ``--data``, or the paper preset's shape)
at the paper-200m batch, trained at K = 4 and 16 under the runtime's autocast, eager and with
its blocks compiled as the trainer compiles them: ms/step, tokens/s and modeled training FLOPs
per second as a fraction of a bf16 matmul peak measured in the same process (8192^3). Each
section keeps to its share of ``--budget-s`` and writes its rows as soon as it ends.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
import warnings
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_rows import Parser, count, json_out
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

import depthbench.models.looped as model_module
from depthbench.config import model_preset, train_preset
from depthbench.flops import FlopModel
from depthbench.models.looped import LoopedTransformer
from depthbench.runtime import setup
from depthbench.train.loop import make_optimizer, train_step


class _MathAttention:
    """``torch.nn.functional`` with ``scaled_dot_product_attention`` in its math form, which
    ``vmap`` batches as one product over every member."""

    def __getattr__(self, name):
        return getattr(F, name)

    @staticmethod
    def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False):
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if is_causal:
            L, S = q.shape[-2], k.shape[-2]
            s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1),
                              float("-inf"))
        elif attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
                else s + attn_mask
        return s.softmax(-1) @ v


@contextmanager
def math_attention(on: bool = True):
    if not on:
        yield
        return
    saved = model_module.F
    model_module.F = _MathAttention()
    try:
        yield
    finally:
        model_module.F = saved


class Stack:
    """M members of one model config, one per seed, trained as one stacked model."""

    def __init__(self, cfg, tcfg, seeds: list[int], rt, attention: str = "math"):
        members = []
        for s in seeds:
            torch.manual_seed(s)
            members.append(LoopedTransformer(cfg).to(rt.device).train())
        self.params, self.buffers = stack_module_state(members)
        self.base = copy.deepcopy(members[0]).to("meta")
        self.tcfg, self.rt, self.M, self.math = tcfg, rt, len(seeds), attention == "math"
        decay = [p for p in self.params.values() if p.dim() >= 3]   # a member's matrices
        no_decay = [p for p in self.params.values() if p.dim() < 3]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": tcfg.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=tcfg.lr, betas=(tcfg.beta1, tcfg.beta2), fused=rt.device.type == "cuda")

        def loss(p, b, x, y, K):
            with rt.autocast():
                logits = functional_call(self.base, (p, b), (x,), {"n_loops": K})
                return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        self.fn = vmap(grad_and_value(loss), in_dims=(0, 0, 0, 0, None))

    def step(self, x: torch.Tensor, y: torch.Tensor, K: int, lr: float) -> torch.Tensor:
        """One update of every member; x, y: (M, B, T). Returns the members' losses (M,)."""
        with math_attention(self.math):
            grads, losses = self.fn(self.params, self.buffers, x, y, K)
        if self.tcfg.grad_clip > 0:      # clip_grad_norm_'s rule, each member on its own norm
            sq = sum(g.float().pow(2).flatten(1).sum(1) for g in grads.values())
            coef = (self.tcfg.grad_clip / (sq.sqrt() + 1e-6)).clamp(max=1.0)
            for g in grads.values():
                g.mul_(coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))
        for name, p in self.params.items():
            p.grad = grads[name]
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return losses.detach()

    def member_state(self, i: int) -> dict:
        return {n: p[i].detach() for n, p in self.params.items()}


def _sync(rt):
    if rt.device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, rt, steps: int, warm: int = 2) -> float:
    for _ in range(warm):
        fn()
    _sync(rt)
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    _sync(rt)
    return (time.perf_counter() - t0) / steps


def stack_section(rt, members: list[int], K: int, steps: int, vocab: int, seq: int,
                  deadline: float) -> list[dict]:
    tcfg = train_preset("tiny")
    cfg = model_preset("tiny").replace(vocab_size=vocab, max_seq_len=max(64, seq))
    B = tcfg.batch_size
    gen = torch.Generator().manual_seed(0)

    def batch(M):
        t = torch.randint(0, vocab, (M, B, seq + 1), generator=gen).to(rt.device)
        return t[..., :-1], t[..., 1:]

    torch.manual_seed(0)
    one = LoopedTransformer(cfg).to(rt.device).train()
    opt = make_optimizer(one, tcfg, rt.device)
    x1, y1 = batch(1)
    single = {}
    for attn in ("sdpa", "math"):
        with math_attention(attn == "math"):
            single[attn] = _timed(lambda: train_step(one, one, opt, x1[0], y1[0], K, 1e-3, tcfg, rt),
                                  rt, steps)
    rows = [{"section": "stack", "members": 1, "how": f"train_step ({a})", "K": K, "batch": B,
             "seq": seq, "ms_per_step": 1e3 * s, "members_steps_per_s": 1 / s}
            for a, s in single.items()]
    base = 1 / single["sdpa"]
    for M in members:
        if time.perf_counter() > deadline:
            break
        for attn in ("math", "sdpa"):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    st = Stack(cfg, tcfg, list(range(M)), rt, attn)
                    x, y = batch(M)
                    s = _timed(partial(st.step, x, y, K, 1e-3), rt, steps)
                except torch.OutOfMemoryError:
                    rows.append({"section": "stack", "members": M, "how": f"stacked ({attn})",
                                 "K": K, "error": "out of memory"})
                    break
            fallback = any("batching rule" in str(w.message) for w in caught)
            rows.append({"section": "stack", "members": M, "how": f"stacked ({attn})", "K": K,
                         "batch": B, "seq": seq, "ms_per_step": 1e3 * s,
                         "members_steps_per_s": M / s, "vs_one_member": M / s / base,
                         "vmap_fallback": fallback})
            print(f"stack M={M:4d} {attn}: {1e3 * s:7.1f} ms/step, {M / s:8.1f} member-steps/s, "
                  f"{M / s / base:6.2f}x one member{' (vmap loops)' if fallback else ''}", flush=True)
            st = x = y = None
            if rt.device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def matmul_peak(rt, n: int, reps: int) -> float:
    dtype = rt.autocast_dtype or torch.float32
    a = torch.randn(n, n, device=rt.device, dtype=dtype)
    b = torch.randn(n, n, device=rt.device, dtype=dtype)
    return 2 * n**3 / _timed(lambda: a @ b, rt, reps, warm=3)


def mfu_section(rt, preset: str, vocab: int, seq: int, Ks: list[int], steps: int,
                deadline: float, peak_n: int) -> list[dict]:
    tcfg = train_preset(preset)
    cfg = model_preset(preset).replace(vocab_size=vocab)
    fm = FlopModel.of(cfg, seq)
    peak = matmul_peak(rt, peak_n, 10)
    gen = torch.Generator().manual_seed(0)
    t = torch.randint(0, vocab, (tcfg.batch_size, seq + 1), generator=gen).to(rt.device)
    rows = []
    for kind in ("eager", "compiled"):
        torch.manual_seed(0)
        m = LoopedTransformer(cfg).to(rt.device).train()
        if kind == "compiled":
            for b in list(m.prelude) + list(m.core) + list(m.coda):
                b.compile()
        opt = make_optimizer(m, tcfg, rt.device)
        for K in Ks:
            if time.perf_counter() > deadline:
                return rows
            t0 = time.perf_counter()
            train_step(m, m, opt, t[:, :-1], t[:, 1:], K, tcfg.lr, tcfg, rt)
            _sync(rt)
            first = time.perf_counter() - t0
            s = _timed(partial(train_step, m, m, opt, t[:, :-1], t[:, 1:], K, tcfg.lr, tcfg, rt),
                       rt, steps)
            tokens = tcfg.batch_size * seq
            r = {"section": "mfu", "preset": preset, "how": kind, "K": K, "batch": tcfg.batch_size,
                 "seq": seq, "params": sum(p.numel() for p in m.parameters()),
                 "dtype": str(rt.autocast_dtype or torch.float32).replace("torch.", ""),
                 "first_step_s": first, "ms_per_step": 1e3 * s, "tokens_per_s": tokens / s,
                 "model_flops_per_s": fm.train_step(K) * tokens / s, "matmul_peak_flops": peak}
            r["mfu"] = r["model_flops_per_s"] / peak
            rows.append(r)
            print(f"mfu {preset} {kind} K={K}: first step {first:.1f}s, {1e3 * s:.1f} ms/step, "
                  f"{r['tokens_per_s']:.0f} tok/s, {r['model_flops_per_s'] / 1e12:.1f} TFLOP/s, "
                  f"MFU {r['mfu']:.3f} of {peak / 1e12:.0f} TFLOP/s", flush=True)
        m = opt = None
        if rt.device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _dataset(text: str) -> Path:
    """An argparse type: a dataset directory that ``depthbench generate`` wrote."""
    from depthbench.data.synthetic import Dataset
    from depthbench.errors import UserError
    try:
        Dataset(text, verify=False)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return Path(text)


def _shape(data: Path | None, preset: str) -> tuple[int, int]:
    """(vocab size, training sequence length) of the dataset, or of the data preset's config."""
    if data is not None:
        from depthbench.data.synthetic import Dataset
        ds = Dataset(data, verify=False)
        return len(ds.vocab), ds.seq_len - 1
    from depthbench.data_gen import resolve_config
    return 2048, resolve_config(preset).seq_len - 1


def _counts(text: str) -> list[int]:
    """An argparse type: comma-separated counts of at least 1."""
    return [count()(part) for part in text.split(",")]


def main(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=_dataset, default=None, help="a generated dataset (its shape)")
    ap.add_argument("--quick", action="store_true", help="CPU check: tiny sizes, few steps")
    ap.add_argument("--members", type=_counts, default="1,8,32,128,512",
                    help="stack sizes, e.g. 1,8,32")
    ap.add_argument("--steps", type=count(), default=20)
    ap.add_argument("--budget-s", type=count(), default=300)
    ap.add_argument("--json-out", type=json_out, default=None)
    a = ap.parse_args(argv)
    rt = setup("auto", 1 if a.quick else 0)
    vocab, seq = _shape(a.data, "paper")
    start, rows = time.perf_counter(), []
    meta = {"device": rt.reason, "torch": torch.__version__}

    def keep():
        if a.json_out:
            Path(a.json_out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")

    members = a.members
    if a.quick:
        members, a.steps = [1, 4], 2
    rows += stack_section(rt, members, 4, a.steps, vocab, seq, start + 0.4 * a.budget_s)
    keep()
    preset = "tiny" if a.quick else "paper-200m"
    rows += mfu_section(rt, preset, vocab, seq, [1] if a.quick else [4, 16], max(2, a.steps // 2),
                        start + a.budget_s, 256 if a.quick else 8192)
    keep()
    return rows


if __name__ == "__main__":
    main()
