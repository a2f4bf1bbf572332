"""Reading a port's ``config.json``: each field the port needs, of its type and range, and a
clear refusal of the features the port does not implement (instead of wrong numbers)."""

from __future__ import annotations

from pathlib import Path

from depthbench.models.load import ModelSpecError

MODEL_TYPES = {"ouro": ("ouro",), "huginn": ("huginn_raven",)}


class Fields:
    def __init__(self, c: dict, path: Path):
        self.c, self.f = c, path / "config.json"

    def bad(self, key: str, why: str):
        return ModelSpecError(f"{self.f}: {key} {why}; fix config.json")

    def int(self, key: str, default=None, lo: int = 1) -> int:
        v = self.c.get(key, default)
        if v is None:
            raise self.bad(key, "is missing")
        if type(v) is not int or v < lo:
            raise self.bad(key, f"must be an integer >= {lo} (got {v!r})")
        return v

    def num(self, key: str, default=None) -> float:
        v = self.c.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            raise self.bad(key, f"must be a positive number (got {v!r})")
        return float(v)

    def flag(self, key: str, default: bool) -> bool:
        v = self.c.get(key, default)
        if not isinstance(v, bool):
            raise self.bad(key, f"must be true or false (got {v!r})")
        return v

    def only(self, key: str, allowed, default=None) -> None:
        v = self.c.get(key, default)
        if v not in allowed:
            raise ModelSpecError(f"{self.f}: {key}={v!r} is not supported by depthbench's port "
                                 f"(it implements {', '.join(map(repr, allowed))})")


def _heads(F: Fields, d: int, heads: str, kv: str) -> dict:
    h = F.int(heads)
    n_kv = F.int(kv, h)
    dh = F.int("head_dim", d // h if d % h == 0 else None)
    if h % n_kv:
        raise F.bad(kv, f"must divide {heads}={h} (got {n_kv})")
    if dh % 2:
        raise F.bad("head_dim", f"must be even for rotary positions (got {dh})")
    return {"n_heads": h, "n_kv_heads": n_kv, "head_dim": dh}


def ouro_config(F: Fields) -> dict:
    d = F.int("hidden_size")
    F.only("hidden_act", ("silu",), "silu")
    F.only("rope_scaling", (None,))
    F.only("use_sliding_window", (False,), False)
    F.only("attention_bias", (False,), False)
    theta = F.c.get("rope_theta", (F.c.get("rope_parameters") or {}).get("rope_theta"))
    c = {"hidden_size": d, "vocab_size": F.int("vocab_size"), "n_layers": F.int("num_hidden_layers"),
         "intermediate_size": F.int("intermediate_size"), "eps": F.num("rms_norm_eps"),
         "rope_theta": F.num("rope_theta", theta), "max_seq_len": F.int("max_position_embeddings"),
         "tie_word_embeddings": F.flag("tie_word_embeddings", False),
         "default_depth": F.int("total_ut_steps", 4), **_heads(F, d, "num_attention_heads",
                                                                 "num_key_value_heads")}
    t = F.c.get("early_exit_threshold")
    c["exit_threshold"] = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
    return c


def huginn_config(F: Fields) -> dict:
    d = F.int("n_embd")
    F.only("injection_type", ("linear",), "linear")
    F.only("block_class_name", ("SandwichBlock",), "SandwichBlock")
    F.only("mlp_class_name", ("GatedMLP",), "GatedMLP")
    F.only("norm_class_name", ("RMSNorm_llama",), "RMSNorm_llama")
    F.only("nonlin_name", ("SiLU",), "SiLU")
    F.only("test_time_noise", (0, 0.0), 0)
    c = {"n_embd": d, "vocab_size": F.int("padded_vocab_size", F.c.get("vocab_size")),
         "n_prelude": F.int("n_layers_in_prelude", lo=0), "n_core": F.int("n_layers_in_recurrent_block"),
         "n_coda": F.int("n_layers_in_coda", lo=0), "intermediate_size": F.int("intermediate_size"),
         "eps": F.num("norm_eps"), "rope_base": F.num("rope_base"), "max_seq_len": F.int("block_size"),
         "bias": F.flag("bias", False), "qk_bias": F.flag("qk_bias", False),
         "tie_embeddings": F.flag("tie_embeddings", True),
         "default_depth": F.int("mean_recurrence", 32), **_heads(F, d, "n_heads", "num_key_value_heads")}
    if c["qk_bias"] and c["n_kv_heads"] != c["n_heads"]:
        raise ModelSpecError(f"{F.f}: qk_bias with grouped KV heads is not supported by "
                             "depthbench's port (num_key_value_heads must equal n_heads)")
    return c


def build(kind: str, raw: dict, path: Path):
    """The port of ``kind`` shaped by ``raw`` (config.json), with untrained weights."""
    mt = raw.get("model_type")
    if mt not in MODEL_TYPES[kind]:
        other = [k for k, v in MODEL_TYPES.items() if mt in v]
        hint = f"; load it as {other[0]}:{path}" if other else ""
        raise ModelSpecError(f"{path}/config.json has model_type {mt!r}, not a {kind} model "
                             f"({', '.join(MODEL_TYPES[kind])}){hint}")
    F = Fields(raw, path)
    if kind == "ouro":
        from depthbench.models.ouro import OuroLM
        return OuroLM(ouro_config(F))
    from depthbench.models.huginn import HuginnLM
    return HuginnLM(huginn_config(F))
