"""Depth sweeps: what a trained looped model knows at every serving depth.

The state after k loops is exactly the depth-k model's state, so ONE pass with K_max loops that
reads out the coda and head after each requested depth gives every depth's metrics (K_max core
passes instead of 1 + 2 + ... + K_max). ``sweep_per_depth`` runs a separate forward per depth:
it is the oracle the tests hold the one-pass sweep to.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from depthbench.checkpoint import open_run, run_dir_of, run_keys, run_name
from depthbench.config import EVAL_SPLITS, EvalConfig
from depthbench.console import progress_bar
from depthbench.data.synthetic import Dataset
from depthbench.errors import UserError
from depthbench.evaluate.metrics import EvalSums, FactIndex, token_types
from depthbench.evaluate.reference import NameBlind, PersonAgnostic, StructureBlind
from depthbench.fsio import atomic_write_many, refuse_over_inputs
from depthbench.rows import items_base, row_files, row_paths, tag_rows
from depthbench.runtime import Runtime, shard_range


def eval_batches(ds: Dataset, split: str, batch_size: int, rt: Runtime | None, max_rows: int | None):
    s = ds.split(split)
    n = len(s) if not max_rows else min(len(s), max_rows)
    lo, hi = shard_range(n, rt.rank, rt.world) if rt else (0, n)
    device = rt.device if rt else torch.device("cpu")
    for a in range(lo, hi, batch_size):
        b = min(a + batch_size, hi)
        tokens = torch.as_tensor(np.asarray(s.tokens[a:b], dtype=np.int64), device=device)
        order = np.asarray(s.order[a:b], dtype=np.int64)
        facts = FactIndex(*ds.asked(order), ds.value_tokens, device=device,
                          types=row_token_types(ds, order), tier=ds.tier_of(s.person[a:b]))
        yield tokens[:, :-1], tokens[:, 1:], facts


def row_token_types(ds: Dataset, order: np.ndarray) -> np.ndarray:
    """(N, seq_len - 1) the ``metrics.TOKEN_TYPES`` index of the token each position of rows
    with orders (N, A) predicts (slot 0: the asked fact)."""
    return token_types(ds.name_tokens, ds.key_positions(order), ds.value_tokens[order], ds.seq_len)


def _reduce(sums: dict[int, EvalSums], rt: Runtime | None) -> dict[int, EvalSums]:
    if rt is None or rt.world == 1:
        return sums
    for s in sums.values():
        s.load_flat(rt.all_sum(s.flat()))
    return sums


@torch.no_grad()
def sweep(model, ds: Dataset, split: str, depths: list[int], rt: Runtime | None = None,
          batch_size: int = 64, max_rows: int | None = None) -> dict[int, EvalSums]:
    """Metrics at every depth in ``depths`` from one forward of max(depths) loops per batch."""
    model.eval()
    sums = {k: EvalSums(ds.n_values, ds.rows_per_person, ds.tiers) for k in depths}
    ac = rt.autocast() if rt else torch.autocast("cpu", enabled=False)
    n = len(ds.split(split)) if not max_rows else min(len(ds.split(split)), max_rows)
    with progress_bar(n, f"eval {split}", "rows") as bar:
        for x, y, facts in eval_batches(ds, split, batch_size, rt, max_rows):
            with ac:
                for k, logits in model.readouts(x, depths):
                    sums[k].add(logits, y, facts)
            bar.update(len(x))
    return _reduce(sums, rt)


@torch.no_grad()
def sweep_per_depth(model, ds: Dataset, split: str, depths: list[int], rt: Runtime | None = None,
                    batch_size: int = 64, max_rows: int | None = None) -> dict[int, EvalSums]:
    """The naive oracle: a separate full forward for every depth."""
    model.eval()
    sums = {k: EvalSums(ds.n_values, ds.rows_per_person, ds.tiers) for k in depths}
    ac = rt.autocast() if rt else torch.autocast("cpu", enabled=False)
    for x, y, facts in eval_batches(ds, split, batch_size, rt, max_rows):
        for k in depths:
            with ac:
                sums[k].add(model(x, n_loops=k), y, facts)
    return _reduce(sums, rt)


def result_rows(ck: dict, run_meta: dict, run_name: str, ds: Dataset, split: str,
                sums: dict[int, EvalSums], floor: dict, blind: dict, params: int,
                shortcut: dict | None = None) -> list[dict]:
    """Tidy rows, one per depth, with the grouping keys of DESIGN.md section 2, each with the
    split's ``floor`` (its ``reference.PersonAgnostic`` reading), its name-blind record
    completer's reading (``reference.NameBlind``), its structural shortcut's
    (``reference.StructureBlind``) and the model's parameter count, so that a reader of the
    rows alone can bracket and size every reading."""
    shortcut = shortcut or {}
    rows = []
    for depth, s in sorted(sums.items()):
        rows.append({
            **run_keys(run_name, ck, run_meta), "depth": depth, "split": split,
            **s.result(ds.attributes),
            "floor_bits_per_person": floor["bits_per_person"],
            "floor_exact_match": floor["exact_match"],
            "name_blind_bits_per_person": blind["bits_per_person"],
            "name_blind_exact_match": blind["exact_match"],
            "structure_blind_bits_per_person": shortcut.get("bits_per_person"),
            "structure_blind_exact_match": shortcut.get("exact_match"),
            "params": params, "people_trained": ds.config.n_people,
            "n_grad_loops": int(ck.get("model_config", {}).get("n_grad_loops", 0)),
            "modeled_train_flops": ck.get("flops"), "wall_clock_s": ck.get("wall_clock"),
            "train_cpu_s": ck.get("cpu_clock"),
            "dataset_hash": ds.hash, "checkpoint": ck.get("path"),
        })
    return rows


def _adapter():
    """The lm-eval adapter module (``--harness lm-eval``), or a UserError saying what to install."""
    try:
        from depthbench.evaluate import harness
    except ImportError:
        raise UserError("--harness lm-eval needs lm-eval: pip install 'depthbench[lmeval]'") \
            from None
    return harness


def _text_eval(cfg: EvalConfig, model, ck, meta, name, ds, depths, rt) -> list[dict]:
    """A text run's rows: NLL per token and bits per byte at every depth on the validation
    split (the synthetic splits and the harness do not apply)."""
    from depthbench.evaluate.text import cloze_accuracy, text_rows, text_sweep
    if cfg.harness == "lm-eval":
        if not cfg.tasks:
            raise UserError("a text run through lm-eval needs --task (e.g. hellaswag, piqa, "
                            "arc_easy, depthbench_cloze)")
        return _adapter().harness_tasks(cfg.run or cfg.model, str(ds.path), depths, list(cfg.tasks),
                                        cfg.checkpoint,
                             cfg.max_people, cfg.batch_size, cfg.task_path)
    if cfg.splits and set(cfg.splits) != {"validation"}:
        raise UserError(f"a text dataset has one evaluation split, validation (got "
                        f"{', '.join(cfg.splits)}); leave --split out")
    res = text_sweep(model, ds, depths, rt, cfg.batch_size, cfg.max_people or None)
    cloze = cloze_accuracy(model, ds, depths, rt.device)
    return text_rows(ck, meta, name, ds, res, sum(p.numel() for p in model.parameters()), cloze)


def _nonempty(ds: Dataset, splits: list[str], named: bool) -> list[str]:
    """The splits that hold rows: an empty one (a dataset generated without unseen people)
    is left out of the default set, and refused where it was named."""
    empty = [s for s in splits if len(ds.split(s)) == 0]
    if empty and named:
        raise UserError(f"split {empty[0]} of {ds.path} holds no rows (the dataset was generated "
                        "without them); evaluate another --split")
    return [s for s in splits if s not in empty]


def _model_eval(cfg: EvalConfig, rt):
    """``eval --model SPEC``: a ported or wrapped model on a text dataset tokenized its way."""
    from depthbench.data.synthetic import open_dataset
    from depthbench.data.text import check_tokenized_for
    from depthbench.loading import load_model, parse_spec
    from depthbench.schedules import parse_depths
    spec = parse_spec(cfg.model)
    if spec.kind == "run":
        raise UserError(f"--model {cfg.model} names a depthbench run; give it as RUN (eval RUN) "
                        "and --model for ouro:DIR, huginn:DIR or hf:DIR")
    if not cfg.data:
        raise UserError(f"eval --model {cfg.model} needs --data: a text dataset prepared with "
                        "the model's tokenizer (prepare-text CORPUS --tokenizer DIR/tokenizer.json)")
    if not cfg.out:
        raise UserError("eval --model needs --out FILE_BASE (a checkpoint folder holds only its "
                        "own files)")
    refuse_over_inputs(row_paths(cfg.out), checkpoint=spec.folder)
    ds = open_dataset(cfg.data)
    refuse_over_inputs(row_paths(cfg.out), None, ds.path, [])
    _refuse_foreign_rows(cfg.out)
    model = load_model(spec, rt.device)
    check_tokenized_for(ds, spec, model.tokenizer_file, model.shape)
    ck = {"step": None, "path": model.source, "schedule": None}
    rows = _text_eval(cfg, model, ck, {}, model.source, ds, parse_depths(cfg.depths), rt)
    return rows, ck, Path(cfg.out), ds


def _refuse_foreign_rows(out) -> None:
    """Before any work: eval's outputs replace only rows depthbench wrote (its own rows and
    items from an earlier eval), never a user's file of the same name."""
    from depthbench.fsio import refuse_foreign
    from depthbench.rows import is_rows_file
    refuse_foreign([*row_paths(out), *row_paths(items_base(out))], is_rows_file)


def _run_rows(cfg: EvalConfig, rt, depths: list[int], splits: list[str]):
    """A depthbench run's eval rows (synthetic splits, text, or through lm-eval)."""
    model, ck, meta, ds = open_run(cfg.run, cfg.checkpoint, cfg.data or None, rt.device)
    name = run_name(cfg.run)
    out = cfg.out or Path(run_dir_of(cfg.run) or Path(cfg.run).parent) / "eval" / \
        f"step_{ck['step']:07d}"
    refuse_over_inputs(row_paths(out), run_dir_of(cfg.run), ds.path, [cfg.run])
    _refuse_foreign_rows(out)
    if ds.kind == "text":
        return _text_eval(cfg, model.to(rt.device), ck, meta, name, ds, depths, rt), ck, out, ds
    splits = _nonempty(ds, splits, named=bool(cfg.splits))
    if cfg.tasks:
        raise UserError("--task runs lm-eval tasks on a text run; a synthetic run's harness "
                        "tasks are its recall and likelihood splits (--split)")
    if cfg.harness == "lm-eval":
        limit = cfg.max_people and cfg.max_people * ds.rows_per_person
        rows = _adapter().harness_sweep(cfg.run, str(ds.path), depths, splits, cfg.checkpoint,
                                        limit, cfg.batch_size)
        return rows, ck, out, ds
    rows, floors, blind, structure = [], PersonAgnostic(ds), NameBlind(ds), StructureBlind(ds)
    params = sum(p.numel() for p in model.parameters())
    for split in splits:
        sums = sweep(model.to(rt.device), ds, split, depths, rt, cfg.batch_size,
                     cfg.max_people and cfg.max_people * ds.rows_per_person)
        rows += result_rows(ck, meta, name, ds, split, sums, floors.reading(split),
                            blind.reading(split), params, structure.reading(split))
    return rows, ck, out, ds


def run_eval(cfg: EvalConfig) -> dict:
    """The eval stage: sweep ``cfg.depths`` on every split of a checkpoint (on ``cfg.device``,
    across torchrun's ranks when there are several), or of another looped model
    (``cfg.model``) on a text dataset, and write its ``eval`` rows.

    Returns the rows and, on the rank that wrote them, the paths of the written files."""
    from depthbench.runtime import setup, teardown
    from depthbench.schedules import parse_depths

    depths, splits = parse_depths(cfg.depths), list(cfg.splits or EVAL_SPLITS)
    rt = setup(cfg.device)
    try:
        rows, ck, out, ds = _model_eval(cfg, rt) if cfg.model else _run_rows(cfg, rt, depths, splits)
    finally:
        teardown(rt)
    rows = tag_rows(rows, cfg.tags)
    summary = {"rows": rows, "step": ck["step"], "ceiling_bits": getattr(ds, "ceiling_bits", None)}
    if rt.is_main:
        kind = "task" if rows and "task" in rows[0] else "eval"
        files = row_files(rows, out, kind)
        if kind == "eval" and rows and "cloze_items" in rows[0]:   # the questions beside
            from depthbench.evaluate.text import item_rows
            files.update(row_files(item_rows(ds), items_base(out), "item"))
        atomic_write_many(files)
        summary["csv"], summary["jsonl"] = row_paths(out)
    return summary
