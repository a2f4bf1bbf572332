"""The looped-model protocol's conformance suite, run on every implementation: depthbench's own
``LoopedTransformer`` (three shapes), the Ouro and Huginn ports (the golden checkpoints, and
random grouped-query variants built from a config), and transformers' Dory through its wrapper
(where transformers is installed). Each must: read out every depth in one pass as its forwards
do; decode from the KV cache as the full forward does; serve the same tokens under every
batching and KV layout; give a row the same logits in any batch and behind any padding; and
have a FLOP model that FlopCounterMode confirms."""

import json
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import depthbench
from depthbench.config import ModelConfig
from depthbench.exits import parse_exit
from depthbench.flops import FlopModel
from depthbench.models.config import build
from depthbench.models.looped import LoopedTransformer
from depthbench.serving.batching import Batching
from depthbench.serving.engine import Engine
from depthbench.serving.kvcache import KV_POLICIES
from depthbench.serving.scheduler import Request, Scheduler

GOLDEN = Path(__file__).parents[1] / "golden"
ATOL = 2e-5


def _ours(**kw):
    def make():
        torch.manual_seed(0)
        return LoopedTransformer(ModelConfig(vocab_size=96, d_model=32, n_heads=4, max_seq_len=64,
                                             **kw)).eval()
    return make


def _port(kind, **changes):
    """A port with random weights from the golden config with ``changes`` (e.g. GQA)."""
    def make():
        cfg = {**json.loads((GOLDEN / kind / "config.json").read_text()), **changes}
        torch.manual_seed(1)
        m = build(kind, cfg, GOLDEN / kind)
        with torch.no_grad():
            for p in m.parameters():   # O(1) activations, every norm weight matters
                p.copy_(torch.randn_like(p) / (p.shape[-1] ** 0.5 if p.dim() > 1 else 4) +
                        (1.0 if p.dim() == 1 else 0.0))
        m.source = f"{kind}:random"
        return m.eval()
    return make


def _hf_dory():
    pytest.importorskip("transformers", minversion="5.24")
    from depthbench.models.hf import tiny_dory
    return tiny_dory(seed=0)


IMPLS = {
    "looped": _ours(),
    "looped-prelude-coda": _ours(n_prelude=1, n_core=2, n_coda=1, init_state="random"),
    "looped-gate-sandwich": _ours(n_prelude=1, injection="none", init_state="prelude",
                                  norm="sandwich", exit_gate=True),
    "ouro": lambda: depthbench.load_model(f"ouro:{GOLDEN / 'ouro'}"),
    "huginn": lambda: depthbench.load_model(f"huginn:{GOLDEN / 'huginn'}"),
    "ouro-gqa": _port("ouro", num_key_value_heads=2),
    "ouro-mqa-tied": _port("ouro", num_key_value_heads=1, tie_word_embeddings=True),
    "huginn-gqa": _port("huginn", num_key_value_heads=2, qk_bias=False, n_layers_in_coda=2),
    "huginn-bias-untied": _port("huginn", bias=True, tie_embeddings=False, n_layers_in_prelude=0),
    "dory": _hf_dory,
}
SERVES = [k for k in IMPLS if k != "dory"]   # Dory's wrapper runs the evaluators, not the engine


@pytest.fixture(scope="module", params=list(IMPLS))
def impl(request):
    return request.param, IMPLS[request.param]()


@pytest.fixture(scope="module", params=SERVES)
def served(request):
    return request.param, IMPLS[request.param]()


def ids(V, B=3, T=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, min(V, 96), (B, T), generator=g)


def test_one_pass_readouts_equal_forwards_at_every_depth(impl):
    _, m = impl
    x = ids(m.shape.vocab_size)
    with torch.no_grad():
        got = dict(m.readouts(x, [1, 2, 3, 5, 6]))
        for k in (1, 2, 3, 5, 6):
            assert got[k].shape == (*x.shape, m.shape.vocab_size)
            torch.testing.assert_close(got[k], m(x, n_loops=k), rtol=0, atol=ATOL)


def test_a_row_reads_the_same_in_any_batch_and_behind_padding(impl):
    name, m = impl
    x = ids(m.shape.vocab_size, B=3, T=9)
    with torch.no_grad():
        full = m(x, n_loops=3)
        for b in range(3):
            torch.testing.assert_close(m(x[b:b + 1], n_loops=3)[0], full[b], rtol=0, atol=ATOL)
        # right padding: what a causal model never reads
        pad = torch.cat([x[:1, :6], torch.zeros(1, 3, dtype=torch.long)], 1)
        torch.testing.assert_close(m(pad, n_loops=3)[0, :6], m(x[:1, :6], n_loops=3)[0],
                                   rtol=0, atol=ATOL)
        # left padding behind an attention mask: for models whose positions enter only
        # relatively (rotary; not learned positions or position-indexed initial noise)
        if name.startswith("looped") and (not m.cfg.rope or m.cfg.init_state == "random"):
            return
        left = torch.cat([torch.zeros(1, 3, dtype=torch.long), x[:1, :6]], 1)
        mask = torch.tensor([[0, 0, 0] + [1] * 6])
        torch.testing.assert_close(m(left, n_loops=3, attention_mask=mask)[0, 3:],
                                   m(x[:1, :6], n_loops=3)[0], rtol=0, atol=ATOL)


def test_flop_model_matches_the_flop_counter(impl):
    _, m = impl
    x = ids(m.shape.vocab_size, B=2, T=12)
    fm = FlopModel.of_shape(m.shape, 12)
    for K in (1, 3):
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
            m(x, n_loops=K)
        assert fc.get_total_flops() == pytest.approx(fm.forward(K) * x.numel(), rel=0.02)


def _workload(V, n=5, new=5):
    g = torch.Generator().manual_seed(3)
    return [Request(i, torch.randint(3, min(V, 96), (4 + i % 3,), generator=g).tolist(), new)
            for i in range(n)]


def _greedy(m, prompt, n, K):
    x = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(n):
            x = torch.cat([x, m(x, n_loops=K)[:, -1].argmax(-1, keepdim=True)], 1)
    return x[0, len(prompt):].tolist()


def test_kv_cached_decode_equals_the_full_forward(served):
    """Step by step, the cached read-out of each decoded token against the full forward over
    the whole context, for the layouts that keep every loop's KV (depth_indexed, last_exited)."""
    _, m = served
    prompt = [5, 9, 11, 3, 7]
    for policy in ("depth_indexed", "last_exited"):
        eng = Engine(m, parse_exit("fixed:3", max_depth=3), policy, 2, 64)
        toks, rows = [eng.prefill([0], [prompt])[0]], [0]
        for _ in range(4):
            eng.start(rows, [toks[-1]], [3])
            for _ in range(3):
                exited = eng.core(rows)
            with torch.no_grad():
                full = m(torch.tensor([prompt + toks]), n_loops=3)[0, -1]
            r = torch.tensor(rows)
            mask, L = eng._decode_mask(rows, eng.pos[r])
            cached = eng._readout(eng.S[r], r, eng.pos[r], mask, L)[0]
            torch.testing.assert_close(cached, full, rtol=0, atol=1e-4)
            tok, _ = eng.finish(exited)
            toks.append(tok[0])
        assert toks == _greedy(m, prompt, 5, 3)


def test_static_serving_equals_greedy_generation(served):
    _, m = served
    reqs = _workload(m.shape.vocab_size)
    eng = Engine(m, parse_exit("latent:0.3", max_depth=4), "depth_indexed", 3, 64)
    for q in Scheduler(eng, "static", Batching(3)).run([q.fresh() for q in reqs]):
        assert q.output == _greedy(m, q.prompt, 5, 4)


@pytest.mark.slow
@pytest.mark.parametrize("policy", KV_POLICIES)
def test_every_batching_mode_serves_the_same_tokens_under_every_kv_layout(served, policy):
    _, m = served
    reqs = _workload(m.shape.vocab_size, n=6)
    spec = "gate:0.5" if m.shape.exit_gate else "latent:0.3"
    outs = {}
    for mode in ("batch1", "no_refill", "cdb"):
        eng = Engine(m, parse_exit(spec, max_depth=4), policy, 3, 64)
        done = Scheduler(eng, mode, Batching(3)).run([q.fresh() for q in reqs])
        outs[mode] = [(q.output, q.depths) for q in done]
    assert outs["cdb"] == outs["batch1"] == outs["no_refill"]


def test_the_kv_store_holds_the_kv_heads_only(served):
    _, m = served
    eng = Engine(m, parse_exit("fixed:2", max_depth=2), "depth_indexed", 2, 32)
    s = m.shape
    assert eng.kv.k.shape[-2:] == (s.n_kv_heads, s.head_dim)
    assert eng.kv.n_slots == s.n_prelude + 2 * s.n_core + s.n_coda


def test_the_hf_wrapper_loads_what_save_pretrained_wrote_and_reads_strictly(tmp_path):
    pytest.importorskip("transformers", minversion="5.24")
    from depthbench.loading import ModelSpecError
    m = _hf_dory()
    m.hf.save_pretrained(tmp_path / "dory")
    back = depthbench.load_model(f"hf:{tmp_path / 'dory'}")
    x = ids(96)
    with torch.no_grad():
        for k in (1, 3, 5):
            torch.testing.assert_close(back(x, n_loops=k), m(x, n_loops=k), rtol=0, atol=0)
    assert back.default_depth == 3 and back.shape == m.shape
    from safetensors.torch import load_file, save_file
    f = next((tmp_path / "dory").glob("*.safetensors"))
    w = load_file(str(f))
    w.pop(sorted(w)[0])
    save_file(w, str(f), metadata={"format": "pt"})
    with pytest.raises(ModelSpecError, match="lacks"):
        depthbench.load_model(f"hf:{tmp_path / 'dory'}")
