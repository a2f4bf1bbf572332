"""Training and evaluating runs: a run whose log is gone, a run that stopped early, a dataset
without unseen people, and refusals without a traceback from the console script."""

import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from refusals import ROOT, TABLE3, cli, one_line, one_line_exit_2

from depthbench.cli.main import main
from depthbench.errors import UserError
from depthbench.report import load_rows


def test_resuming_a_run_whose_training_log_is_gone_is_one_line(small_data, tmp_path):
    args = ["train", "--data", str(small_data), "--out", str(tmp_path / "r"), "--steps", "3",
            "--set", "batch_size=8", "--set", "d_model=16", "--set", "n_heads=2"]
    assert CliRunner().invoke(main, args).exit_code == 0
    (tmp_path / "r" / "metrics.jsonl").unlink()
    one_line(CliRunner().invoke(main, args + ["--resume"]), "metrics.jsonl")


def test_eval_refuses_a_run_that_stopped_early(trained_run, small_data, tmp_path):
    run = tmp_path / "killed"
    shutil.copytree(trained_run, run)
    for p in (run / "checkpoints").glob("*"):
        if not p.name.startswith("step_0000200.pt"):   # killed before step 400 was written
            p.unlink()
    r = cli(["eval", run, "--data", small_data, "--depths", "1-2", "--out", tmp_path / "e"])
    one_line_exit_2(r, "stopped at step 200 of 400")
    assert not list(tmp_path.glob("e*"))
    r = cli(["eval", run / "checkpoints" / "step_0000200.pt", "--data", small_data,
              "--depths", "1-2", "--max-people", "8", "--out", tmp_path / "e"])
    assert r.exit_code == 0, r.output


def test_a_dataset_without_unseen_people_evaluates_its_other_splits(tmp_path):
    """n_unseen_people = 0 leaves the control split empty: the default sweep reads the other
    splits (it crashed concatenating nothing); the empty split named alone is one line."""
    from depthbench.config import ModelConfig, TrainConfig
    from depthbench.data.generate import generate
    from depthbench.data_gen import resolve_config
    from depthbench.train.loop import train
    generate(resolve_config("tiny", overrides={"exposure": 1, "n_people": 8, "n_unseen_people": 0}),
             tmp_path / "d")
    train(tmp_path / "d", tmp_path / "r", ModelConfig(d_model=16, n_heads=2, n_core=1),
          TrainConfig(steps=2, batch_size=4, warmup_steps=1), "fixed:2", progress=False,
          log=lambda *a, **k: None)
    r = CliRunner().invoke(main, ["eval", str(tmp_path / "r"), "--depths", "1-2", "--out",
                                  str(tmp_path / "e")])
    assert r.exit_code == 0, r.output
    splits = {json.loads(x)["split"] for x in (tmp_path / "e.jsonl").read_text().splitlines()}
    assert splits == {"eval_reordered", "eval_seen_order"}
    one_line(CliRunner().invoke(main, ["eval", str(tmp_path / "r"), "--split",
                                       "eval_unseen_people", "--out", str(tmp_path / "f")]),
             "holds no rows")
    assert not list(tmp_path.glob("f*"))


def test_the_refusals_name_no_traceback_from_the_console_script(tmp_path):
    r = subprocess.run([sys.executable, "-m", "depthbench", "report", str(TABLE3),
                        str(ROOT / "reports" / "table3-lr" / "rows"), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    with pytest.raises(UserError):
        load_rows([TABLE3, ROOT / "reports" / "table3-lr" / "rows"])
