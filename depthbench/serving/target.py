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

import torch

from depthbench.config import ServeConfig
from depthbench.errors import UserError
from depthbench.exits import replay_file
from depthbench.models.looped import LoopedTransformer
from depthbench.serving.workload import Request, workload


@dataclass(frozen=True)
class ServeTarget:
    model: LoopedTransformer
    requests: list[Request]
    seq_len: int    # the sequence length the FLOP ceiling counts a token's cost at
    source: str     # the model as the rows name it: a checkpoint path, a spec, random:PRESET
    run: str        # the rows' run and schedule (a ported or random model's: its source, None)
    schedule: str | None = None


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
    model.source = f"random:{cfg.random}"
    return model


def open_target(cfg: ServeConfig, rt, outputs: list[Path]) -> ServeTarget:
    """The model and workload ``cfg`` names, on ``rt.device``; UserError where the model cannot
    take the exit criterion or an output would land on a file or folder it reads (the run's own
    files, the dataset, a checkpoint folder, a replayed trace)."""
    from depthbench.fsio import refuse_over_inputs
    from depthbench.loading import parse_spec
    spec = parse_spec(cfg.model) if cfg.model else None   # parsed once, here
    run_dir = ds = None
    if cfg.run:
        from depthbench.checkpoint import open_run, run_dir_of, run_name
        model, ck, _, ds = open_run(cfg.run, None, cfg.data or None, rt.device)
        run_dir, seq_len = run_dir_of(cfg.run), ds.seq_len - 1
        names = (str(ck["path"]), run_name(cfg.run), ck.get("schedule"))
    else:
        model, ds = open_model(cfg, spec, rt)
        seq_len = cfg.prompt_len + (cfg.max_new_tokens or 32)
        names = (model.source, model.source, None)
    cfg.criterion.check_model(model.shape)
    inputs = [cfg.run, replay_file(cfg.exit)]
    refuse_over_inputs(outputs, run_dir, ds.path if ds else None, inputs,
                       checkpoint=spec and spec.folder)
    return ServeTarget(model, workload(cfg, ds, model.shape.vocab_size), seq_len, *names)


def open_model(cfg: ServeConfig, spec, rt):
    """``(model, text dataset or None)`` of a ``--model SPEC`` (``spec``, parsed) or ``--random
    PRESET``, with the ``--data`` it reads prompts from (tokenized the model's way)."""
    if cfg.data and not cfg.model:
        raise UserError("--data gives the workload of a RUN or a --model; --random prompts are "
                        "random tokens (leave --data out)")
    if spec is None:
        return random_model(cfg, rt), None
    from depthbench.loading import open_ported
    return open_ported(spec, cfg.data, rt.device)
