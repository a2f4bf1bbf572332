"""What serve-bench serves: one model and one workload, opened once from a ``ServeConfig``.

A model comes from a training RUN (its checkpoint and dataset), a ``--model SPEC`` (a ported
checkpoint) or ``--random PRESET`` (initialized, untrained); the workload from the run's dataset,
a text dataset given with ``--data`` or random prompts. ``open_target`` opens both, refusing
outputs that would land on what it reads before anything is served, and returns a
``ServeTarget``: the model, its requests, the sequence length its FLOPs are counted at and the
names its rows carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from depthbench.config import ServeConfig
from depthbench.errors import UserError
from depthbench.exits import replay_file
from depthbench.models.looped import LoopedTransformer
from depthbench.serving.compare import random_workload
from depthbench.serving.scheduler import Request


@dataclass(frozen=True)
class ServeTarget:
    model: LoopedTransformer
    requests: list[Request]
    seq_len: int    # the sequence length the FLOP ceiling counts a token's cost at
    source: str     # the model as the rows name it: a checkpoint path, a spec, random:PRESET
    run: str        # the rows' run and schedule (a ported or random model's: its source, None)
    schedule: str | None = None


def dataset_workload(ds, n: int, max_new_tokens: int, seed: int,
                     stop_at_eos: bool = False) -> list[Request]:
    """Prompts ``<bos> NAME [key]`` (the held-out first attribute) from eval_reordered; the
    model generates the value and goes on with further attributes, each request the same
    number of tokens in every mode unless ``stop_at_eos``."""
    s = ds.split("eval_reordered")
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(s), size=n, replace=n > len(s))
    reqs = []
    for i, r in enumerate(rows):
        tok = np.asarray(s.tokens[r], dtype=np.int64)
        order = np.asarray(s.order[r : r + 1], dtype=np.int64)
        k = int(ds.key_positions(order)[0, 0])
        L = int(ds.value_tokens[order[0, 0]])
        new = max_new_tokens or (len(tok) - k - 1)
        reqs.append(Request(i, tok[: k + 1].tolist(), new, target=tok[k + 1 : k + 1 + L].tolist(),
                            stop_token=ds.vocab.eos if stop_at_eos else None))
    return reqs


def text_workload(ds, n: int, prompt_len: int, max_new_tokens: int, seed: int,
                  stop_at_eos: bool = False) -> list[Request]:
    """A text run's prompts: ``prompt_len`` tokens of the validation split at seeded offsets;
    each request generates ``max_new_tokens`` (32 if 0), or stops at end-of-text where
    ``stop_at_eos``."""
    tokens = ds.tokens["validation"]
    if len(tokens) < prompt_len + 1:
        raise UserError(f"the text dataset's validation split has {len(tokens)} tokens, fewer "
                        f"than one prompt of --prompt-len {prompt_len}; lower --prompt-len")
    starts = np.random.default_rng([seed, 2]).integers(0, len(tokens) - prompt_len + 1, size=n)
    return [Request(i, np.asarray(tokens[a:a + prompt_len], dtype=np.int64).tolist(),
                    max_new_tokens or 32, stop_token=ds.vocab.eos if stop_at_eos else None)
            for i, a in enumerate(starts)]


def dataset_requests(ds, cfg: ServeConfig) -> list[Request]:
    """A dataset's workload: a text dataset's validation prompts, a person dataset's held-out
    questions."""
    if ds.kind == "text":
        return text_workload(ds, cfg.requests, cfg.prompt_len, cfg.max_new_tokens, cfg.seed,
                             cfg.stop_at_eos)
    return dataset_workload(ds, cfg.requests, cfg.max_new_tokens, cfg.seed, cfg.stop_at_eos)


def random_model(cfg: ServeConfig, rt) -> LoopedTransformer:
    """``--random PRESET``: the preset (under ``--set``) initialized from ``cfg.seed``."""
    from depthbench.config import model_preset
    mcfg = model_preset(cfg.random).replace(**cfg.model_set)
    if mcfg.vocab_size == 0:
        mcfg = mcfg.replace(vocab_size=256)
    torch.manual_seed(cfg.seed)
    with torch.device(rt.device):
        model = LoopedTransformer(mcfg)
    if rt.autocast_dtype is not None:
        model = model.to(rt.autocast_dtype)
    return model


def open_target(cfg: ServeConfig, rt, outputs: list[Path]) -> ServeTarget:
    """The model and workload ``cfg`` names, on ``rt.device``; UserError where an output would
    land on a file or folder it reads (the run's own files, the dataset, a checkpoint folder,
    a replayed trace)."""
    from depthbench.fsio import refuse_over_inputs
    replay = replay_file(cfg.exit)
    if cfg.run:
        from depthbench.checkpoint import open_run, run_dir_of, run_name
        model, ck, _, ds = open_run(cfg.run, None, cfg.data or None, rt.device)
        refuse_over_inputs(outputs, run_dir_of(cfg.run), ds.path, [cfg.run, replay])
        return ServeTarget(model, dataset_requests(ds, cfg), ds.seq_len - 1, str(ck["path"]),
                           run_name(cfg.run), ck.get("schedule"))
    if cfg.data and not cfg.model:
        raise UserError("--data gives the workload of a RUN or a --model; --random prompts are "
                        "random tokens (leave --data out)")
    if cfg.model:
        from depthbench.loading import load_model, refuse_inside
        refuse_inside(outputs, cfg.model)
        model = load_model(cfg.model, rt.device)
        source = model.source
    else:
        model, source = random_model(cfg, rt), f"random:{cfg.random}"
    if cfg.data:   # prompts from a text dataset tokenized the model's way
        from depthbench.data.synthetic import open_dataset
        from depthbench.loading import check_text_dataset
        ds = open_dataset(cfg.data)
        check_text_dataset(model, ds, cfg.model)
        requests = text_workload(ds, cfg.requests, cfg.prompt_len, cfg.max_new_tokens, cfg.seed,
                                 cfg.stop_at_eos)
    else:
        requests = random_workload(model.shape.vocab_size, cfg.requests, cfg.prompt_len,
                                   cfg.max_new_tokens, cfg.seed, cfg.length_spread)
    refuse_over_inputs(outputs, None, cfg.data or None, [replay])
    return ServeTarget(model, requests, cfg.prompt_len + (cfg.max_new_tokens or 32), source, source)
