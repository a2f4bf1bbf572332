"""Serving's inputs: fitted profiles, training keys, replay traces and knobs that cannot run are
refused in one line; the knobs that did run are recorded."""


import pandas as pd
import pytest
from click.testing import CliRunner
from refusals import cli, one_line, one_line_exit_2

from depthbench.cli.main import main


def test_an_all_zero_fitted_profile_is_refused(tmp_path):
    from depthbench.serving.executor import STAGES
    f = tmp_path / "zero.toml"
    f.write_text('name = "z"\nkind = "fitted"\n\n[fit]\n' +
                 "".join(f"{s} = [0.0, 0.0, 0.0]\n" for s in STAGES))
    one_line(CliRunner().invoke(main, ["serve-sim", "--random", "ouro-like", "--max-depth", "4",
                                       "--exit", "trace:2", "--requests", "8", "--profile", str(f)]),
             "all zeros")


@pytest.mark.parametrize("cmd", [["serve-sim", "--profile", "h100", "--exit", "trace:2"],
                                 ["serve-bench", "--exit", "argmax:2"]])
def test_serving_refuses_training_keys_and_a_single_new_token(cmd, tmp_path):
    base = [*cmd, "--random", "tiny", "--max-depth", "4", "--requests", "4",
            "--out", str(tmp_path / "o")]
    one_line(CliRunner().invoke(main, base + ["--set", "lr=0.1"]), "training key")
    one_line(CliRunner().invoke(main, base + ["--max-new-tokens", "1"]), "max-new-tokens")
    one_line(CliRunner().invoke(main, base + ["--modes", "static,cdb,cdb"]), "cdb twice")
    assert not list(tmp_path.iterdir())


def test_a_replay_trace_shorter_than_the_workload_is_refused(tmp_path):
    base = ["serve-bench", "--random", "tiny", "--max-depth", "4", "--requests", "3",
            "--modes", "static,cdb"]
    r = CliRunner().invoke(main, base + ["--max-new-tokens", "4", "--out", str(tmp_path / "a"),
                                         "--save-trace", str(tmp_path / "t.json")])
    assert r.exit_code == 0, r.output
    again = base + ["--exit", f"replay:{tmp_path / 't.json'}"]
    assert CliRunner().invoke(main, again + ["--max-new-tokens", "4", "--out",
                                             str(tmp_path / "b")]).exit_code == 0
    one_line(CliRunner().invoke(main, again + ["--max-new-tokens", "8", "--out",
                                               str(tmp_path / "c")]), "trace")
    assert not list(tmp_path.glob("c*"))


def test_serving_refuses_knobs_that_cannot_run_and_records_those_that_did(tmp_path):
    one_line_exit_2(cli(["serve-bench", "--random", "tiny", "--rate", "0.000001"]),
                     "--rate 1e-06 requests/s spreads 256 requests")
    one_line_exit_2(cli(["serve-bench", "--random", "tiny", "--pool", "8", "--width", "64"]),
                     "at least width=64")
    r = cli(["serve-bench", "--random", "tiny", "--requests", "6", "--max-new-tokens", "3",
              "--width", "64", "--out", tmp_path / "sb"])
    assert r.exit_code == 0, r.output
    rows = pd.read_csv(tmp_path / "sb.csv")
    assert (rows["width"] == 6).all() and (rows["pool"] <= 6).all()
    for knob in ("admit_min", "min_coda_batch", "coda_wait", "prefill_chunk"):
        assert rows[knob].notna().all(), knob


def test_the_exit_criterion_is_parsed_once_where_the_config_enters(tmp_path):
    """A replay trace is read when the ServeConfig is made, and every stage reads that
    criterion: the file gone afterwards changes nothing, and a bad trace is refused there."""
    import json

    from depthbench.config import ServeConfig
    from depthbench.config.base import ConfigError
    from depthbench.exits import parse_exit
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"0": [1, 2, 3], "1": [4, 4]}))
    cfg = ServeConfig(random="tiny", exit=f"replay:{trace}", max_depth=4)
    trace.unlink()
    assert cfg.criterion is cfg.criterion
    trace.write_text(json.dumps({"0": [1, 2, 3], "1": [4, 4]}))
    assert cfg.criterion == parse_exit(f"replay:{trace}", 1, 4)
    trace.write_text("{not json")
    with pytest.raises(ConfigError, match="exit"):
        ServeConfig(random="tiny", exit=f"replay:{trace}", max_depth=4)
