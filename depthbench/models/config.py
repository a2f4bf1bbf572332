"""Reading a checkpoint folder: the model spec, ``config.json`` (each field a port needs, of its
type and range, and a clear refusal of the features a port does not implement instead of wrong
numbers) and the ``*.safetensors`` weights, loaded strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from depthbench.errors import UserError

KINDS = ("ouro", "huginn", "hf", "depthbench", "run")
MODEL_SPEC_HELP = ("ouro:DIR, huginn:DIR, hf:DIR, a depthbench export (depthbench:DIR) or a "
                   "depthbench run (run:DIR)")


class ModelSpecError(UserError, ValueError):
    """A model spec, checkpoint directory or checkpoint file that cannot be loaded."""


class ModelSpec(NamedTuple):
    """A model spec, parsed: its kind (one of ``KINDS``) and the path it names."""
    kind: str
    path: Path

    def __str__(self) -> str:
        return str(self.path) if self.kind == "run" else f"{self.kind}:{self.path}"

    @property
    def folder(self) -> Path | None:
        """The checkpoint folder the spec reads (no output may land inside it); a run's own
        files are guarded as a run's (``fsio.RUN_OWN``), so a run has none here."""
        return self.path if self.kind != "run" and self.path.is_dir() else None


def parse_spec(spec: str | ModelSpec) -> ModelSpec:
    """The kind and path of a model spec (a parsed one as it is)."""
    if isinstance(spec, ModelSpec):
        return spec
    spec = str(spec).strip()
    kind, sep, rest = spec.partition(":")
    if sep and kind in KINDS:
        if not rest.strip():
            raise ModelSpecError(f"model spec {spec!r} names no directory; use {MODEL_SPEC_HELP}")
        if rest != rest.strip() and not Path(rest).exists():   # "ouro: DIR" from a shell
            rest = rest.strip()
        return ModelSpec(kind, Path(rest))
    if sep and kind.isalpha() and len(kind) > 1:
        raise ModelSpecError(f"unknown model kind {kind!r} in {spec!r}; use {MODEL_SPEC_HELP}")
    return ModelSpec("run", Path(spec))


def read_config(d: Path) -> dict:
    if d.is_file():
        raise ModelSpecError(f"{d} is a file; give the checkpoint folder that holds it "
                             f"({d.parent}), not one of its files")
    if not d.is_dir():
        near = d.with_name(d.name.strip())
        hint = (f" (the path has spaces around it: did you mean {near}?)"
                if str(d) != str(d).strip() or near != d else "")
        raise ModelSpecError(f"checkpoint directory {str(d)!r} does not exist{hint}; give the "
                             "folder that holds config.json and the *.safetensors weights")
    f = d / "config.json"
    if not f.is_file():
        raise ModelSpecError(f"{d} has no config.json; give the checkpoint folder as saved by "
                             "save_pretrained")
    try:
        c = json.loads(f.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelSpecError(f"{f} is not JSON ({e}); restore it from the checkpoint") from None
    if not isinstance(c, dict):
        raise ModelSpecError(f"{f} holds no JSON object; restore it from the checkpoint")
    return c


def read_weights(d: Path) -> dict:
    """Every tensor of the directory's ``*.safetensors`` files (sharded checkpoints included)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ModelSpecError(f"{d} holds no *.safetensors weights (pickled .bin weights are not "
                             "read: convert them with safetensors)")
    out: dict = {}
    for f in files:
        try:
            part = load_file(str(f), device="cpu")
        except (SafetensorError, OSError, ValueError) as e:
            raise ModelSpecError(f"{f} is not a readable safetensors file ({str(e)[:80]}); "
                                 "download it again") from None
        twice = sorted(set(part) & set(out))
        if twice:
            raise ModelSpecError(f"{d}: tensor {twice[0]} is in more than one *.safetensors "
                                 "file; keep one copy of the checkpoint in the folder")
        out.update(part)
    return out


def few_names(names) -> str:
    names = sorted(names)
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more


def load_strict(model, weights: dict, d: Path, optional=()) -> None:
    """Load ``weights`` into ``model``: names and shapes must match exactly (``optional``: keys
    the port fills itself where the file leaves them out, e.g. a tied head)."""
    import torch
    want = model.state_dict()
    kind = getattr(model, "kind", "depthbench")
    missing = set(want) - set(weights) - set(optional)
    unexpected = set(weights) - set(want)
    if missing:
        raise ModelSpecError(f"{d}: the checkpoint lacks {len(missing)} tensor(s) the "
                             f"{kind} model has: {few_names(missing)}; is it a {kind} "
                             "checkpoint of this config?")
    if unexpected:
        raise ModelSpecError(f"{d}: the checkpoint holds {len(unexpected)} tensor(s) the "
                             f"{kind} model does not have: {few_names(unexpected)}; its "
                             "config.json does not describe these weights")
    check_finite(weights.items(), d)
    for k, t in weights.items():
        if tuple(t.shape) != tuple(want[k].shape):
            raise ModelSpecError(f"{d}: tensor {k} has shape {tuple(t.shape)} but config.json "
                                 f"gives {tuple(want[k].shape)}; the config and weights differ")
        if not t.is_floating_point():
            raise ModelSpecError(f"{d}: tensor {k} is {t.dtype}, not floating point")
    with torch.no_grad():
        for k, t in weights.items():
            want[k].copy_(t)


MODEL_TYPES = {"ouro": ("ouro",), "huginn": ("huginn_raven",)}


# the largest value a config.json field can hold here (any other integer field: 2^24): layer
# counts past these are a corrupt config, not a model, and would hang building it
FIELD_LIMITS = {k: 4096 for k in ("num_hidden_layers", "n_layers", "n_layers_in_prelude",
                                  "n_layers_in_recurrent_block", "n_layers_in_coda",
                                  "n_input_layers", "n_output_layers", "n_recurrent_layers",
                                  "num_attention_heads", "num_key_value_heads", "n_heads",
                                  "total_ut_steps", "mean_recurrence", "n_recurrent_loops")}
FIELD_LIMITS.update({k: 1 << 17 for k in ("hidden_size", "n_embd", "head_dim")})


def check_finite(tensors, where) -> None:
    """Every weight a finite number: a NaN or infinite weight (a diverged run, a corrupt file)
    would be read into NaN losses, accuracies and speedups that look like results."""
    import torch
    for name, t in tensors:
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ModelSpecError(f"{where}: weight {name} holds NaN or infinite values (a run "
                                 "that diverged, or a corrupt file); it cannot be read as a model")


def weight_elements(d: Path) -> int | None:
    """The number of weight elements in a folder's *.safetensors, from their headers alone
    (None where it holds none)."""
    from safetensors import SafetensorError, safe_open
    files, n = sorted(d.glob("*.safetensors")), 0
    for f in files:
        try:
            with safe_open(str(f), "pt") as h:
                for k in h.keys():
                    size = 1
                    for x in h.get_slice(k).get_shape():
                        size *= x
                    n += size
        except (SafetensorError, OSError, ValueError) as e:
            raise ModelSpecError(f"{f} is not a readable safetensors file ({str(e)[:80]}); "
                                 "download it again") from None
    return n if files else None


def check_size(described: int, d: Path) -> None:
    """A config that describes far more parameters than its folder's weights hold (a vocabulary
    of 2^40 beside 128-row weights) is refused before anything is allocated."""
    held = weight_elements(d)
    if held is not None and described > 2 * held + (1 << 20):
        raise ModelSpecError(f"{d}/config.json describes a model of about {described:,} "
                             f"parameters but its *.safetensors hold {held:,}; the config does "
                             "not describe these weights")


class Fields:
    def __init__(self, c: dict, path: Path):
        self.c, self.f = c, path / "config.json"

    def bad(self, key: str, why: str):
        return ModelSpecError(f"{self.f}: {key} {why}; fix config.json")

    def int(self, key: str, default=None, lo: int = 1) -> int:
        v = self.c.get(key, default)
        if v is None:
            raise self.bad(key, "is missing")
        hi = FIELD_LIMITS.get(key, 1 << 24)
        if type(v) is not int or not lo <= v <= hi:
            raise self.bad(key, f"must be an integer in {lo}..{hi} (got {v!r})")
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


def _rope_parameters(F: Fields) -> dict:
    """transformers 5's ``rope_parameters`` (the rotary base and any scaling): a JSON object
    whose ``rope_type`` is the plain one, or the port would silently read scaled positions as
    unscaled; its ``rope_theta``, where given, is the base."""
    rp = F.c.get("rope_parameters")
    if rp is None:
        return {}
    if not isinstance(rp, dict):
        raise F.bad("rope_parameters", f"must be a JSON object (got {type(rp).__name__})")
    kind = rp.get("rope_type", rp.get("type", "default"))
    if kind != "default":
        raise ModelSpecError(f"{F.f}: rope_parameters.rope_type={kind!r} (scaled rotary "
                             "positions) is not supported by depthbench's port (it implements "
                             "'default')")
    return rp


def ouro_config(F: Fields) -> dict:
    d = F.int("hidden_size")
    F.only("hidden_act", ("silu",), "silu")
    F.only("rope_scaling", (None,))
    F.only("use_sliding_window", (False,), False)
    F.only("attention_bias", (False,), False)
    theta = F.c.get("rope_theta", _rope_parameters(F).get("rope_theta"))
    c = {"hidden_size": d, "vocab_size": F.int("vocab_size"), "n_layers": F.int("num_hidden_layers"),
         "intermediate_size": F.int("intermediate_size"), "eps": F.num("rms_norm_eps"),
         "rope_theta": F.num("rope_theta", theta), "max_seq_len": F.int("max_position_embeddings"),
         "tie_word_embeddings": F.flag("tie_word_embeddings", False),
         "default_depth": F.int("total_ut_steps", 4), **_heads(F, d, "num_attention_heads",
                                                                 "num_key_value_heads")}
    t = F.c.get("early_exit_threshold")
    c["exit_threshold"] = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
    return c


def _embed_scale(F: Fields) -> float | None:
    iv = F.c.get("init_values")
    v = iv.get("embed_scale") if isinstance(iv, dict) else None
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise F.bad("init_values.embed_scale", f"must be a positive number (got {v!r})")
    return float(v)


def huginn_config(F: Fields) -> dict:
    d = F.int("n_embd")
    F.only("rope_scaling", (None,))
    _rope_parameters(F)
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
         "default_depth": F.int("mean_recurrence", 32), **_heads(F, d, "n_heads", "num_key_value_heads"),
         "embed_scale": _embed_scale(F)}
    if c["head_dim"] * c["n_heads"] != d:   # the original's head dimension is n_embd / n_heads
        raise F.bad("head_dim", f"must be n_embd / n_heads = {d // c['n_heads']} (got {c['head_dim']})")
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
        raise ModelSpecError(f"{path}/config.json has model_type {mt!r}; {kind}:DIR loads "
                             f"model_type {', '.join(map(repr, MODEL_TYPES[kind]))}{hint}")
    F = Fields(raw, path)
    c = ouro_config(F) if kind == "ouro" else huginn_config(F)
    check_size(_described(kind, c), path)
    if kind == "ouro":
        from depthbench.models.ouro import OuroLM
        return OuroLM(c)
    from depthbench.models.huginn import HuginnLM
    return HuginnLM(c)


def _described(kind: str, c: dict) -> int:
    """About how many parameters a port's config describes (matmuls and embeddings)."""
    d = c["hidden_size" if kind == "ouro" else "n_embd"]
    q, kv = c["n_heads"] * c["head_dim"], c["n_kv_heads"] * c["head_dim"]
    layer = d * (2 * q + 2 * kv) + 3 * d * c["intermediate_size"]
    layers = c["n_layers"] if kind == "ouro" else c["n_prelude"] + c["n_core"] + c["n_coda"]
    return layers * layer + c["vocab_size"] * d
