"""A run's training log, ``metrics.jsonl``: one row per logged step and per evaluation, appended
as training goes (``train.loop``), each row checked when it is read back (by the trainer on
resume, the train stage's curve rows, trackers' replays and the calibration)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from depthbench.errors import UserError
from depthbench.fsio import atomic_write_text
from depthbench.runtime import Runtime


def write_metrics(path: Path, rows: list[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def append_metrics(path: Path, row: dict, rt: Runtime) -> None:
    if rt.is_main:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def read_metrics(path: Path) -> list[dict]:
    """Rows of metrics.jsonl; a last line cut short by a crash mid-write is dropped."""
    if not path.is_file():
        return []
    rows = []
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise UserError(f"{path} is not text (corrupt); delete the run or restore the file") \
            from None
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise UserError(f"{path} is corrupt at line {i + 1}; delete the run or restore "
                                "the file") from None
            continue
        problem = _metrics_row_problem(row)
        if problem:
            raise UserError(f"{path} line {i + 1}: {problem} (edited or corrupt); delete the run "
                            "or restore the file")
        rows.append(row)
    return rows


def _metrics_row_problem(row) -> str:
    """Why a training-log row is not one the trainer writes ("" when it is)."""
    if not isinstance(row, dict):
        return "a row must be a JSON object"
    if type(row.get("step")) is not int or row["step"] < 0:
        return f"'step' must be an integer >= 0 (got {row.get('step')!r})"
    for key, value in row.items():
        if key == "step" or (key == "eval" and isinstance(value, dict)):
            continue
        if key == "K" and (type(value) is not int or value < 1):
            return f"'K' must be an integer >= 1 (got {value!r})"
        if value is not None and not isinstance(value, str) and (
                type(value) not in (int, float) or not math.isfinite(value)):
            if not (key == "loss" and type(value) is float):  # a NaN loss is logged as measured
                return f"{key!r} must be a number (got {value!r})"
    return ""


def metrics_rows(run_dir: str | Path) -> list[dict]:
    return read_metrics(Path(run_dir) / "metrics.jsonl")

