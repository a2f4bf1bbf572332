"""Result rows and their tags: no tag takes a measured or key column, a forged tag changes no
reading, row writers replace only rows."""

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthbench.cli.main import main
from depthbench.config import EvalConfig, ProbeConfig, ServeConfig, TrainJob
from depthbench.errors import UserError
from depthbench.rows import RESERVED_COLUMNS, tag_rows, tags_problem

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(st.sampled_from(sorted(RESERVED_COLUMNS)), st.one_of(st.integers(), st.text(max_size=5)))
def test_no_tag_can_take_a_measured_or_key_column(name, value):
    assert "would replace" in tags_problem({name: value})
    for cls, extra in ((EvalConfig, {"run": "r"}), (ProbeConfig, {"run": "r"}),
                       (ServeConfig, {"random": "tiny"}), (TrainJob, {"data": "d", "out": "o"})):
        with pytest.raises(UserError, match="would replace"):
            cls.from_dict({**extra, "tags": {name: value}})


@SETTINGS
@given(st.dictionaries(st.sampled_from(["bits_per_person", "schedule", "mode", "depth", "x"]),
                       st.integers(), min_size=1),
       st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.integers()))
def test_tag_rows_adds_columns_and_never_overwrites_one(row, tags):
    clash = set(row) & set(tags)
    if clash:
        with pytest.raises(UserError, match="would replace"):
            tag_rows([row], tags)
    else:
        out = tag_rows([row], tags)[0]
        assert {k: out[k] for k in row} == row and {k: out[k] for k in tags} == tags


def test_a_forged_tag_in_an_eval_config_changes_no_reading(trained_run, tmp_path):
    cfg = tmp_path / "eval.toml"
    cfg.write_text(f'run = "{trained_run}"\ndepths = "1"\n[tags]\nexperiment = "a"\n')
    r = CliRunner().invoke(main, ["eval", "--config", str(cfg), "--out", str(tmp_path / "e")])
    assert r.exit_code == 0, r.output
    row = json.loads((tmp_path / "e.jsonl").read_text().splitlines()[0])
    assert row["experiment"] == "a" and row["bits_per_person"] < row["ceiling_bits"]


def test_a_split_given_twice_is_evaluated_once(trained_run, tmp_path):
    r = CliRunner().invoke(main, ["eval", str(trained_run), "--depths", "1,2", "--split",
                                  "eval_reordered", "--split", "eval_reordered", "--out",
                                  str(tmp_path / "e")])
    assert r.exit_code == 0, r.output
    rows = pd.read_json(tmp_path / "e.jsonl", lines=True)
    assert len(rows) == 2 and not rows.duplicated(["split", "depth"]).any()


def test_row_writers_replace_only_rows(tmp_path):
    from depthbench.rows import write_rows
    mine = tmp_path / "notes.jsonl"
    mine.write_text('{"my": "notes"}\n')
    row = {"run": "r", "schedule": "uniform:1-4", "switch_step": None, "step": 1, "K": 1,
           "loss": 1.0}
    with pytest.raises(UserError, match="not a file depthbench wrote"):
        write_rows([row], tmp_path / "notes", "curve")
    assert mine.read_text() == '{"my": "notes"}\n'
    assert not (tmp_path / "notes.csv").exists()
    # its own rows it replaces (a rerun)
    write_rows([row], tmp_path / "rows", "curve")
    write_rows([{**row, "step": 2}], tmp_path / "rows", "curve")
    assert json.loads((tmp_path / "rows.jsonl").read_text())["step"] == 2
