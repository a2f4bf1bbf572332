"""``depthbench export RUN --out DIR``: a trained run as a self-describing checkpoint folder, the
format the ports read (``config.json`` beside ``model.safetensors``), readable back with
``load_model("depthbench:DIR")`` to the same logits and by any safetensors reader elsewhere.

The folder holds:

- ``model.safetensors``: every tensor of the model's state dict by its depthbench name (a tied
  head is stored once, as ``embed.weight``);
- ``config.json``: ``model_type`` ``depthbench_looped``, the ``ModelConfig`` that builds the
  model (``model``), an ``architecture`` section in words and numbers (what is looped, how the
  input is injected, parameter counts per part), and where it came from (the run's schedule,
  seed, step, modeled training FLOPs, dataset hash, package version and commit);
- the dataset's vocabulary (``vocab.json``, the synthetic task) or tokenizer (``tokenizer.json``,
  text), so the ids mean something outside the run;
- ``README.md``: the same in prose, a model card.
"""

from __future__ import annotations

import json
from pathlib import Path

from depthbench.errors import UserError

MODEL_TYPE = "depthbench_looped"
WEIGHTS = "model.safetensors"


def architecture(cfg, model) -> dict:
    """The model's shape in words and numbers, for a reader who does not have depthbench."""
    def count(prefix: str) -> int:
        return sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefix))
    total = sum(p.numel() for p in model.parameters())
    parts = {"embedding": count("embed."), "prelude": count("prelude."), "core": count("core."),
             "coda": count("coda."), "head": 0 if cfg.tie_embeddings else count("head.")}
    parts["other"] = total - sum(parts.values())   # final norm, injection adapter, exit gate
    return {
        "family": "looped (recurrent-depth) decoder-only transformer",
        "layout": (f"embedding -> {cfg.n_prelude} prelude block(s) -> {cfg.n_core} core "
                   f"block(s) applied K times with shared weights -> {cfg.n_coda} coda "
                   "block(s) -> RMSNorm -> LM head"),
        "loop": {"injection": cfg.injection, "initial_state": cfg.init_state,
                 "note": "K (the serving depth) is chosen per call: the state after k loops is "
                         "read out through the coda and head at any k"},
        "block": {"d_model": cfg.d_model, "n_heads": cfg.n_heads,
                  "n_kv_heads": cfg.n_kv_heads or cfg.n_heads, "d_ff": cfg.ff,
                  "norm": cfg.norm, "qk_norm": cfg.qk_norm,
                  "positions": "rotary" if cfg.rope else "learned"},
        "parameters": {"total": total, **parts},
        "tie_embeddings": cfg.tie_embeddings, "vocab_size": cfg.vocab_size,
        "max_seq_len": cfg.max_seq_len,
    }


def _origin(ck: dict, run_dir: Path | None) -> dict:
    from depthbench.checkpoint import read_run
    from depthbench.provenance import provenance
    rec = read_run(run_dir) if run_dir is not None else {}
    p = provenance()
    return {"schedule": ck.get("schedule"), "seed": rec.get("seed"), "step": ck.get("step"),
            "modeled_train_flops": ck.get("flops"),
            "dataset_hash": rec.get("dataset_hash", ck.get("dataset_hash")),
            "run": str(run_dir) if run_dir else ck.get("path"),
            "depthbench_version": p["depthbench_version"], "git_commit": p["git_commit"]}


def _vocab_files(run_dir: Path | None) -> dict[str, str]:
    """The run's dataset's vocabulary or tokenizer, by the name the folder keeps it under."""
    from depthbench.checkpoint import read_run
    if run_dir is None:
        return {}
    data = Path(read_run(run_dir).get("data", ""))
    return {name: (data / name).read_text() for name in ("vocab.json", "tokenizer.json")
            if (data / name).is_file()}


def _card(config: dict) -> str:
    a, o = config["architecture"], config["origin"]
    par = a["parameters"]
    return "\n".join([
        "# depthbench looped model", "",
        f"A {a['family']}: {a['layout']}.", "",
        f"- parameters: {par['total']:,} (embedding {par['embedding']:,}, prelude "
        f"{par['prelude']:,}, core {par['core']:,}, coda {par['coda']:,}, head {par['head']:,}, "
        f"norm and other {par['other']:,})",
        f"- block: d_model {a['block']['d_model']}, {a['block']['n_heads']} heads "
        f"({a['block']['n_kv_heads']} KV), d_ff {a['block']['d_ff']}, {a['block']['norm']}-norm, "
        f"{a['block']['positions']} positions; input injection `{a['loop']['injection']}`, "
        f"initial state `{a['loop']['initial_state']}`",
        f"- trained: schedule `{o['schedule']}`, seed {o['seed']}, step {o['step']}, "
        f"{o['modeled_train_flops'] or 0:.3g} modeled FLOPs, dataset {o['dataset_hash']}",
        f"- made by depthbench {o['depthbench_version']} ({o['git_commit'] or 'no commit'})", "",
        "Load it with `depthbench.loading.load_model('depthbench:DIR')`; the weights are "
        f"plain safetensors ({WEIGHTS}) named as in `config.json`'s `model` config.", ""])


def export_run(run: str | Path, out: str | Path, step: int | None = None) -> dict:
    """Write ``run``'s checkpoint (the latest, or ``step``) to the folder ``out``; returns the
    config written."""
    from safetensors.torch import save_file

    from depthbench.checkpoint import load_run, run_dir_of
    from depthbench.fsio import atomic_write_many, check_replaceable, replaced_dir
    out = Path(out)
    model, ck = load_run(run, step)
    run_dir = run_dir_of(run)
    if run_dir is not None and (out.resolve() == run_dir.resolve()
                                or run_dir.resolve() in out.resolve().parents):
        raise UserError(f"--out {out} is inside the run {run_dir}; export to another folder")
    cfg = model.cfg
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if cfg.tie_embeddings:
        state.pop("head.weight", None)
    config = {"model_type": MODEL_TYPE, "architectures": [type(model).__name__],
              "model": cfg.replace(init_from="").to_dict(),
              "architecture": architecture(cfg, model), "origin": _origin(ck, run_dir)}
    check_replaceable(out, "model folder", "the export folder")
    with replaced_dir(out, "model folder") as tmp:
        save_file(state, str(tmp / WEIGHTS), metadata={"format": "pt", "model_type": MODEL_TYPE})
        files = {tmp / "config.json": json.dumps(config, indent=2) + "\n",
                 tmp / "README.md": _card(config)}
        files.update({tmp / n: text for n, text in _vocab_files(run_dir).items()})
        atomic_write_many(files)
    return config


def load_export(path: Path):
    """The model of an exported folder (``depthbench:DIR``), weights read strictly."""
    from depthbench.config import ConfigError, ModelConfig
    from depthbench.models.build import build_model
    from depthbench.models.config import ModelSpecError, load_strict, read_config, read_weights
    raw = read_config(path)
    if raw.get("model_type") != MODEL_TYPE or not isinstance(raw.get("model"), dict):
        raise ModelSpecError(f"{path}/config.json is not a depthbench export (model_type "
                             f"{raw.get('model_type')!r}); make one with depthbench export RUN "
                             "--out DIR, or name its kind (ouro:, huginn:, hf:)")
    try:
        cfg = ModelConfig.from_dict(raw["model"])
    except (ConfigError, TypeError) as e:
        raise ModelSpecError(f"{path}/config.json: its model config is not valid ({e})") from None
    model = build_model(cfg.replace(init_from=""))
    load_strict(model, read_weights(path), path,
                optional=("head.weight",) if cfg.tie_embeddings else ())
    return model
