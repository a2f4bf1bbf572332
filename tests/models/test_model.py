"""The looped model against unrolled oracles, the FLOP model against FlopCounterMode."""

import copy
import json

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from depthbench.config import MODEL_PRESETS, ModelConfig, TrainConfig, model_preset
from depthbench.flops import FlopModel
from depthbench.models.looped import LoopedTransformer

VARIANTS = [
    dict(),
    dict(n_prelude=1, n_core=2, n_coda=1, injection="add", init_state="random"),
    dict(n_prelude=1, injection="none", init_state="prelude", norm="sandwich", rope=False),
    dict(n_core=2, tie_embeddings=True, exit_gate=True, n_grad_loops=2),
    dict(n_prelude=1, n_coda=1, injection="add", norm="residual"),
]


def make(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=37, d_model=32, n_heads=4, max_seq_len=32, **kw)
    return LoopedTransformer(cfg).eval()


def unrolled_forward(model, idx, K):
    """An explicit stack: K deep copies of the shared core (and adapter), no loop."""
    cores = [copy.deepcopy(model.core) for _ in range(K)]
    adapters = [copy.deepcopy(getattr(model, "adapter", None)) for _ in range(K)]
    pos = torch.arange(idx.shape[1])
    x = model.embed(idx)
    if not model.cfg.rope:
        x = x + model.pos_embed(pos)
    for blk in model.prelude:
        x = blk(x, model.rotary, pos)
    e = x
    s = {"zeros": lambda: torch.zeros_like(e), "prelude": lambda: e,
         "random": lambda: model.state_noise[pos].expand_as(e)}[model.cfg.init_state]()
    for core, adapter in zip(cores, adapters):
        kind = model.cfg.injection
        h = adapter(torch.cat([s, e], -1)) if kind == "concat" else s + e if kind == "add" else s
        for blk in core:
            h = blk(h, model.rotary, pos)
        s = h
    for blk in model.coda:
        s = blk(s, model.rotary, pos)
    return model.head(model.norm(s))


@pytest.mark.parametrize("kw", VARIANTS)
def test_n_loops_equals_an_unrolled_stack_of_shared_weights(kw):
    model = make(**kw)
    idx = torch.randint(0, 37, (3, 11))
    for K in (1, 3, 6):
        torch.testing.assert_close(model(idx, n_loops=K), unrolled_forward(model, idx, K),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", VARIANTS)
def test_all_depths_output_equals_separate_forwards(kw):
    model = make(**kw)
    idx = torch.randint(0, 37, (2, 9))
    all_k = model(idx, n_loops=5, all_depths=True)
    assert all_k.shape == (5, 2, 9, 37)
    for k in range(1, 6):
        torch.testing.assert_close(all_k[k - 1], model(idx, n_loops=k), rtol=1e-5, atol=1e-5)


def test_truncated_backprop_leaves_early_iterations_without_gradient():
    model = make(n_grad_loops=2).train()
    seen = []
    model.core[0].register_forward_hook(lambda m, i, o: seen.append(o.requires_grad))
    loss = model(torch.randint(0, 37, (2, 8)), n_loops=5).sum()
    assert seen == [False, False, False, True, True]
    loss.backward()
    assert model.core[0].attn.qkv.weight.grad is not None
    # all loops get gradients without truncation
    seen.clear()
    full = make(n_grad_loops=0).train()
    full.core[0].register_forward_hook(lambda m, i, o: seen.append(o.requires_grad))
    full(torch.randint(0, 37, (2, 8)), n_loops=5)
    assert seen == [True] * 5


def test_truncated_gradient_equals_gradient_through_a_detached_state():
    model = make(n_grad_loops=2).train()
    idx = torch.randint(0, 37, (2, 8))
    model(idx, n_loops=5).sum().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    pos = torch.arange(8)
    e = model.embed_prelude(idx, pos)
    s = model.initial_state(e, pos)
    with torch.no_grad():
        for _ in range(3):
            s = model.core_step(s, e, pos)
    for _ in range(2):
        s = model.core_step(s.detach() if _ == 0 else s, e, pos)
    model.readout(s, pos).sum().backward()
    for n, p in model.named_parameters():
        if n in got:
            torch.testing.assert_close(p.grad, got[n])


def test_configs_round_trip_through_json():
    for name in MODEL_PRESETS:
        cfg = model_preset(name)
        assert ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    t = TrainConfig(eval_depths=(1, 2), keep_steps=(5,))
    assert TrainConfig.from_dict(json.loads(json.dumps(t.to_dict()))) == t


def _counted(fn):
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn()
    return fc.get_total_flops()


@pytest.mark.parametrize("kw", [dict(), dict(n_prelude=1, n_core=2, n_coda=1, d_ff=48),
                                dict(n_prelude=1, n_coda=1, injection="add", n_grad_loops=3)])
@pytest.mark.parametrize("K", [1, 4, 7])
def test_flop_formulas_match_flop_counter(kw, K):
    model = make(**kw).train()
    B, T = 4, 24
    idx = torch.randint(0, 37, (B, T))
    fm = FlopModel.of(model.cfg, T)
    fwd = _counted(lambda: model(idx, n_loops=K))
    assert fwd == pytest.approx(fm.forward(K) * B * T, rel=0.02)

    def step():
        model(idx, n_loops=K).float().logsumexp(-1).sum().backward()
    assert _counted(step) == pytest.approx(fm.train_step(K) * B * T, rel=0.02)
    with torch.no_grad():
        sweep = _counted(lambda: model.eval()(idx, n_loops=K, all_depths=True))
    assert sweep == pytest.approx(fm.sweep(K) * B * T, rel=0.02)


@pytest.mark.parametrize("name,target", [("paper-200m", 200e6), ("paper-1b", 1.0e9),
                                         ("ouro-like", 1.4e9), ("huginn-like", 3.5e9)])
def test_paper_presets_have_the_advertised_size(name, target):
    cfg = model_preset(name)
    cfg = cfg.replace(vocab_size=cfg.vocab_size or 1547)
    with torch.device("meta"):
        model = LoopedTransformer(cfg)
    assert model.num_params() == pytest.approx(target, rel=0.15)


@pytest.mark.parametrize("K", [2, 5])
def test_flops_of_a_training_step_with_the_exit_gate(K):
    model = make(n_prelude=1, n_coda=1, exit_gate=True).train()
    B, T = 4, 24
    idx = torch.randint(0, 37, (B, T))
    fm = FlopModel.of(model.cfg, T)

    def step():  # what train.py does when the gate is on
        logits, gates, preds = model(idx, n_loops=K, return_gates=True)
        target = (preds == preds[-1]).float()
        loss = logits.logsumexp(-1).sum() + torch.nn.functional.binary_cross_entropy_with_logits(
            gates, target)
        loss.backward()
    assert _counted(step) == pytest.approx(fm.train_step(K) * B * T, rel=0.02)


@pytest.mark.parametrize("loops", [1, 4, 16])
def test_init_scales_residual_projections_by_the_loops_it_counts(loops):
    """init_loops counts the core's residual additions: the out- and down-projections' std is
    init_std / sqrt(2 (n_prelude + init_loops n_core + n_coda)), every other matrix init_std;
    the default (4) leaves the config's dict, so older records keep their keys."""
    cfg = ModelConfig(vocab_size=64, d_model=128, n_heads=4, n_prelude=1, n_core=2, n_coda=1,
                      init_loops=loops)
    torch.manual_seed(0)
    m = LoopedTransformer(cfg)
    want = cfg.init_std / (2 * (1 + loops * 2 + 1)) ** 0.5
    seen = 0
    for name, p in m.named_parameters():
        if p.dim() < 2:
            continue
        expect = want if name.endswith(("proj.weight", "down.weight")) else cfg.init_std
        assert abs(p.std().item() / expect - 1) < 0.05, (name, p.std().item(), expect)
        seen += name.endswith(("proj.weight", "down.weight"))
    assert seen >= 2 * 4
    assert ("init_loops" in cfg.to_dict()) == (loops != 4)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("bad", [0, -1, 5000, 2.5, "4"])
def test_init_loops_refuses_what_counts_no_loop(bad):
    from depthbench.config import ConfigError
    with pytest.raises(ConfigError, match="init_loops"):
        ModelConfig(init_loops=bad)


def naive_attention(attn, rotary, x, pos):
    """Attention written out per head: projections, per-head RMS norm, rotary as a complex
    rotation of each (first half, second half) pair by position x frequency, causal softmax."""
    B, T, C = x.shape
    H, dh = attn.n_heads, attn.head_dim
    q, k, v = (x @ w.T for w in attn.qkv.weight.split(C))
    out = torch.zeros(B, T, C)
    inv = 1.0 / 10000.0 ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh)
    for b in range(B):
        p = pos[b] if pos.dim() == 2 else pos
        angle = torch.polar(torch.ones(T, dh // 2), p[:, None].float() * inv)      # (T, dh/2)
        for h in range(H):
            qh, kh, vh = (t[b, :, h * dh:(h + 1) * dh] for t in (q, k, v))
            if attn.qk_norm:
                qh, kh = attn.q_norm(qh), attn.k_norm(kh)
            qh, kh = (torch.view_as_real(torch.complex(t[:, :dh // 2], t[:, dh // 2:]) * angle)
                      .permute(2, 0, 1).reshape(2, T, dh // 2) for t in (qh, kh))
            qh, kh = torch.cat([qh[0], qh[1]], -1), torch.cat([kh[0], kh[1]], -1)
            s = (qh @ kh.T) / dh ** 0.5
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
            out[b, :, h * dh:(h + 1) * dh] = s.softmax(-1) @ vh
    return out @ attn.proj.weight.T


@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("batched_pos", [False, True])
def test_attention_equals_a_per_head_oracle(qk_norm, batched_pos):
    """The block's attention (queries and keys rotated together, token-major) against the
    textbook per-head computation, with positions shared or per row (as the serving engine
    gives them, with an explicit causal mask)."""
    torch.manual_seed(0)
    model = LoopedTransformer(ModelConfig(vocab_size=37, d_model=32, n_heads=4, max_seq_len=32,
                                          qk_norm=qk_norm)).eval()
    attn = model.core[0].attn
    if qk_norm:   # weights other than one, so that a misplaced norm shows
        for n in (attn.q_norm, attn.k_norm):
            torch.nn.init.uniform_(n.weight, 0.5, 1.5)
    x = torch.randn(2, 9, 32)
    pos = torch.stack([torch.arange(3, 12), torch.arange(0, 9)]) if batched_pos else torch.arange(9)
    mask = torch.ones(9, 9, dtype=torch.bool).tril()[None, None].expand(2, 1, 9, 9) \
        if batched_pos else None
    got = attn(x, model.rotary, pos, None, mask)
    torch.testing.assert_close(got, naive_attention(attn, model.rotary, x, pos), rtol=1e-5, atol=1e-5)
