"""The stacked-members benchmark trains each member exactly as the trainer trains it alone."""

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "benchmarks") not in sys.path:   # the scripts import their shared helper
    sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_gpu import Stack, math_attention  # noqa: E402

from depthbench.config import model_preset, train_preset  # noqa: E402
from depthbench.models.looped import LoopedTransformer  # noqa: E402
from depthbench.runtime import setup  # noqa: E402
from depthbench.train.loop import make_optimizer, train_step  # noqa: E402


def test_math_attention_equals_the_fused_kernel():
    q, k, v = (torch.randn(2, 3, 7, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    import depthbench.models.looped as m
    with math_attention():
        mine = m.F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert m.F is torch.nn.functional
    torch.testing.assert_close(mine, fused, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("grad_clip", [1.0, 1e-3])     # the second clips every step
def test_each_stacked_member_trains_as_the_trainer_trains_it_alone(grad_clip):
    rt = setup("cpu", 1)
    tcfg = train_preset("tiny").replace(grad_clip=grad_clip, weight_decay=0.1)
    cfg = model_preset("tiny").replace(vocab_size=50, max_seq_len=16)
    seeds, steps, K = [3, 5, 8], 3, 2
    batches = torch.randint(0, 50, (steps, len(seeds), 4, 11), generator=torch.Generator().manual_seed(0))
    st = Stack(cfg, tcfg, seeds, rt)
    stacked = [st.step(b[..., :-1], b[..., 1:], K, 2e-3) for b in batches]
    for i, s in enumerate(seeds):
        torch.manual_seed(s)
        one = LoopedTransformer(cfg).train()
        opt = make_optimizer(one, tcfg, rt.device)
        for t, b in enumerate(batches):
            loss = train_step(one, one, opt, b[i, :, :-1], b[i, :, 1:], K, 2e-3, tcfg, rt)
            assert abs(loss.item() - stacked[t][i].item()) < 1e-5
        mine = st.member_state(i)
        for name, p in one.named_parameters():
            torch.testing.assert_close(mine[name], p.detach(), atol=2e-5, rtol=1e-4)
