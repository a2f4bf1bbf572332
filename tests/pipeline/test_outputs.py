"""Outputs never over inputs: nothing lands inside a dataset or over a file of the run it
reads, outputs appear together or not at all, only a directory the tool made is replaced, and a
refused command leaves nothing behind (locks included)."""

import json
import os
import shutil

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refusals import cli, one_line, one_line_exit_2

from depthbench.cli.main import main
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

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


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


def test_eval_and_serve_bench_refuse_to_replace_a_users_file(trained_run, small_data, tmp_path):
    (tmp_path / "mine.jsonl").write_text("my notes\n")
    r = cli(["eval", trained_run, "--data", small_data, "--depths", "1", "--out",
              tmp_path / "mine"])
    one_line_exit_2(r, "would replace")
    assert (tmp_path / "mine.jsonl").read_text() == "my notes\n"
    (tmp_path / "trace.txt").write_text("hello\n")
    r = cli(["serve-bench", "--random", "tiny", "--requests", "2", "--max-new-tokens", "2",
              "--save-trace", tmp_path / "trace.txt"])
    one_line_exit_2(r, "--save-trace would replace")
    assert (tmp_path / "trace.txt").read_text() == "hello\n"


def test_a_second_writer_of_a_dataset_is_refused(tmp_path):
    import fcntl
    out = tmp_path / "ds"
    side = tmp_path / ".ds.lock"
    fd = os.open(side, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)     # another process writing ds
    try:
        (tmp_path / "c.txt").write_text("\n\n".join(f"doc {i} words here" for i in range(50)))
        r = cli(["prepare-text", tmp_path / "c.txt", "--out", out, "--vocab-size", "300"])
        one_line_exit_2(r, "is being written by another depthbench process")
        r = cli(["generate", "--out", out, "--preset", "tiny"])
        one_line_exit_2(r, "is being written by another depthbench process")
    finally:
        os.close(fd)
    assert not out.exists()


def test_generate_force_keeps_a_users_file_inside_the_dataset(small_data, tmp_path):
    d = tmp_path / "d"
    shutil.copytree(small_data, d)
    (d / "notes.txt").write_text("mine")
    one_line(CliRunner().invoke(main, ["generate", "--out", str(d), "--force", "--set",
                                       "n_people=24", "--set", "n_unseen_people=4"]))
    assert (d / "notes.txt").read_text() == "mine"
