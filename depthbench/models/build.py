"""The model a ``ModelConfig`` describes: depthbench's ``LoopedTransformer`` (``arch`` looped) or
a port's modules (``arch`` ouro or huginn) shaped by the config, for training a public model's
architecture under depthbench's schedules (``train --model-from ouro:DIR``)."""

from __future__ import annotations

from depthbench.config import ModelConfig
from depthbench.models.config import (
    Fields,
    ModelSpecError,
    build,
    load_strict,
    parse_spec,
    read_config,
    read_weights,
)


def port_dict(cfg: ModelConfig) -> dict:
    """The port's own config (``models.config``'s keys) of a port-arch ModelConfig."""
    h = cfg.n_heads
    heads = {"n_heads": h, "n_kv_heads": cfg.n_kv_heads or h, "head_dim": cfg.d_model // h}
    common = {"vocab_size": cfg.vocab_size, "intermediate_size": cfg.ff, "eps": cfg.norm_eps,
              "max_seq_len": cfg.max_seq_len, "default_depth": 4, **heads}
    if cfg.arch == "ouro":
        return {**common, "hidden_size": cfg.d_model, "n_layers": cfg.n_core,
                "rope_theta": cfg.rope_base, "tie_word_embeddings": cfg.tie_embeddings,
                "exit_threshold": None}
    return {**common, "n_embd": cfg.d_model, "n_prelude": cfg.n_prelude, "n_core": cfg.n_core,
            "n_coda": cfg.n_coda, "rope_base": cfg.rope_base, "bias": False,
            "qk_bias": heads["n_kv_heads"] == h, "tie_embeddings": cfg.tie_embeddings,
            "embed_scale": cfg.embed_scale or None}


def build_model(cfg: ModelConfig):
    """A freshly initialized model of ``cfg`` (call under the run's seed). A port gets the
    config as ``cfg`` and its shape from it (no exit gate is trained)."""
    import torch
    if cfg.arch == "looped":
        from depthbench.models.looped import LoopedTransformer
        return LoopedTransformer(cfg)
    if cfg.arch == "ouro":
        from depthbench.models.ouro import OuroLM
        model = OuroLM(port_dict(cfg))
    else:
        from depthbench.models.huginn import HuginnLM
        model = HuginnLM(port_dict(cfg))
    with torch.no_grad():   # the house's init: N(0, init_std), norms at one
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                torch.nn.init.normal_(p, 0.0, cfg.init_std)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)
    model.cfg, model.shape = cfg, cfg.shape
    if cfg.init_from:   # the checkpoint's weights, read strictly (its own port, then copied)
        kind, path = parse_spec(cfg.init_from)
        src = build(kind, read_config(path), path)
        mine = port_dict(cfg)
        differ = [k for k in mine if k in src.c and k not in ("default_depth", "exit_threshold",
                                                               "max_seq_len")
                  and mine[k] != src.c[k]]
        if differ:   # its weights start only the architecture they were trained in
            k = differ[0]
            raise ModelSpecError(f"init_from {cfg.init_from}: the model's {k}={mine[k]} is not "
                                 f"the checkpoint's {k}={src.c[k]}; train its own architecture "
                                 "(train --model-from SPEC --from-weights) or drop init_from")
        load_strict(src, read_weights(path), path, optional=src.optional_keys())
        model.load_state_dict(src.state_dict())
    return model


def model_from(spec: str, weights: bool = False) -> dict:
    """The ModelConfig keys of a checkpoint folder's architecture (``--model-from``), and with
    ``weights`` its weights as the starting point (``init_from``)."""
    kind, path = parse_spec(spec)
    if kind not in ("ouro", "huginn"):
        raise ModelSpecError(f"--model-from takes ouro:DIR or huginn:DIR (got {spec!r}): training "
                             "builds the port's own modules")
    raw = read_config(path)
    c = build(kind, raw, path).c   # every field checked as loading checks it
    d = c["hidden_size" if kind == "ouro" else "n_embd"]
    if c["head_dim"] * c["n_heads"] != d:
        raise Fields(raw, path).bad("head_dim", f"x heads must equal the width {d} to train here")
    keys = {"arch": kind, "d_model": d, "n_heads": c["n_heads"], "n_kv_heads": c["n_kv_heads"],
            "d_ff": c["intermediate_size"], "norm_eps": c["eps"], "max_seq_len": c["max_seq_len"],
            "n_prelude": c.get("n_prelude", 0), "n_core": c.get("n_core", c.get("n_layers")),
            "n_coda": c.get("n_coda", 0),
            "rope_base": c["rope_theta" if kind == "ouro" else "rope_base"],
            "tie_embeddings": c["tie_word_embeddings" if kind == "ouro" else "tie_embeddings"],
            "vocab_size": c["vocab_size"] if weights else 0}
    if c.get("embed_scale"):
        keys["embed_scale"] = c["embed_scale"]
    if weights:
        keys["init_from"] = f"{kind}:{path.resolve()}"
    return keys
