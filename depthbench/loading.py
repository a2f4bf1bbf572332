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

from pathlib import Path

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


def refuse_inside(outputs, spec: ModelSpec) -> None:
    """No output may land inside a checkpoint directory a command reads."""
    kind, path = spec
    if kind == "run" or not path.is_dir():
        return
    d = path.resolve()
    for out in outputs:
        o = Path(out).resolve()
        if o == d or d in o.parents:
            raise ModelSpecError(f"--out {out} is inside the checkpoint directory {path}; write "
                                 "results elsewhere (a checkpoint folder holds only its own files)")


def check_text_dataset(model, ds, spec: ModelSpec) -> None:
    """A ported model reads a text dataset only if it was tokenized with the model's own
    tokenizer (``prepare-text --tokenizer DIR/tokenizer.json``): every token of the checkpoint's
    tokenizer.json has the same id in the dataset's, and every id fits the model's vocabulary;
    the dataset's windows fit its positions."""
    path = spec.path
    fix = (f"prepare the text with the model's tokenizer: depthbench prepare-text CORPUS --out "
           f"DATA --tokenizer {path}/tokenizer.json")
    if getattr(ds, "kind", None) != "text":
        raise ModelSpecError(f"{ds.path} is a synthetic people dataset in depthbench's own "
                             f"vocabulary; {spec} reads text: {fix}")
    tok_file = getattr(model, "tokenizer_file", None)
    if tok_file is None:
        raise ModelSpecError(f"{path} has no tokenizer.json; a ported model is evaluated on text "
                             "tokenized its own way: put the checkpoint's tokenizer.json in the "
                             "folder")
    from depthbench.data.text import load_tokenizer, tokenizer_model
    tok, ds_tok = load_tokenizer(tok_file), ds.tokenizer()
    mine, theirs = tok.get_vocab(), ds_tok.get_vocab()
    differ = [t for t, i in mine.items() if theirs.get(t) != i]
    if not differ and tokenizer_model(tok) != tokenizer_model(ds_tok):
        raise ModelSpecError(f"dataset {ds.path} was tokenized with the same vocabulary as "
                             f"{tok_file} but other merges or normalization, so the same text "
                             f"becomes other tokens; {fix}")
    if differ or len(theirs) > model.shape.vocab_size:
        raise ModelSpecError(f"dataset {ds.path} was tokenized with another tokenizer than "
                             f"{tok_file} ({len(differ)} of its tokens differ; {len(theirs)} ids "
                             f"for a model of {model.shape.vocab_size}); {fix}")
    if ds.seq_len - 1 > model.shape.max_seq_len:
        raise ModelSpecError(f"dataset {ds.path} has windows of {ds.seq_len - 1} tokens, more than "
                             f"the model's {model.shape.max_seq_len} positions; prepare it with a "
                             "shorter --seq-len")


def open_ported(spec: str | ModelSpec, data: str | None, device="cpu", outputs=(),
                verify: bool = True):
    """``(model, text dataset or None)``: a ported or wrapped model ``spec``, with no output of
    ``outputs`` inside its checkpoint folder, and the text dataset ``data`` it reads (none
    given: None), checked to be tokenized its way (``check_text_dataset``) before it is used.
    The spec is parsed once, here."""
    spec = parse_spec(spec)
    refuse_inside(outputs, spec)
    ds = None
    if data:
        from depthbench.data.synthetic import open_dataset
        ds = open_dataset(data, verify=verify)
    model = load_model(spec, device=device)
    if ds is not None:
        check_text_dataset(model, ds, spec)
    return model, ds


def check_start_weights(spec: str, ds) -> None:
    """Training from a checkpoint's weights (``init_from``) needs a text dataset tokenized with
    its tokenizer; checked from its config and tokenizer alone, before any weight is read."""
    from types import SimpleNamespace
    spec = parse_spec(spec)
    tok = spec.path / "tokenizer.json"
    check_text_dataset(SimpleNamespace(shape=load_shape(spec),
                                       tokenizer_file=tok if tok.is_file() else None), ds, spec)
