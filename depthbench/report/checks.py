"""Each kind of result row checked as it is read: its schema (required columns, finite numbers),
the ranges a reading can lie in, the counts that are whole numbers, the splits and schedules it
can name, and a cloze item's choices and label. A row that fails is refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from depthbench.data_gen.format import SPLITS as SYNTHETIC_SPLITS
from depthbench.errors import UserError
from depthbench.rows import SCHEMA, TEXT_EVAL
from depthbench.schedules import MAX_DEPTH, parse_schedule


def _a(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _model_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Eval rows of a loaded model (``depthbench eval --model ouro:DIR``: no schedule, seed or
    step, the model's spec as run and checkpoint) as one arm named by that spec, seed 0, step 0."""
    if not {"run", "checkpoint", "schedule"} <= set(df.columns):
        return df
    loaded = df["schedule"].isna() & (df["run"] == df["checkpoint"]) & \
        df["run"].astype(str).str.match(r"^(ouro|huginn|hf):")
    if not loaded.any():
        return df
    df = df.copy()
    df["schedule"] = df["schedule"].astype(object)
    df.loc[loaded, "schedule"] = df.loc[loaded, "run"]
    for c in ("seed", "step"):
        if c in df.columns:
            df[c] = df[c].where(~loaded | df[c].notna(), 0)
            if loaded.all():
                df[c] = pd.to_numeric(df[c])
    return df


def checked_rows(df: pd.DataFrame, kind: str, path: Path) -> pd.DataFrame:
    _, required, numeric = SCHEMA[kind]
    if kind == "eval":
        df = _model_rows(df)
    if kind == "eval" and "bits_per_byte" in df.columns:   # a text run's eval rows
        required, numeric = TEXT_EVAL
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise UserError(f"result file {path} looks like {kind} rows but lacks the column(s) "
                        f"{', '.join(missing)}; regenerate it with depthbench")
    # a loaded model's rows have no training to count (its modeled_train_flops is empty)
    trained = ~(df["run"] == df["schedule"]) if {"run", "schedule"} <= set(df.columns) else True
    empty = [c for c in required if c not in numeric and c != "switch_step"
             and (df.loc[trained, c] if c == "modeled_train_flops" else df[c]).isna().any()]
    if empty:
        raise UserError(f"result file {path}: {_a(kind)} row has no {empty[0]}; regenerate it "
                        "with depthbench")
    for c in numeric:
        if (not pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c])
                or not np.isfinite(df[c].astype(float)).all()):
            raise UserError(f"result file {path}: column {c} must hold finite numbers; "
                            "regenerate it with depthbench")
    _check_ranges(df, kind, path)
    if "schedule" in df.columns:
        models = df["run"] == df["schedule"] if "run" in df.columns else False
        _check_schedules(df.loc[~models, "schedule"] if models is not False else df["schedule"],
                         kind, path)
    return df


# kind -> column -> (least, greatest) a reading can be; a column named here is checked where the
# rows hold it (None: unbounded on that side). Bits are bounded by the row's own ceiling below.
RANGES = {
    "eval": {"nll": (0, None), "value_nll": (0, None), "exact_match": (0, 1), "bits_per_person": (0, None),
             "ceiling_bits": (0, None), "floor_bits_per_person": (0, None),
             "name_blind_bits_per_person": (0, None), "floor_exact_match": (0, 1),
             "name_blind_exact_match": (0, 1), "structure_blind_bits_per_person": (0, None),
             "structure_blind_exact_match": (0, 1), "depth": (1, MAX_DEPTH), "step": (0, None),
             "people": (1, None), "facts": (1, None),
             "bits_per_byte": (0, None), "tokens": (1, None), "cloze_accuracy": (0, 1),
             "cloze_accuracy_mi": (0, 1), "cloze_overlap_rule": (0, 1),
             "cloze_unigram_rule": (0, 1), "cloze_items": (0, None),
             "modeled_train_flops": (0, None)},
    "probe": {"depth": (1, MAX_DEPTH), "depth_a": (1, MAX_DEPTH), "depth_b": (1, MAX_DEPTH),
              "ci95": (0, None),
              "step": (0, None), "batches": (1, None)},
    "curve": {"loss": (0, None), "K": (1, None), "step": (0, None)},
    "run": {"final_loss": (0, None), "modeled_train_flops": (0, None)},
    "serve": {"tokens_per_s": (0, None), "speedup": (0, None), "ceiling": (0, None),
              "mean_depth": (1, MAX_DEPTH)},
    "task": {"depth": (1, MAX_DEPTH), "acc": (0, 1), "acc_norm": (0, 1), "acc_mutual_info": (0, 1)},
    "stage": {"stage_s": (0, None), "started": (0, None), "finished": (0, None),
              "workers": (1, None), "peak_rss_mb": (0, None)},
}
# columns any kind of row may carry, checked wherever they appear: counts, clocks and sizes
# cannot be negative, and a model has at least one parameter
COMMON_RANGES = {"seed": (0, None), "wall_clock_s": (0, None), "train_cpu_s": (0, None),
                 "modeled_train_flops": (0, None), "flops": (0, None),
                 "params": (1, None), "people_trained": (0, None), "n_grad_loops": (0, None),
                 "tokens_per_s": (0, None), "elapsed_s": (0, None)}


# the brackets a synthetic eval row is read against: where a file has the column, every row
# holds a number in it
BRACKETS = ("ceiling_bits", "floor_bits_per_person", "name_blind_bits_per_person",
            "floor_exact_match", "name_blind_exact_match", "structure_blind_bits_per_person",
            "structure_blind_exact_match")


# columns that count something (a depth, a step, people): whole numbers wherever they appear
COUNTS = ("depth", "step", "seed", "people", "facts", "depth_a", "depth_b", "batches", "K",
          "workers", "tokens", "params", "people_trained", "cloze_items")

# the splits an eval row can read: the synthetic dataset's evaluation splits, a text dataset's
EVAL_SPLITS = tuple(s for s in SYNTHETIC_SPLITS if s != "train") + ("validation",)


def as_number(x) -> str:
    """A cell as the plain number a reader wrote (no numpy wrapper in an error line)."""
    x = x.item() if hasattr(x, "item") else x
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def _check_ranges(df: pd.DataFrame, kind: str, path: Path) -> None:
    """A reading that cannot be (a negative NLL, an exact match above 1, bits above the row's
    ceiling, a fractional depth, a reading over no fact, a split no dataset has, a stage that
    ends before it starts) is refused, not drawn."""
    def refuse(what: str):
        raise UserError(f"result file {path}: {what}, which no {kind} row can hold; "
                        "regenerate it with depthbench")
    for c, (lo, hi) in {**COMMON_RANGES, **RANGES.get(kind, {})}.items():
        if c not in df.columns:
            continue
        col = df[c]   # a bool among numbers leaves the column of object dtype
        if pd.api.types.is_bool_dtype(col) or (col.dtype == object
                                               and col.map(lambda x: isinstance(x, bool)).any()):
            refuse(f"column {c} holds true/false, not a number")
        v = pd.to_numeric(df[c], errors="coerce").dropna()
        if np.isinf(v).any():
            refuse(f"column {c} holds {as_number(v[np.isinf(v)].iloc[0])} (not a finite number)")
        if c in BRACKETS and len(v) < len(df):
            refuse(f"column {c} is empty in {len(df) - len(v)} of {len(df)} rows (a reading "
                   "without its bracket cannot be drawn against it)")
        if lo is not None and (v < lo).any():
            refuse(f"column {c} holds {as_number(v[v < lo].iloc[0])} (below {lo})")
        if hi is not None and (v > hi).any():
            refuse(f"column {c} holds {as_number(v[v > hi].iloc[0])} (above {hi})")
    for c in COUNTS:
        if c in df.columns:
            v = pd.to_numeric(df[c], errors="coerce").dropna()
            frac = v != np.floor(v)
            if frac.any():
                refuse(f"column {c} holds {as_number(v[frac].iloc[0])} (not a whole number)")
    if kind == "eval" and "split" in df.columns:
        odd = sorted(set(df["split"].astype(str)) - set(EVAL_SPLITS))
        if odd:
            refuse(f"split {odd[0]!r} (the splits are {', '.join(EVAL_SPLITS)})")
    if kind == "eval" and "ceiling_bits" in df.columns:
        ceiling = pd.to_numeric(df["ceiling_bits"], errors="coerce")
        for c in ("bits_per_person", "unfloored_bits_per_person", "floor_bits_per_person",
                  "name_blind_bits_per_person", "structure_blind_bits_per_person"):
            if c in df.columns:
                over = pd.to_numeric(df[c], errors="coerce") > ceiling * (1 + 1e-9) + 1e-9
                if over.any():
                    refuse(f"column {c} holds {as_number(df.loc[over, c].iloc[0])}, above the "
                           f"row's ceiling of {as_number(ceiling[over].iloc[0])} bits")
    if kind == "item":
        _check_items(df, refuse)
    if kind == "stage" and {"started", "finished"} <= set(df.columns):
        a, b = (pd.to_numeric(df[c], errors="coerce") for c in ("started", "finished"))
        if (b < a).any():
            refuse(f"stage {df.loc[b < a, 'stage'].iloc[0]} ends before it starts")


def _check_items(df: pd.DataFrame, refuse) -> None:
    """A cloze item's choices are a JSON list of two or more strings and its label indexes one."""
    for _, r in df.iterrows():
        try:
            choices = json.loads(r["choices"]) if isinstance(r["choices"], str) else None
        except ValueError:
            choices = None
        if not (isinstance(choices, list) and len(choices) >= 2
                and all(isinstance(c, str) for c in choices)):
            refuse(f"item {as_number(r['item'])}'s choices are not a JSON list of two or more strings")
        label = pd.to_numeric(pd.Series([r["label"]]), errors="coerce").iloc[0]
        if not (label == label and float(label).is_integer() and 0 <= label < len(choices)):
            refuse(f"item {as_number(r['item'])}'s label {r['label']!r} is not the index of one of "
                   f"its {len(choices)} choices")


def refuse_item_counts(out: dict) -> None:
    """The eval rows' ``cloze_items`` is the number of item rows of their dataset, where both are
    given, and one number for every run of a dataset (runs of one dataset score the same items)."""
    ev, it = out.get("eval"), out.get("item")
    if ev is None or "cloze_items" not in ev.columns:
        return
    for h, g in ev.dropna(subset=["cloze_items"]).groupby("dataset_hash"):
        counts = sorted(g["cloze_items"].astype(int).unique())
        if len(counts) > 1:
            raise UserError(f"the eval rows of dataset {str(h)[:12]} say {counts[0]} and "
                            f"{counts[1]} cloze items; runs of one dataset score the same items: "
                            "evaluate them again with depthbench")
        if it is not None and "dataset_hash" in it.columns:
            n = int((it["dataset_hash"] == h).sum())
            if n and n != counts[0]:
                raise UserError(f"the eval rows of dataset {str(h)[:12]} say {counts[0]} cloze "
                                f"items but its item rows hold {n}; give the item rows that eval "
                                "wrote beside them")


def _check_schedules(col: pd.Series, kind: str, path: Path) -> None:
    """A schedule column holds schedule specs (a serve row of a random model: none)."""
    for v in col.unique():
        if v is None or (isinstance(v, float) and np.isnan(v)):
            if kind == "serve":
                continue
            raise UserError(f"result file {path}: {_a(kind)} row has no schedule; regenerate it "
                            "with depthbench")
        try:
            parse_schedule(v)
        except UserError:
            raise UserError(f"result file {path}: schedule {v!r} is not a schedule spec; "
                            "regenerate it with depthbench") from None
