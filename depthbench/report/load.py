"""Reading a report's row files: each kind's schema and ranges checked, runs that cannot be
compared refused, and the grid's clock from its stage rows."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from depthbench.axes import BUDGET, GROUPS, LR
from depthbench.errors import UserError
from depthbench.report.checks import as_number, checked_rows, refuse_item_counts
from depthbench.rows import ROW_KEYS, SCHEMA, budget_label


class Sections(NamedTuple):
    """What a kind of rows adds to the page: titled tables, comparison sentences, extra files."""
    tables: list[tuple[str, pd.DataFrame]]
    notes: list[str]
    files: dict[str, str]


def _cut_short(path: Path) -> bool:
    """Whether the file's last row stops before its end (a truncated file): a last line without
    its newline that is not a whole JSON object, or a CSV line with fewer fields than the header
    (a file saved without a final newline is fine)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0 or (f.seek(size - 1) >= 0 and f.read(1) == b"\n"):
            return False
        f.seek(0)
        head = f.readline()
        f.seek(max(0, size - (1 << 20)))
        last = f.read().rsplit(b"\n", 1)[-1]
    if not last.strip():
        return False
    try:
        if path.suffix == ".jsonl":
            return not isinstance(json.loads(last), dict)
        fields = next(csv.reader([last.decode()]))
        return len(fields) < len(next(csv.reader([head.decode()])))
    except (ValueError, UnicodeDecodeError, StopIteration):
        return True


def _read(path: Path) -> pd.DataFrame:
    try:
        cut = _cut_short(path)
    except OSError as e:
        raise UserError(f"cannot read result file {path}: {e.strerror}") from None
    if cut:
        raise UserError(f"result file {path} ends in the middle of a row (truncated?); "
                        "regenerate it with depthbench")
    try:
        if path.suffix == ".jsonl":
            _check_json_lines(path)
            return pd.read_json(path, lines=True, dtype=False)   # as written: 0.0 stays a float
        return pd.read_csv(path)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read result file {path}: {str(e)[:100]}") from None


def _check_json_lines(path: Path) -> None:
    """Every non-blank line of a ``.jsonl`` result file is a row, a JSON object (pandas reads
    a list or a string there as something else, or fails with its own words)."""
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if line.strip() and not line.lstrip().startswith("{"):
                raise UserError(f"result file {path} line {i} is not a row (a JSON object); "
                                "regenerate it with depthbench")


def _training_log(f: Path) -> bool:
    """A run directory's ``metrics.jsonl``: its training log, read as ``curve`` rows only
    through ``depthbench train --results``."""
    return f.name == "metrics.jsonl" and (f.parent / "run.json").is_file()


def load_rows(paths: list[Path]) -> dict[str, pd.DataFrame]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():   # a training run's log is no result rows (its eval/ rows are)
            found = [f for f in sorted(p.rglob("*.jsonl")) if not _training_log(f)]
            # a CSV next to a JSONL of the same name is the same rows
            found += [c for c in sorted(p.rglob("*.csv")) if not c.with_suffix(".jsonl").exists()]
            files += found
        elif _training_log(p):
            raise UserError(f"{p} is a training run's log, not result rows; evaluate the run "
                            f"(depthbench eval {p.parent}), or train with --results DIR for its "
                            "curve rows")
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"result path {p} does not exist")
    if not files:
        runs = [str(p) for p in map(Path, paths) if (p / "run.json").is_file()]
        raise UserError(f"no result files (.jsonl or .csv) under {', '.join(map(str, paths))}"
                        + (f"; {runs[0]} is a training run: evaluate it first (depthbench eval "
                           f"{runs[0]} writes its rows under {runs[0]}/eval)" if runs else ""))
    # a file named twice (a directory and a file in it, or a path spelled two ways) is read once
    files = list({f.resolve(): f for f in files}.values())
    kinds: dict[str, list[pd.DataFrame]] = {k: [] for k in SCHEMA}
    for f in files:
        df = _read(f)
        df["_file"] = str(f)
        if df.empty:
            continue
        if "kind" in df.columns:
            unknown = sorted(set(df["kind"].astype(str)) - set(SCHEMA))
            if unknown:
                raise UserError(f"result file {f} has rows of unknown kind {unknown[0]!r}; "
                                f"known kinds: {', '.join(SCHEMA)}")
            for kind, part in df.groupby("kind", sort=False):
                kinds[kind].append(checked_rows(part.reset_index(drop=True), kind, f))
            continue
        kind = _kind(set(df.columns))
        if kind is not None:
            kinds[kind].append(checked_rows(df, kind, f))
    out = {k: pd.concat(v, ignore_index=True) for k, v in kinds.items() if v}
    if "item" in out:   # every eval of a grid writes its dataset's items: the same rows, once
        df = out["item"]
        out["item"] = df[~df.drop(columns="_file").astype(str).duplicated()].reset_index(drop=True)
    if not out:
        raise UserError("none of the given files holds depthbench result rows")
    for kind, df in out.items():
        _refuse_duplicates(df, kind)
    _refuse_mixed_datasets(out)
    refuse_item_counts(out)
    ev = out.get("eval")
    if ev is not None and LR.column in ev.columns and ev[LR.column].isna().any() \
            and ev[LR.column].notna().any():
        raise UserError("the rows mix an LR sweep's runs (rows with lr_sweep) with a grid's; "
                        "a sweep only chooses LRs and its report compares no arms: report "
                        "the sweep and the grid apart")
    if "eval" in out:
        _refuse_incomparable(out["eval"])
        _refuse_unfinished(out["eval"], out.get("run"))
        _refuse_seed_twice(out["eval"])
    return {k: df.drop(columns="_file") for k, df in out.items()}


def _refuse_incomparable(ev: pd.DataFrame) -> None:
    """Runs compared on paired seeds must be read alike: at their final checkpoints every run of
    a split covers the same serving depths and, on text, the same number of tokens."""
    fin = final_rows(ev)
    for split, g in fin.groupby("split"):
        depths = _unlike(g, "depth")
        if depths:
            (r1, d1), (r2, d2) = depths
            raise UserError(f"{split}: run {r1} is read at depths {_span(d1)} and run {r2} at "
                            f"{_span(d2)}; paired comparisons need every run at the same depths: "
                            "evaluate them with the same --depths")
        tokens = _unlike(g, "tokens") if "tokens" in g.columns and g["tokens"].notna().any() \
            else None
        if tokens:
            (r1, t1), (r2, t2) = tokens
            raise UserError(f"{split}: run {r1} is read over {t1[0]} tokens and run {r2} "
                            f"over {t2[0]}; runs compared must be read over the same "
                            "validation windows (the same dataset and --max-people)")


def _refuse_unfinished(ev: pd.DataFrame, runs: pd.DataFrame | None) -> None:
    """A run whose latest eval rows are from before the end its run row records (a run read
    while it trained, or killed) is not read as its result."""
    if runs is None or "steps" not in runs.columns or "step" not in ev.columns:
        return
    planned = runs.dropna(subset=["steps"]).drop_duplicates("run").set_index("run")["steps"]
    last = ev.groupby("run")["step"].max()
    both = last.index.intersection(planned.index)
    early = both[(last[both] < planned[both]).to_numpy()]
    if len(early):
        r = early[0]
        raise UserError(f"run {r} is read at step {as_number(last[r])}, before its end at step "
                        f"{as_number(planned[r])}; evaluate it once it has finished (depthbench eval "
                        "reads a run's final checkpoint), or leave its run row out")


def _refuse_seed_twice(ev: pd.DataFrame) -> None:
    """One arm's seed is one run: two runs of the same arm (schedule, matched reference, LR,
    budget or length) and seed would be counted as two seeds."""
    arm = [c for c in ("schedule", "matched_to", LR.column, *GROUPS) if c in ev.columns]
    if "seed" not in ev.columns or "run" not in ev.columns:
        return
    per = ev.drop_duplicates("run")[["run", "seed", *arm]].astype(str)
    twice = per[per.duplicated(["seed", *arm], keep=False)]
    if not twice.empty:
        a, b = twice["run"].iloc[:2]
        raise UserError(f"runs {a} and {b} are the same arm ({twice['schedule'].iloc[0]}) and "
                        f"seed {twice['seed'].iloc[0]}, which would count one seed twice; give "
                        "each seed's run once (runs of different experiments in separate reports)")


def _unlike(g: pd.DataFrame, column: str):
    """Two runs whose sets of ``column`` values differ, each with its set, or None."""
    per = g.groupby("run")[column].agg(lambda v: tuple(sorted(set(v))))
    if per.nunique() <= 1:
        return None
    first = list(per.items())[0]
    return first, next((r, v) for r, v in per.items() if v != first[1])


def _span(depths: tuple) -> str:
    d = list(depths)
    return f"{d[0]}-{d[-1]}" if d == list(range(d[0], d[-1] + 1)) else ",".join(map(str, d))


def _refuse_duplicates(df: pd.DataFrame, kind: str) -> None:
    named = ROW_KEYS[kind]
    # serve: repeated benchmarks are separate rows unless every value repeats (a copied file)
    key = [c for c in (named or df.columns) if c in df.columns and c != "_file"]
    key += [BUDGET.column] if BUDGET.column in df.columns and BUDGET.column not in key else []
    dup = df.duplicated(key, keep=False)
    if not dup.any():
        return
    first = df[dup].iloc[0]
    same = df[dup & (df[key].astype(str) == first[key].astype(str)).all(axis=1)]
    where = sorted(set(same["_file"]))
    what = ", ".join(f"{c} {first[c]}" for c in key) if named else "every column"
    raise UserError(f"the {kind} row ({what}) is given {len(same)} times (in "
                    f"{' and '.join(where[:2])}); give each run's rows once, and runs of "
                    "different experiments under different names")


def _refuse_mixed_datasets(rows: dict) -> None:
    hashes: dict[str, str] = {}
    for kind in ("eval", "run", "curve", "probe", "task", "item"):
        df = rows.get(kind)
        if df is None or "dataset_hash" not in df.columns:
            continue
        for h, f in df.dropna(subset=["dataset_hash"]).groupby("dataset_hash")["_file"].first().items():
            hashes.setdefault(str(h), f)
    if len(hashes) > 1:
        (h1, f1), (h2, f2) = sorted(hashes.items())[:2]
        raise UserError(f"the rows come from {len(hashes)} datasets ({h1[:12]} in {f1}, "
                        f"{h2[:12]} in {f2}); runs trained on different datasets cannot be "
                        "compared as paired seeds: report one dataset's rows at a time")


def _kind(cols: set) -> str | None:
    if {"depth", "split", "bits_per_byte"} <= cols:
        return "eval"
    for kind, (ident, _, _) in SCHEMA.items():
        if ident <= cols:
            return kind
    return None


def group_col(df: pd.DataFrame) -> str | None:
    """The grid axis the rows hold (a budgets or a lengths grid), or None."""
    return next((c for c in GROUPS if c in df.columns and df[c].notna().any()), None)


def final_rows(ev: pd.DataFrame) -> pd.DataFrame:
    """Rows of each run's final (latest) checkpoint."""
    last = ev.groupby("run")["step"].transform("max")
    return ev[ev["step"] == last]


def fmt_value(mean: float, sd: float, digits: int = 3) -> str:
    if pd.isna(mean):
        return "n/a"
    if pd.isna(sd):   # one seed: no spread to show (never "± 0")
        return f"{mean:.{digits}f} (one seed)"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


# the paper's terminal NLL: training NLL over the final 200 of about 4,800 updates
TERMINAL_SHARE = 0.04


def arm_label(schedule: str, matched_to) -> str:
    """A FLOP-matched run's arm, told apart from its schedule's full-budget runs:
    ``uniform:1-16~fixed-first:0.67:4:1-16`` is uniform:1-16 at the FLOPs of the schedule
    after "~" (the paper's "Uniform, matched")."""
    return f"{schedule}~{matched_to}" if isinstance(matched_to, str) and matched_to else schedule


CURVE_POINTS = 100  # a committed training curve keeps about this many points per run


def report_row_files(rows: dict) -> dict[str, str]:
    """The rows a report is drawn from, as ``rows/KIND.csv`` beside it, so that every number
    in it can be recomputed (``depthbench report REPORT/rows``): every row, except that a
    training curve keeps about CURVE_POINTS points per run and all of its final updates (the
    terminal NLL's window)."""
    out = {}
    for kind, df in rows.items():
        if kind == "curve":
            keep = []
            for _, g in df.groupby("run", sort=False):
                g = g.sort_values("step")
                last = g["step"].max()
                stride = max(1, len(g) // CURVE_POINTS)
                final = (g["step"] > last * (1 - 2 * TERMINAL_SHARE)).to_numpy()
                mask = (np.arange(len(g)) % stride == 0) | final
                keep.append(g[mask])
            df = pd.concat(keep, ignore_index=True)
        out[f"rows/{kind}.csv"] = df.to_csv(index=False)
    return out


def labelled(rows: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The rows with each matched run's schedule named as its arm (``arm_label``); a new dict,
    the caller's is left as it was."""
    out = {}
    for kind, df in rows.items():
        if "matched_to" in df.columns and "schedule" in df.columns:
            df = df.assign(schedule=[arm_label(s, m) for s, m in
                                     zip(df["schedule"], df["matched_to"])])
        if LR.column in df.columns and "schedule" in df.columns:   # a sweep: arm @ lr=...
            # at budgets, each budget is an arm of its own: arm @ 15% @ lr=...
            at = [f"{s} @ {budget_label(b)}" if pd.notna(b) else s for s, b in
                  zip(df["schedule"], df[BUDGET.column] if BUDGET.column in df.columns else [None] * len(df))]
            df = df.assign(schedule=[f"{s} @ lr={lr:g}" if pd.notna(lr) else s
                                     for s, lr in zip(at, df[LR.column])])
        out[kind] = df
    return out


def busy_seconds(started: pd.Series, finished: pd.Series) -> float:
    """Wall seconds during which at least one stage ran: the union of the stages' intervals, so
    that the idle time between two invocations of a resumed grid is not counted (nan if the
    rows hold no interval)."""
    spans = sorted((float(a), float(b)) for a, b in zip(started, finished) if a == a and b == b)
    if not spans:
        return float("nan")
    total, (lo, hi) = 0.0, spans[0]
    for a, b in spans[1:]:
        if a > hi:
            total, lo = total + hi - lo, a
        hi = max(hi, b)
    return total + hi - lo


def grid_clock(st: pd.DataFrame) -> dict:
    """How long a ``depthbench run`` grid took, from its stage rows: wall seconds while a stage
    ran (``busy_seconds``; the report stage aside), the pool's workers,
    the seconds its stages ran, summed per command, and the largest peak resident memory of
    a process that ran them (MB; None where the rows do not say)."""
    def col(name):
        return (pd.to_numeric(st[name], errors="coerce") if name in st
                else pd.Series(float("nan"), index=st.index))
    workers, rss = col("workers").dropna().unique(), col("peak_rss_mb").max()
    return {"wall_s": busy_seconds(col("started"), col("finished")),
            "workers": int(workers[0]) if len(workers) == 1 else None,
            "peak_rss_mb": None if pd.isna(rss) else float(rss),
            "stage_s": {c: float(v) for c, v in col("stage_s").groupby(st["command"]).sum().items()},
            "stages": {c: int(v) for c, v in st["command"].value_counts().items()}}


def depth_spans(depths: list[int]) -> str:
    """[1, 2, 5, 6, 7] -> '1-2, 5-7'."""
    out, start = [], None
    for i, d in enumerate(depths):
        if start is None:
            start = d
        if i + 1 == len(depths) or depths[i + 1] != d + 1:
            out.append(f"{start}-{d}" if d != start else f"{d}")
            start = None
    return ", ".join(out)
