"""docs/calibration.md is its rows: the recipes are the packaged calibration specs, every reading
is recomputed by hand from the kept rows, and the page is what the generator gives."""

import json
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from depthbench.report.calibration import (
    SPECS,
    Readings,
    calibration_rows,
    findings,
    page,
    pipeline_rows,
    recipe_line,
    recipe_specs,
    script_rows,
)
from depthbench.report.load import final_rows, labelled, load_rows
from depthbench.report.spread import spread_table

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "docs" / "calibration"


def test_the_committed_page_is_what_its_rows_give():
    assert page(FOLDER) == (ROOT / "docs" / "calibration.md").read_text(), "run depthbench docs"


def test_every_recipe_is_a_spec_and_every_row_a_recipe_of_one():
    rows = calibration_rows(FOLDER)
    specs = set(recipe_specs())   # the text task's recipes (text-NAME) are not this page's
    assert set(rows["recipe"]) == specs and specs < {p.stem for p in SPECS.glob("*.toml")}
    for name in specs:   # a recipe reads one source: its pipeline rows, else the script's
        assert rows.loc[rows["recipe"] == name, "source"].nunique() == 1, name


def test_every_spec_pins_the_threads_its_kept_rows_were_trained_on():
    """A thread count can act like another seed on a CPU: a spec rerun must train on the
    threads its kept rows record (torch's default would follow the machine's cores)."""
    for name in recipe_specs():
        spec = tomllib.loads((SPECS / f"{name}.toml").read_text())
        rows = pd.read_csv(FOLDER / "rows" / name / "run.csv")
        assert set(rows["threads"]) == {spec["train"]["set"]["threads"]}, name


def test_the_scripts_rows_read_as_written():
    """Each JSON row's list of readings at depths 1-16, read back by hand: the best reading over
    the depths in % of the ceiling and the depth-averaged exact match."""
    r = Readings(script_rows(FOLDER / "runs.jsonl"))
    for line in (FOLDER / "runs.jsonl").read_text().splitlines():
        row = json.loads(line)
        arm, _, budget = row["schedule"].partition("@")
        b = float(budget) if budget else None
        for split, pre in (("eval_reordered", ""), ("eval_seen_order", "seen_")):
            want = 100 * max(row[f"{pre}bits"]) / row[f"{pre}ceiling_bits"]
            assert r.best(row["recipe"], arm, b, split) == pytest.approx(want), row["recipe"]
        assert r.em(row["recipe"], arm, b) == pytest.approx(np.mean(row["exact_match"]))


def test_pipeline_rows_read_as_the_report_reads_them():
    """Every kept recipe's best readings are those of the report's own seed-spread table (a
    second reading of the same rows), and its arms those its spec trains."""
    kept = [p for p in sorted((FOLDER / "rows").glob("*")) if p.is_dir()]
    assert kept, "docs/calibration/rows/ holds no recipe's rows"
    for folder in kept:
        r = Readings(pipeline_rows(folder, folder.name))
        fin = final_rows(labelled(load_rows([folder]))["eval"])
        table = spread_table(fin)
        for _, t in table.iterrows():
            budget = float(t["budget"].rstrip("%")) / 100 if "budget" in table.columns else None
            for split, col in (("eval_reordered", "best, % of ceiling (held-out)"),
                               ("eval_seen_order", "best, % of ceiling (seen)")):
                assert round(r.best(folder.name, t["schedule"], budget, split), 1) == t[col]
        spec = tomllib.loads((SPECS / f"{folder.name}.toml").read_text())
        want = {a.strip("`") for a in recipe_line(folder.name, spec)["arms"].split(", ")}
        assert {a for a, _ in r.arms(folder.name)} == want, folder.name


def test_the_findings_follow_the_rows():
    """A reading changed in the rows changes the finding that states it, and a saturated arm
    is no longer said to read between the brackets."""
    rows = calibration_rows(FOLDER)
    before = findings(Readings(rows))
    sel = (rows["recipe"] == "budget-m64-x1-8-64-512") & (rows["schedule"] == "fixed:4")
    edited = rows.copy()
    edited.loc[sel, "bits_per_person"] = edited.loc[sel, "ceiling_bits"]
    after = findings(Readings(edited))
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(changed) == 1 and "`fixed:4` at 100% 100% held-out" in changed[0][1]
    assert "not `fixed:4` at 100%" in changed[0][1]


def test_a_recipe_without_an_arm_is_named_in_the_error():
    r = Readings(pd.DataFrame(script_rows(FOLDER / "runs.jsonl")))
    with pytest.raises(KeyError, match="fixed:7 on eval_reordered in calibration recipe name-n768"):
        r.best("name-n768", "fixed:7")
