"""The Ouro and Huginn ports against the original code's outputs (tests/golden, and any further
set named by DEPTHBENCH_GOLDEN): logits at every stored depth, Ouro's gates and exit read-outs,
Huginn's latents, greedy generations through depthbench's loading path, its plain greedy loop
and its serving engine; and that the RMSNorm eps is read from the config, not defaulted."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import depthbench
from depthbench.exits import parse_exit
from depthbench.models.protocol import padding_mask
from depthbench.serving.engine import Engine
from depthbench.serving.scheduler import Request, Scheduler

HERE = Path(__file__).parent / "golden"
KIND = {"ouro": "ouro", "huginn_raven": "huginn"}


def golden_dirs():
    roots = [HERE] + ([Path(os.environ["DEPTHBENCH_GOLDEN"])] if os.environ.get("DEPTHBENCH_GOLDEN") else [])
    out = []
    for r in roots:
        for d in ([r] if (r / "config.json").is_file() else sorted(r.iterdir())):
            if (d / "logits.npz").is_file():
                out.append(d)
    return out


DIRS = golden_dirs()
# float32 agreement, relative to the compared tensor's scale: kernels of another CPU (AVX-512 or
# not) round differently, and the difference grows with the loops (Huginn's logits after 8 loops
# differ by 1.7e-5 at a scale of 4 on an AVX-512 EPYC); a porting error is orders larger
RTOL = 1e-5


def setup(d):
    kind = KIND[json.loads((d / "config.json").read_text())["model_type"]]
    model = depthbench.load_model(f"{kind}:{d}")
    inp = json.loads((d / "inputs.json").read_text())
    ids = torch.tensor(inp["input_ids"])
    mask = torch.tensor(inp["attention_mask"]) if "attention_mask" in inp else None
    valid = mask.bool() if mask is not None else torch.ones_like(ids, dtype=torch.bool)
    return kind, model, ids, mask, valid, np.load(d / "logits.npz")


def close(a, b, valid):
    b = torch.from_numpy(np.asarray(b)).float()
    diff = (a.float() - b)[valid].abs().max().item()
    scale = max(1.0, b[valid].abs().max().item())
    assert diff <= RTOL * scale, (diff, scale)


@pytest.mark.parametrize("d", DIRS, ids=lambda d: d.name)
def test_logits_at_every_stored_depth_forward_and_one_pass(d):
    _, model, ids, mask, valid, z = setup(d)
    depths = sorted(int(k.split("_")[1]) for k in z.files if k.startswith("depth_"))
    with torch.no_grad():
        for k in depths:
            close(model(ids, n_loops=k, attention_mask=mask), z[f"depth_{k}"], valid)
        for k, logits in model.readouts(ids, depths, attention_mask=mask):
            close(logits, z[f"depth_{k}"], valid)


@pytest.mark.parametrize("d", DIRS, ids=lambda d: d.name)
def test_per_loop_signals(d):
    """Ouro: each loop's gate logit, the exit distribution, the Q-exit's depths and logits and
    the exit-weighted logits; Huginn: the coda's input after each stored depth."""
    kind, model, ids, mask, valid, z = setup(d)
    T = ids.shape[1]
    pos, pm = model.positions(T, ids.device), padding_mask(mask, T, ids.device)
    with torch.no_grad():
        e = model.embed_prelude(ids, pos, None, pm)
        s = model.initial_state(e, pos)
        top = max(int(k.split("_")[1]) for k in z.files if k.startswith("depth_"))
        for k in range(1, top + 1):
            s = model.core_step(s, e, pos, None, pm)
            if f"gate_{k}" in z.files:
                close(model.gate_logit(s), z[f"gate_{k}"], valid)
            if f"latent_{k}" in z.files:
                close(model.latent(s), z[f"latent_{k}"], valid)
        if kind != "ouro":
            return
        K = z["exit_pdf"].shape[-1]
        close(model.exit_pdf(ids, K, mask), z["exit_pdf"], valid)
        for key in [k for k in z.files if k.startswith("qexit_") and not k.endswith("_depth")]:
            logits, depth = model.exit_logits(ids, K, mask, threshold=float(key.split("_")[1]))
            assert torch.equal(depth[valid], torch.from_numpy(z[f"{key}_depth"]).long()[valid])
            close(logits, z[key], valid)
        if "weighted_exit" in z.files:
            close(model.exit_logits(ids, K, mask)[0], z["weighted_exit"], valid)


@pytest.mark.parametrize("d", DIRS, ids=lambda d: d.name)
def test_greedy_generations_plain_and_through_the_serving_engine(d):
    _, model, *_ = setup(d)
    g = json.loads((d / "generate.json").read_text())
    K = model.default_depth
    for prompt, new in zip(g["prompts"], g["new_tokens"]):
        x = torch.tensor([prompt])
        with torch.no_grad():
            for _ in range(len(new)):
                x = torch.cat([x, model(x, n_loops=K)[:, -1].argmax(-1, keepdim=True)], 1)
        assert x[0, len(prompt):].tolist() == new
    reqs = [Request(i, p, len(n)) for i, (p, n) in enumerate(zip(g["prompts"], g["new_tokens"]))]
    for policy in ("depth_indexed", "last_exited"):
        eng = Engine(model, parse_exit(f"fixed:{K}", max_depth=K), policy, 2, 64)
        done = Scheduler(eng, "static", 2).run([q.fresh() for q in reqs])
        assert [q.output for q in done] == g["new_tokens"]


@pytest.mark.parametrize("d", DIRS, ids=lambda d: d.name)
def test_the_norm_eps_is_read_from_the_config(d, tmp_path):
    """A wrong eps moves logits by only ~1e-5: check that the port uses config.json's value."""
    from depthbench.models.layers import RMSNorm
    _, model, *_ = setup(d)
    cfg = json.loads((d / "config.json").read_text())
    eps = cfg.get("rms_norm_eps", cfg.get("norm_eps"))
    norms = [m for m in model.modules() if isinstance(m, RMSNorm)]
    assert norms and all(m.eps == eps for m in norms)
