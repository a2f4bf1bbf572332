"""One way to name a looped model everywhere: ``load_model(SPEC)``.

    ouro:DIR      an Ouro checkpoint directory (config.json, *.safetensors[, tokenizer.json])
    huginn:DIR    a Huginn (huginn_raven) checkpoint directory
    hf:DIR        a transformers-native looped class (DoryForCausalLM), needs depthbench[hf]
    RUN           a depthbench run directory or checkpoint file (``run:RUN`` says so explicitly)

A checkpoint directory is read strictly: every parameter the port has must be in the files and
every tensor in the files must be a parameter of the port, each of its shape. Weights are
loaded as float32 unless ``dtype`` says otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

from depthbench.errors import UserError

KINDS = ("ouro", "huginn", "hf", "run")
MODEL_SPEC_HELP = "ouro:DIR, huginn:DIR, hf:DIR or a depthbench run (run:DIR)"


class ModelSpecError(UserError, ValueError):
    """A model spec, checkpoint directory or checkpoint file that cannot be loaded."""


def parse_spec(spec: str) -> tuple[str, Path]:
    """(kind, path) of a model spec."""
    spec = str(spec).strip()
    kind, sep, rest = spec.partition(":")
    if sep and kind in KINDS:
        if not rest:
            raise ModelSpecError(f"model spec {spec!r} names no directory; use {MODEL_SPEC_HELP}")
        return kind, Path(rest)
    if sep and kind.isalpha() and len(kind) > 1:
        raise ModelSpecError(f"unknown model kind {kind!r} in {spec!r}; use {MODEL_SPEC_HELP}")
    return "run", Path(spec)


def read_config(d: Path) -> dict:
    if not d.is_dir():
        raise ModelSpecError(f"checkpoint directory {d} does not exist; give the folder that "
                             "holds config.json and the *.safetensors weights")
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


def _few(names) -> str:
    names = sorted(names)
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more


def load_strict(model, weights: dict, d: Path, optional=()) -> None:
    """Load ``weights`` into ``model``: names and shapes must match exactly (``optional``: keys
    the port fills itself where the file leaves them out, e.g. a tied head)."""
    import torch
    want = model.state_dict()
    missing = set(want) - set(weights) - set(optional)
    unexpected = set(weights) - set(want)
    if missing:
        raise ModelSpecError(f"{d}: the checkpoint lacks {len(missing)} tensor(s) the "
                             f"{model.kind} model has: {_few(missing)}; is it a {model.kind} "
                             "checkpoint of this config?")
    if unexpected:
        raise ModelSpecError(f"{d}: the checkpoint holds {len(unexpected)} tensor(s) the "
                             f"{model.kind} model does not have: {_few(unexpected)}; its "
                             "config.json does not describe these weights")
    for k, t in weights.items():
        if tuple(t.shape) != tuple(want[k].shape):
            raise ModelSpecError(f"{d}: tensor {k} has shape {tuple(t.shape)} but config.json "
                                 f"gives {tuple(want[k].shape)}; the config and weights differ")
        if not t.is_floating_point():
            raise ModelSpecError(f"{d}: tensor {k} is {t.dtype}, not floating point")
    with torch.no_grad():
        for k, t in weights.items():
            want[k].copy_(t)


def load_model(spec: str, device="cpu", dtype=None, step: int | None = None):
    """A protocol model (eval mode) from ``spec``; see the module. Returns the model; its
    ``source`` attribute names where it came from."""
    import torch
    kind, path = parse_spec(spec)
    if kind == "run":
        from depthbench.checkpoint import load_model as load_run
        model, ck = load_run(path, step, device=device)
        model.source = ck["path"]
        return model
    if kind == "hf":
        from depthbench.models.hf import load_hf
        model = load_hf(path)
    else:
        from depthbench.models.config import build
        model = build(kind, read_config(path), path)
        load_strict(model, read_weights(path), path, optional=model.optional_keys())
    model.source = f"{kind}:{path}"
    model.tokenizer_file = path / "tokenizer.json" if (path / "tokenizer.json").is_file() else None
    return model.to(device=device, dtype=dtype or torch.float32).eval()


def load_shape(spec: str):
    """The shape (``LoopShape``) of ``spec``'s model from its config alone: the port is built
    on the meta device, so no weights are read or allocated (serve-sim prices a 3.5B model's
    real shape without loading it)."""
    import torch
    kind, path = parse_spec(spec)
    if kind == "run":
        return load_model(spec).shape
    with torch.device("meta"):
        if kind == "hf":
            from depthbench.models.hf import build_hf
            return build_hf(path).shape
        from depthbench.models.config import build
        return build(kind, read_config(path), path).shape


def refuse_inside(outputs, spec: str) -> None:
    """No output may land inside a checkpoint directory a command reads."""
    kind, path = parse_spec(spec)
    if kind == "run" or not path.is_dir():
        return
    d = path.resolve()
    for out in outputs:
        o = Path(out).resolve()
        if o == d or d in o.parents:
            raise ModelSpecError(f"--out {out} is inside the checkpoint directory {path}; write "
                                 "results elsewhere (a checkpoint folder holds only its own files)")
