"""One way to name a looped model everywhere: ``load_model(SPEC)``.

    ouro:DIR      an Ouro checkpoint directory (config.json, *.safetensors[, tokenizer.json])
    huginn:DIR    a Huginn (huginn_raven) checkpoint directory
    hf:DIR        a transformers-native looped class (DoryForCausalLM), needs depthbench[hf]
    depthbench:DIR  a depthbench export (``depthbench export RUN --out DIR``)
    RUN           a depthbench run directory or checkpoint file (``run:RUN`` says so explicitly)

A checkpoint directory is read strictly: every parameter the port has must be in the files and
every tensor in the files must be a parameter of the port, each of its shape. Weights are
loaded as float32 unless ``dtype`` says otherwise.
"""

from __future__ import annotations

from depthbench.models.config import (  # noqa: F401  (re-exported)
    KINDS,
    MODEL_SPEC_HELP,
    ModelSpec,
    ModelSpecError,
    load_strict,
    parse_spec,
    read_config,
    read_weights,
)


def load_model(spec: str | ModelSpec, device="cpu", dtype=None, step: int | None = None):
    """A protocol model (eval mode) from ``spec``; see the module. Returns the model; its
    ``source`` attribute names where it came from."""
    import torch
    kind, path = parse_spec(spec)
    if kind == "run":
        from depthbench.checkpoint import load_run
        model, ck = load_run(path, step, device=device)
        model.source = ck["path"]
        return model
    if kind == "hf":
        from depthbench.models.hf import load_hf
        model = load_hf(path)
    elif kind == "depthbench":
        from depthbench.export import load_export
        model = load_export(path)
    else:
        from depthbench.models.config import build
        model = build(kind, read_config(path), path)
        load_strict(model, read_weights(path), path, optional=model.optional_keys())
    model.source = f"{kind}:{path}"
    model.tokenizer_file = path / "tokenizer.json" if (path / "tokenizer.json").is_file() else None
    return model.to(device=device, dtype=dtype or torch.float32).eval()


def load_shape(spec: str | ModelSpec):
    """The shape (``LoopShape``) of ``spec``'s model from its config alone: the port is built
    on the meta device, so no weights are read or allocated (serve-sim prices a 3.5B model's
    real shape without loading it)."""
    import torch
    kind, path = parse_spec(spec)
    if kind in ("run", "depthbench"):
        return load_model(spec).shape
    with torch.device("meta"):
        if kind == "hf":
            from depthbench.models.hf import build_hf
            return build_hf(path).shape
        from depthbench.models.config import build
        return build(kind, read_config(path), path).shape


def open_ported(spec: str | ModelSpec, data: str | None, device="cpu", verify: bool = True):
    """``(model, text dataset or None)``: a ported or wrapped model ``spec`` and the text
    dataset ``data`` it reads (none given: None), checked to be tokenized its way
    (``data.text.check_tokenized_for``) before it is used. ``spec``: text, or parsed already
    (``parse_spec``) by a caller that reads its folder too."""
    spec = parse_spec(spec)
    ds = None
    if data:
        from depthbench.data.synthetic import open_dataset
        ds = open_dataset(data, verify=verify)
    model = load_model(spec, device=device)
    if ds is not None:
        from depthbench.data.text import check_tokenized_for
        check_tokenized_for(ds, spec, getattr(model, "tokenizer_file", None), model.shape)
    return model, ds


def check_start_weights(spec: str, ds) -> None:
    """Training from a checkpoint's weights (``init_from``) needs a text dataset tokenized with
    its tokenizer; checked from its config and tokenizer alone, before any weight is read."""
    from depthbench.data.text import check_tokenized_for
    spec = parse_spec(spec)
    tok = spec.path / "tokenizer.json"
    check_tokenized_for(ds, spec, tok if tok.is_file() else None, load_shape(spec))
