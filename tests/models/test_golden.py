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
from depthbench.serving.batching import Batching
from depthbench.serving.engine import Engine
from depthbench.serving.scheduler import Request, Scheduler

HERE = Path(__file__).parents[1] / "golden"
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
        done = Scheduler(eng, "static", Batching(2)).run([q.fresh() for q in reqs])
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


def _first_miss(depths: list[int]) -> int:
    """The first generation step at which the KV layouts can differ: step k (k >= 1 runs the
    token step k-1 emitted, to exit depth ``depths[k]``; step 0 is the prefill) runs a loop that
    an earlier decoded token never reached. The steps before it read every position at every
    loop they run; ``len(depths)`` where there is no such step."""
    return next((k for k in range(2, len(depths)) if min(depths[1:k]) < depths[k]), len(depths))


# (mode, prefill chunk): every mode whose tokens exit, cdb also with chunked prefill
EXIT_RUNS = [("no_refill", 0), ("batch1", 0), ("cdb", 0), ("cdb", 3)]


def _serve_exits(model, spec: str, K: int, policy: str, prompt: list[int], mode: str, chunk: int):
    eng = Engine(model, parse_exit(spec, max_depth=K), policy, 1, 64, n_prompt_slots=chunk)
    q = Scheduler(eng, mode, Batching(1, prefill_chunk=chunk)).run([Request(0, list(prompt), 8)])[0]
    return q.output, q.depths


@pytest.mark.parametrize("d", [d for d in DIRS if (d / "generate_adaptive.json").is_file()],
                         ids=lambda d: d.name)
@pytest.mark.slow
def test_early_exit_generations_equal_the_original_adaptive_compute(d):
    """Huginn's own ``generate_with_adaptive_compute`` (batch 1, the prompt at full depth) under
    its argmax-stability and latent-diff criteria: depthbench's engine, in every mode whose
    tokens exit, emits the same tokens at the same exit depths. The original's cache leaves a
    token that exited before loop i out of the attention at loop i: ``skip_exited`` equals it
    everywhere; the other full layouts equal it up to the first token that runs deeper than an
    earlier decoded one (where the original masks and they read that token's exit state)."""
    _, model, *_ = setup(d)
    cases = json.loads((d / "generate_adaptive.json").read_text())["cases"]
    # the original counts argmax stability from 0 at the first loop, depthbench from 1
    spec = {"argmax-stability": lambda t: f"argmax:{int(t) + 1}", "latent-diff": lambda t: f"latent:{t}"}
    n = [_first_miss(c["exit_depths"]) for c in cases]
    assert any(k < len(c["exit_depths"]) for k, c in zip(n, cases))     # masking matters
    assert sum(min(c["exit_depths"][:k]) < c["num_steps"] for k, c in zip(n, cases)) >= 8
    for c, k in zip(cases, n):
        for policy in ("skip_exited", "depth_indexed", "last_exited"):
            for mode, chunk in EXIT_RUNS:
                got = _serve_exits(model, spec[c["criterion"]](c["exit_threshold"]), c["num_steps"],
                                   policy, c["prompt"], mode, chunk)
                upto = len(c["new_tokens"]) if policy == "skip_exited" else k   # the rest reads a skip
                assert (got[0][:upto], got[1][:upto]) == (c["new_tokens"][:upto], c["exit_depths"][:upto]), \
                    (c, policy, mode, chunk)


@pytest.mark.parametrize("d", [d for d in DIRS if (d / "generate_exit.json").is_file()],
                         ids=lambda d: d.name)
def test_q_exit_generations_equal_the_original_read_out(d):
    """Ouro's own generation with ``exit_threshold``: every token runs all loops and is read out
    at its Q-exit loop. depthbench's greedy loop over ``exit_logits`` gives the same tokens and
    read-out loops. (The serving engine's ``qexit`` stops a token's loops at its exit instead,
    so later tokens read less computed KV: an early exit the original never takes.)"""
    _, model, *_ = setup(d)
    K = model.default_depth
    for c in json.loads((d / "generate_exit.json").read_text())["cases"]:
        x, depths = torch.tensor([c["prompt"]]), []
        with torch.no_grad():
            for _ in c["new_tokens"]:
                logits, depth = model.exit_logits(x, K, None, threshold=c["exit_threshold"])
                depths.append(int(depth[0, -1]))
                x = torch.cat([x, logits[:, -1].argmax(-1, keepdim=True)], 1)
        assert (x[0, len(c["prompt"]):].tolist(), depths) == (c["new_tokens"], c["exit_depths"])
