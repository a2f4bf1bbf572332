"""Boundaries, round 3: the classes of bad input that used to give a silent wrong result or lose
a file, each tested as a property (hypothesis draws the instances) and end to end where the
class shows at the command line. The one-line-error cases are in test_bad_inputs.py."""

import json
import os
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthbench.cli.main import main
from depthbench.config import EvalConfig, ProbeConfig, ServeConfig, TrainJob
from depthbench.errors import UserError
from depthbench.fsio import (
    LOCK_NAME,
    MARKER,
    atomic_write_many,
    check_replaceable,
    made_by_tool,
    refuse_over_inputs,
    replaced_dir,
)
from depthbench.pipeline.spec import TrainSpec
from depthbench.rows import RESERVED_COLUMNS, tag_rows, tags_problem
from depthbench.schedules import parse_schedule

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


# ---- forged columns --------------------------------------------------------------------------
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


# ---- specs that collide ----------------------------------------------------------------------
SPELLINGS = st.sampled_from(["fixed:{k}", "fixed:0{k}", " fixed:{k} ", "fixed:00{k}"])


@SETTINGS
@given(st.integers(1, 9), SPELLINGS, SPELLINGS)
def test_one_schedule_spelled_two_ways_is_one_schedule(k, a, b):
    a, b = a.format(k=k), b.format(k=k)
    assert parse_schedule(a).canonical == parse_schedule(b).canonical == f"fixed:{k}"
    with pytest.raises(UserError, match="must not repeat"):
        TrainSpec.from_dict({"schedules": [a, b]})


@SETTINGS
@given(st.sampled_from(["fixed:4", "uniform:1-16", "fixed-first:0.8:4:1-16",
                        "fixed-first:0.670:4:01-16", "curriculum:1-16:0.5",
                        "poisson-lognormal:mean=8,max=16", "poisson-lognormal:max=16,mean=4.5,sigma=0.7"]))
def test_the_canonical_spelling_is_the_same_schedule(spec):
    a, b = parse_schedule(spec), parse_schedule(parse_schedule(spec).canonical)
    assert b.canonical == a.canonical
    assert (a.depths(300, 7) == b.depths(300, 7)).all()


@SETTINGS
@given(st.lists(st.floats(0.005, 1.0), min_size=2, max_size=4, unique=True))
def test_budgets_whose_runs_would_share_a_name_are_refused(budgets):
    ids = [round(100 * b) for b in budgets]
    if len(set(ids)) < len(ids):
        with pytest.raises(UserError, match="budgets"):
            TrainSpec.from_dict({"budgets": budgets})
    else:
        assert TrainSpec.from_dict({"budgets": budgets}).budgets == tuple(budgets)


# ---- outputs over inputs ---------------------------------------------------------------------
@SETTINGS
@given(st.lists(st.sampled_from(["a", "b", "eval", ".."]), min_size=1, max_size=3),
       st.sampled_from(["rows.csv", "x.jsonl", "train_tokens.npy"]))
def test_no_output_lands_inside_a_dataset(tmp_path, parts, name):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    out = data.joinpath(*parts, name)
    inside = data.resolve() in out.resolve().parents
    if inside:
        with pytest.raises(UserError, match="inside the dataset"):
            refuse_over_inputs([out], data=data)
    else:
        refuse_over_inputs([out], data=data)


@pytest.mark.parametrize("name", ["run.json", "metrics.jsonl", LOCK_NAME,
                                  "checkpoints/step_0000001.pt", "checkpoints/latest"])
def test_no_output_replaces_a_file_of_the_run_it_reads(tmp_path, name):
    run = tmp_path / "run"
    with pytest.raises(UserError, match="would replace"):
        refuse_over_inputs([run / name], run=run)
    refuse_over_inputs([run / "eval" / "step_1.csv", run / "notes.csv"], run=run)


def test_outputs_appear_together_or_not_at_all(tmp_path):
    (tmp_path / "b.jsonl").mkdir()  # the second output cannot be written
    with pytest.raises(UserError, match="is a directory"):
        atomic_write_many({tmp_path / "a.csv": "x", tmp_path / "b.jsonl": "y"})
    assert not (tmp_path / "a.csv").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.jsonl"], "no temporaries left"


@pytest.mark.parametrize("length", [200, 245, 255])
def test_long_legal_names_are_written(tmp_path, length):
    name = "r" * (length - len(".csv")) + ".csv"
    atomic_write_many({tmp_path / name: "x"})
    assert (tmp_path / name).read_text() == "x"
    d = tmp_path / ("d" * length)
    with replaced_dir(d, "report") as t:
        (t / "a").write_text("1")
    assert (d / "a").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, d.name])


def test_only_a_directory_the_tool_made_is_replaced(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "manifest.json").write_text(json.dumps({"files": {"a.npy": {}}}))
    (mine / "thesis.tex").write_text("years of work")
    assert not made_by_tool(mine, "dataset")
    with pytest.raises(UserError, match="not a dataset depthbench made"):
        check_replaceable(mine, "dataset")
    (mine / "thesis.tex").unlink()  # now it holds only what its manifest lists
    assert made_by_tool(mine, "dataset")
    made = tmp_path / "made"
    with replaced_dir(made, "report") as t:
        (t / "x.png").write_text("1")
    assert json.loads((made / MARKER).read_text()) == {"made_by": "depthbench", "kind": "report"}
    assert made_by_tool(made, "report") and not made_by_tool(made, "dataset")


def test_a_symlinked_output_keeps_its_link_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "target"
    with replaced_dir(target, "report") as t:
        (t / "old").write_text("1")
    link = tmp_path / "link"
    link.symlink_to(target)
    with replaced_dir(link, "report") as t:
        (t / "new").write_text("2")
    assert link.is_symlink() and (link / "new").read_text() == "2" and not (link / "old").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target"]


def test_a_refused_train_leaves_no_lock_in_the_directory_it_found(small_data, tmp_path):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = CliRunner().invoke(main, ["train", "--data", str(small_data), "--out", str(out),
                                  "--steps", "2"])
    assert r.exit_code == 2 and "not empty" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_run_with_out_writes_its_report_there_not_under_the_current_directory(tmp_path,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "quickstart.toml"  # named like the packaged experiment
    spec.write_text('name = "quickstart"\n[data]\n'
                    'set = { exposure = 1, n_people = 24, n_unseen_people = 4 }\n'
                    '[train]\nschedules = ["fixed:2"]\nsteps = 3\nset = { d_model = 16, '
                    'batch_size = 4, warmup_steps = 1, log_every = 1 }\n[eval]\ndepths = "1-2"\n'
                    'splits = ["eval_reordered"]\n[probe]\nenabled = false\n[serve]\n'
                    'enabled = false\n[run]\nworkers = 1\n')
    r = CliRunner().invoke(main, ["run", str(spec), "--out", "exp"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "exp" / "report" / "index.html").is_file()
    assert not (tmp_path / "reports").exists()


@pytest.mark.skipif(shutil.which("sbatch") is not None, reason="this machine has SLURM")
def test_slurm_without_slurm_is_one_line(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[train]\nschedules = ["fixed:2"]\n[serve]\nenabled = false\n')
    r = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "e"), "--executor",
                                  "slurm"])
    assert r.exit_code == 2 and "sbatch" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "e").exists()


def test_cuda_on_a_cpu_machine_is_refused_before_any_stage(tmp_path, monkeypatch):
    from depthbench import runtime
    monkeypatch.setattr(runtime, "cuda_available", lambda: False)
    spec = tmp_path / "s.toml"
    spec.write_text('[train]\nschedules = ["fixed:2"]\n[serve]\nenabled = false\n'
                    '[run]\ndevice = "cuda"\n')
    r = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "e")])
    assert r.exit_code == 2 and "no CUDA GPU" in r.stderr
    assert not (tmp_path / "e").exists(), "nothing generated first"


def test_lm_eval_arguments_are_bounded(trained_run):
    pytest.importorskip("lm_eval")
    from depthbench.evaluate.harness import DepthbenchLM
    for arg in ({"n_loops": 10**6}, {"max_depth": 1025}, {"n_loops": True}, {"batch_size": 10**9}):
        with pytest.raises(UserError, match="must be an integer in|not an integer"):
            DepthbenchLM(pretrained=str(trained_run), **arg)


def test_lm_eval_on_a_bare_checkpoint_name_is_one_line(trained_run, tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from depthbench.checkpoint import checksum_path, latest
    from depthbench.evaluate.harness import DepthbenchLM
    src = latest(trained_run)
    monkeypatch.chdir(tmp_path)
    shutil.copy(src, "c.pt")
    shutil.copy(checksum_path(src), "c.pt.sha256")
    with pytest.raises(UserError, match="pass data=DIR"):
        DepthbenchLM(pretrained="c.pt")
    assert os.path.exists("c.pt")
