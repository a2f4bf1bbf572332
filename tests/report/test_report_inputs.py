"""The report's inputs: rows it refuses in one line, and nothing drawn that its rows cannot
support (a spread of one seed, an interval of identical readings, a run read before its end)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from refusals import ROOT, TABLE3, TEXT, cli, one_line_exit_2

from depthbench.cli.main import main
from depthbench.report import load_rows
from depthbench.report.compare import nll_comparisons
from depthbench.report.load import fmt_value
from depthbench.stats import t_interval


def _rows(tmp: Path, src: Path, edit=None, kinds=("eval",)) -> Path:
    """A copy of a committed report's rows (``kinds`` of them), ``edit`` applied to each."""
    d = tmp / "rows"
    d.mkdir(exist_ok=True)
    for k in kinds:
        df = pd.read_csv(src / f"{k}.csv")
        (d / f"{k}.csv").write_text((edit(df, k) if edit else df).to_csv(index=False))
    return d


def test_one_seed_is_never_tabled_as_a_spread():
    assert fmt_value(3.1, float("nan")) == "3.100 (one seed)"
    assert fmt_value(3.1, 0.02) == "3.100 ± 0.020"


def test_identical_readings_give_no_interval_and_no_verdict():
    m, h, n = t_interval([0.01, 0.01, 0.01, 0.01])
    assert m == 0.01 and np.isnan(h) and n == 4
    ev = pd.read_csv(TEXT / "eval.csv")
    ev = ev[ev["split"] == "validation"]
    ref = ev[(ev["schedule"] == "uniform:1-16") & ev["matched_to"].isna()]
    copy = ref.assign(schedule="fixed:4", nll=ref["nll"] * 1.01, run=ref["run"] + "-copy")
    c = nll_comparisons(pd.concat([ref, copy]), "uniform:1-16", "nll")
    assert c["verdict"].iloc[0].startswith("not resolved (8 seeds, every one the same value")


@pytest.mark.parametrize("column,value,needle", [
    ("modeled_train_flops", np.inf, "not a finite number"),
    ("train_cpu_s", np.inf, "not a finite number"),
    ("floor_bits_per_person", np.nan, "is empty in 1 of"),
])
def test_infinite_or_missing_readings_are_refused(tmp_path, column, value, needle):
    def edit(df, _):
        df[column] = df[column].astype(float)
        df.loc[df.index[0], column] = value
        return df
    r = cli(["report", _rows(tmp_path, TABLE3, edit), "--out", tmp_path / "out"])
    one_line_exit_2(r, needle)
    assert not (tmp_path / "out").exists()


def test_a_mean_exit_depth_below_one_is_refused(tmp_path):
    src = ROOT / "reports" / "quickstart" / "rows"
    r = cli(["report", _rows(tmp_path, src, lambda df, _: df.assign(mean_depth=-3.0),
                              ("serve",)), "--out", tmp_path / "out"])
    one_line_exit_2(r, "mean_depth holds -3")


@pytest.mark.parametrize("edit,needle", [
    (lambda df: df.assign(label=7), "is not the index of one of its 4 choices"),
    (lambda df: df.assign(choices="a, b, c"), "not a JSON list"),
    (lambda df: df.assign(choices=json.dumps(["only one"])), "not a JSON list"),
])
def test_cloze_items_must_name_one_of_their_choices(tmp_path, edit, needle):
    d = _rows(tmp_path, TEXT, lambda df, k: edit(df) if k == "item" else df, ("eval", "item"))
    one_line_exit_2(cli(["report", d, "--out", tmp_path / "out"]), needle)


def test_the_item_count_is_the_item_rows(tmp_path):
    d = _rows(tmp_path, TEXT, lambda df, k: df.iloc[:100] if k == "item" else df,
              ("eval", "item"))
    one_line_exit_2(cli(["report", d, "--out", tmp_path / "out"]),
                     "say 256 cloze items but its item rows hold 100")
    # without item rows the report does not point at them
    (d / "item.csv").unlink()
    assert cli(["report", d, "--out", tmp_path / "out"]).exit_code == 0
    md = (tmp_path / "out" / "README.md").read_text()
    assert "rows/item.csv" not in md and "256 items (their rows are not among these)" in md


def test_a_sweep_and_a_grid_are_not_reported_together(tmp_path):
    r = cli(["report", TABLE3, ROOT / "reports" / "table3-lr" / "rows", "--out", tmp_path / "o"])
    one_line_exit_2(r, "mix an LR sweep's runs")


def test_one_seed_given_twice_is_refused(tmp_path):
    def edit(df, _):
        extra = df[df["run"] == df["run"].iloc[0]].assign(run=lambda x: x["run"] + "-again")
        return pd.concat([df, extra])
    one_line_exit_2(cli(["report", _rows(tmp_path, TABLE3, edit), "--out", tmp_path / "o"]),
                     "would count one seed twice")


def test_a_run_read_before_its_end_is_refused(tmp_path):
    def edit(df, k):
        if k == "eval":   # the first run's rows from before its end
            first = df["run"] == df["run"].iloc[0]
            df.loc[first, "step"] = df.loc[first, "step"] // 2
        return df
    d = _rows(tmp_path, TABLE3, edit, ("eval", "run"))
    one_line_exit_2(cli(["report", d, "--out", tmp_path / "o"]), "before its end at step")


def test_a_loaded_models_rows_are_reported(tmp_path):
    rows = pd.read_csv(TEXT / "eval.csv")
    rows = rows[rows["run"] == rows["run"].iloc[0]].assign(
        run="ouro:ckpt", checkpoint="ouro:ckpt", schedule=np.nan, seed=np.nan, step=np.nan,
        modeled_train_flops=np.nan, wall_clock_s=np.nan, train_cpu_s=np.nan)
    f = tmp_path / "model.csv"
    rows.to_csv(f, index=False)
    ev = load_rows([f])["eval"]
    assert set(ev["schedule"]) == {"ouro:ckpt"} and (ev["seed"] == 0).all()
    r = cli(["report", f, "--out", tmp_path / "out"])
    assert r.exit_code == 0, r.output
    assert "(one seed)" in (tmp_path / "out" / "README.md").read_text()


def test_the_report_takes_serve_rows_without_a_static_baseline(tmp_path):
    """One adaptive mode asked for still runs beside full-depth serving (every speedup's
    baseline); rows with no speedup column (one mode's rows alone) are tabled, not refused."""
    import json
    r = CliRunner().invoke(main, ["serve-bench", "--random", "tiny", "--max-depth", "4",
                                  "--requests", "3", "--modes", "cdb", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [x["mode"] for x in rows] == ["cdb", "static", "full_depth"]
    lone = {k: v for k, v in rows[0].items() if k not in ("speedup", "ceiling", "bound")}
    (tmp_path / "cdb.jsonl").write_text(json.dumps(lone) + "\n")
    r = CliRunner().invoke(main, ["report", str(tmp_path / "cdb.jsonl"), "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    assert "no static baseline" in (tmp_path / "rep" / "README.md").read_text()


def test_a_folder_with_training_runs_reads_their_rows_not_their_logs(tmp_path):
    """An experiment folder holds run directories beside its rows: each run's metrics.jsonl
    (its training log) is passed over, the rows are read as from the rows alone."""
    rows = _rows(tmp_path, TABLE3)
    run = tmp_path / "rows" / "runs" / "r"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 3.0}) + "\n")
    (tmp_path / "b").mkdir()
    alone = load_rows([_rows(tmp_path / "b", TABLE3)])
    got = load_rows([rows])
    assert set(got) == set(alone) == {"eval"}
    pd.testing.assert_frame_equal(got["eval"], alone["eval"])
