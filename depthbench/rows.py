"""Result rows: the one writer every stage uses (torch-free).

A result file is a list of flat dicts written twice, as ``BASE.csv`` and ``BASE.jsonl``, each
atomically. Every row carries a ``kind`` column naming what it is, and ``depthbench report``
dispatches on it:

    eval    one serving depth of one checkpoint on one split (evaluate.run_eval)
    probe   one serving depth of an update-benefit probe (probe.run_probe)
    serve   one batching mode of a serving benchmark (serving.bench.run_bench)
    curve   one logged training step (train.run_train)
    run     one training run's summary (train.run_train)
    task    one lm-eval task at one serving depth (evaluate.harness)
    stage   one finished stage of a ``depthbench run`` grid: its start, end and seconds
    item    one cloze item of a text dataset, as its eval rows scored it (evaluate.text)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from depthbench.fsio import atomic_write_many

# the kinds of token a person-task row's NLL is split by (eval columns row_nll/TYPE; slot 0 of a
# row is the asked fact, the rest its record)
TOKEN_TYPES = ("name", "asked_key", "asked_value", "later_keys", "later_values", "end")

KINDS = ("eval", "probe", "serve", "curve", "run", "task", "stage", "item")

# Every column a stage writes itself (key and measured columns of every kind). A tag (a
# config's ``tags``: extra columns of every row) may not take one of these names, nor contain
# "/" or "@" (per-attribute, per-token-type and per-tier columns), so no tag can replace a
# measured value or relabel a row.
RESERVED_COLUMNS = frozenset("""
    kind run schedule seed step split depth checkpoint dataset_hash source mode exit kv_policy
    width lookahead rate profile switch_step
    K flops loss lr tokens wall_clock
    bits_per_person unfloored_bits_per_person ceiling_bits exact_match facts people
    floor_bits_per_person floor_exact_match name_blind_bits_per_person name_blind_exact_match
    structure_blind_bits_per_person structure_blind_exact_match
    modeled_train_flops n_grad_loops nll params
    people_trained value_nll wall_clock_s final_loss steps cpu_clock cpu_s train_cpu_s
    batches ci95 depth_a depth_b nll_diff updates_after_switch value_nll_diff value_ci95
    ceiling core_launches decode_fraction_of_ceiling decode_speedup decode_tokens_per_s
    fraction_of_ceiling fraction_of_gain host_syncs itl_p50_ms itl_p90_ms itl_p99_ms kv_cache_mb
    launches_per_token_core launches_per_token_finish launches_per_token_prefill
    launches_per_token_start mean_depth output_tokens padding_waste paper_bound paper_fraction
    prefill_s rows_per_launch speedup
    steady_tokens_per_s steady_window_s time_core time_finish time_prefill time_start
    tokens_per_s ttft_p50_ms ttft_p90_ms ttft_p99_ms wall_s trace_mean
    bound fraction ideal_s speedup_vs_static baseline ideal_launches_per_token_prefill
    ideal_launches_per_token_start ideal_launches_per_token_core ideal_launches_per_token_finish
    bits_per_byte cloze_accuracy cloze_accuracy_mi cloze_items task acc acc_norm acc_mutual_info harness
    cloze_overlap_rule cloze_unigram_rule cloze_bigram_rule cloze_idf_overlap_rule
    cloze_word_unigram_rule cloze_tfidf_rule cloze_trigram_rule cloze_trigram_pmi_rule
    stage command started finished stage_s workers peak_rss_mb
    admit_min min_coda_batch coda_wait pool prefill_chunk stop_at_eos
    item context choices label
    depthbench_version git_commit torch_version accelerator cpu_model threads
""".split())
# kind -> the columns that name one row; two rows with the same key are the same measurement
# given twice (or two runs of one name), which would count as two seeds
ROW_KEYS = {"eval": ["run", "step", "split", "depth"], "probe": ["run", "step", "depth",
                                                                "depth_a", "depth_b"],
            "curve": ["run", "step"], "run": ["run"], "serve": None,
            "task": ["run", "step", "task", "depth"], "stage": ["stage", "started"],
            "item": ["dataset_hash", "item"]}


# kind -> (the columns that identify it, the columns it must have, which of those are numbers)
SCHEMA = {
    "probe": ({"nll_diff", "depth"}, ["run", "step", "depth", "depth_a", "depth_b", "nll_diff",
                                       "ci95"], ["step", "depth", "depth_a", "depth_b", "nll_diff"]),
    # a comparison without the static baseline has no speedup: its rows are tabled, not drawn
    "serve": ({"mode", "tokens_per_s"}, ["mode", "tokens_per_s"], ["tokens_per_s"]),
    "eval": ({"depth", "split", "bits_per_person"},
             ["run", "schedule", "seed", "step", "depth", "split", "nll", "bits_per_person",
              "exact_match", "ceiling_bits", "modeled_train_flops"],
             ["seed", "step", "depth", "nll", "bits_per_person", "exact_match", "ceiling_bits"]),
    "curve": ({"loss", "step", "K"}, ["run", "schedule", "step", "K", "loss", "switch_step"],
               ["step", "K", "loss"]),
    "run": ({"final_loss", "modeled_train_flops"}, ["run", "schedule", "seed", "final_loss",
                                                     "modeled_train_flops"], ["seed", "final_loss"]),
    "task": ({"task", "depth", "harness"}, ["run", "schedule", "seed", "step", "depth", "task"],
             ["seed", "step", "depth"]),
    "stage": ({"stage", "finished"}, ["stage", "command", "finished"], ["finished"]),
    # choices: a JSON list of strings (one column in CSV as in JSONL)
    "item": ({"context", "choices", "label"}, ["dataset_hash", "item", "context", "choices",
                                                "label"], ["item", "label"]),
}


# the eval rows of a text run: (required, numeric) columns in place of the synthetic ones
TEXT_EVAL = (["run", "schedule", "seed", "step", "depth", "split", "nll", "bits_per_byte",
              "modeled_train_flops"], ["seed", "step", "depth", "nll", "bits_per_byte"])


_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def tags_problem(tags) -> str:
    """Why ``tags`` cannot be extra row columns ("" when they can): names are identifiers that
    take no column a stage writes; values are strings, numbers or booleans."""
    if not isinstance(tags, dict):
        return f"must be a table of name = value (got {type(tags).__name__})"
    for name, value in tags.items():
        if isinstance(name, str) and (name in RESERVED_COLUMNS or "/" in name or "@" in name):
            return (f"tag {name!r} would replace a column the toolkit measures or keys rows by; "
                    "rename the tag")
        if not isinstance(name, str) or not _TAG_NAME.fullmatch(name):
            return (f"tag name {name!r} must be a letter or _ followed by letters, digits, "
                    "'_', '.' or '-' (64 characters at most)")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            return f"tag {name!r} must be a string, number or boolean (got {type(value).__name__})"
    return ""


def tag_rows(rows: list[dict], tags: dict) -> list[dict]:
    """``rows`` with the ``tags`` columns added; a tag that names a column a row already has is
    refused (UserError), never written over it."""
    from depthbench.errors import UserError

    for r in rows:
        clash = sorted(set(tags) & set(r))
        if clash:
            raise UserError(f"tag(s) {', '.join(clash)} would replace the measured column(s) of "
                            "the same name; rename the tag(s)")
    return [{**r, **tags} for r in rows]


def row_paths(out: str | Path) -> tuple[Path, Path]:
    """``(BASE.csv, BASE.jsonl)`` for ``out`` given with either suffix or none."""
    out = Path(out)
    base = out.with_suffix("") if out.suffix in (".csv", ".jsonl") else out
    return base.with_name(base.name + ".csv"), base.with_name(base.name + ".jsonl")


def items_base(out: str | Path) -> Path:
    """Where an eval writing to ``out`` puts its cloze items: ``BASE.items.{csv,jsonl}``."""
    csv, _ = row_paths(out)
    return csv.with_name(csv.stem + ".items")


def is_rows_file(path: Path) -> bool:
    """Whether ``path`` holds depthbench rows (a ``kind`` column first, or JSON rows with a
    ``kind``): the only files a writer of rows replaces."""
    from depthbench.fsio import head_text
    text = head_text(path)
    if not text.strip():   # rows of none (a planned grid's stage rows): nothing to lose
        return True
    first = text.split("\n", 1)[0]
    if path.suffix == ".csv":
        return first.split(",", 1)[0].strip('"') == "kind"
    try:
        return "kind" in json.loads(first)
    except (ValueError, TypeError):
        return False


def row_files(rows: list[dict], out: str | Path, kind: str) -> dict[Path, str]:
    """``{BASE.csv: text, BASE.jsonl: text}`` of ``rows`` with ``kind`` stamped on each, and
    every result row's provenance (``provenance.COLUMNS``; a row that has them keeps its own;
    ``item`` rows are questions, not results), for writing together with a command's other
    outputs (``fsio.atomic_write_many``)."""
    import pandas as pd

    from depthbench.provenance import provenance
    if kind not in KINDS:
        raise ValueError(f"unknown row kind {kind!r}")
    for r in rows:   # every writer's rows hold their kind's columns (the report reads them)
        required = TEXT_EVAL[0] if kind == "eval" and "bits_per_byte" in r else SCHEMA[kind][1]
        missing = [c for c in required if c not in r]
        if missing:
            raise ValueError(f"a {kind} row lacks its column(s) {', '.join(missing)}")
    stamp = {} if kind == "item" else provenance()
    rows = [{"kind": kind, **{k: v for k, v in r.items() if k != "kind"},
             **{k: v for k, v in stamp.items() if k not in r}} for r in rows]
    csv, jsonl = row_paths(out)
    from depthbench.fsio import refuse_foreign
    refuse_foreign((csv, jsonl), is_rows_file)
    return {csv: pd.DataFrame(rows).to_csv(index=False),
            jsonl: "".join(json.dumps(r) + "\n" for r in rows)}


def write_rows(rows: list[dict], out: str | Path, kind: str) -> tuple[Path, Path]:
    """Stamp ``kind`` on every row and write CSV and JSONL side by side: both or neither."""
    atomic_write_many(row_files(rows, out, kind))
    return row_paths(out)


def budget_label(b: float) -> str:
    """A FLOP budget (a fraction of the full one) as reports and a spec's ``arm_set`` name it:
    whole percents (15%)."""
    return f"{round(100 * b)}%"
