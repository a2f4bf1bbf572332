"""Boundaries, round 4: the round-3 cases that still failed and the new classes outside the
natural-text and report ones (those sit in test_text.py and test_pipeline.py). Each case exits
with status 2 and one line naming the problem and leaves nothing behind, or gives the correct
result."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from depthbench.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def one_line(r, *needles):
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()   # the error; a log line before it may be on stdout
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    for n in needles:
        assert n in lines[0], lines[0]


def test_cuda_named_in_train_set_is_refused_before_generate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(
        '[data]\npreset = "tiny"\nset = { exposure = 1, n_people = 24, n_unseen_people = 4, name_pool = 8 }\n'
        '[train]\nschedules = ["fixed:2"]\nsteps = 4\nset = { device = "cuda" }\n'
        '[serve]\nenabled = false\n[probe]\nenabled = false\n')
    one_line(CliRunner().invoke(main, ["run", "s.toml", "--out", "exp"]), "cuda")
    assert not (tmp_path / "exp").exists()


def test_generate_force_keeps_a_users_file_inside_the_dataset(small_data, tmp_path):
    d = tmp_path / "d"
    shutil.copytree(small_data, d)
    (d / "notes.txt").write_text("mine")
    one_line(CliRunner().invoke(main, ["generate", "--out", str(d), "--force", "--set",
                                       "n_people=24", "--set", "n_unseen_people=4"]))
    assert (d / "notes.txt").read_text() == "mine"


def test_resuming_a_run_whose_training_log_is_gone_is_one_line(small_data, tmp_path):
    args = ["train", "--data", str(small_data), "--out", str(tmp_path / "r"), "--steps", "3",
            "--set", "batch_size=8", "--set", "d_model=16", "--set", "n_heads=2"]
    assert CliRunner().invoke(main, args).exit_code == 0
    (tmp_path / "r" / "metrics.jsonl").unlink()
    one_line(CliRunner().invoke(main, args + ["--resume"]), "metrics.jsonl")


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


def _lm_eval(*args):
    return subprocess.run([sys.executable, "-m", "depthbench", "lm-eval", "run", "--model",
                           "depthbench", "--limit", "2", "--tasks", "depthbench", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_lm_eval_inputs_are_checked_before_it_runs(trained_run, small_data, tmp_path):
    """No dataset, another dataset's task files, a missing --include_path, --rows into the
    run: each one line, exit 2, the run untouched."""
    from depthbench.data.generate import generate
    from depthbench.data_gen import resolve_config
    generate(resolve_config("tiny", overrides={"exposure": 1, "n_people": 30}), tmp_path / "other")
    before = sorted(p.name for p in trained_run.rglob("*"))
    run = f"pretrained={trained_run},n_loops=2"
    cases = [([("--model_args", run)], "dataset directory"),
             ([("--model_args", run), ("--metadata", json.dumps({"data": str(tmp_path / "other")}))],
              "another dataset"),
             ([("--model_args", run), ("--metadata", json.dumps({"data": str(small_data)})),
               ("--include_path", str(tmp_path / "nope"))], "include_path"),
             ([("--model_args", f"pretrained={trained_run}"), ("--depths", "1-2"),
               ("--rows", str(trained_run / "metrics"))], "--rows"),
             ([("--model_args", run), ("--metadata", json.dumps({"data": str(small_data)})),
               ("--output_path", str(small_data))], "--output_path"),
             ([("--model_args", run), ("--metadata", json.dumps({"data": str(small_data)})),
               ("--output_path", str(trained_run / "metrics.jsonl"))], "--output_path"),
             ([("--model_args", run), ("--metadata", json.dumps({"data": 5}))], "--metadata data"),
             ([("--model_args", f"pretrained={trained_run}"), ("--depths", "1-2"),
               ("--metadata", json.dumps({"data": ["a"]}))], "--metadata data"),
             ([("--model_args", run), ("--metadata", "[1]")], "not a JSON object")]
    for opts, needle in cases:
        p = _lm_eval(*[x for kv in opts for x in kv])
        assert p.returncode == 2, (opts, p.stderr[-500:])
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (opts, p.stderr[-500:])
    assert sorted(p.name for p in trained_run.rglob("*")) == before


@pytest.mark.slow
def test_an_lm_eval_task_of_the_other_dataset_kind_is_one_line(trained_run, small_data, tmp_path):
    """The people's recall tasks on a text dataset, the cloze on a synthetic one: one line that
    says which kind each is (they crashed with a KeyError or read as a missing file)."""
    import numpy as np

    from depthbench.config import ModelConfig, TrainConfig
    from depthbench.data.corpus import prepare_text
    from depthbench.train.loop import train
    words = "the quick brown fox jumps over a lazy dog while seven wizards judge".split()
    rng = np.random.default_rng(0)
    (tmp_path / "c.txt").write_text("\n\n".join(" ".join(rng.choice(words, size=40))
                                                 for _ in range(80)))
    prepare_text([str(tmp_path / "c.txt")], tmp_path / "td", vocab_size=300, val_fraction=0.2,
                 seq_len=16)
    train(tmp_path / "td", tmp_path / "tr", ModelConfig(d_model=32, n_heads=4, n_core=1),
          TrainConfig(steps=2, batch_size=4, warmup_steps=1), "fixed:2", progress=False,
          log=lambda *a, **k: None)
    for run, data, task, needle in ((tmp_path / "tr", tmp_path / "td", "depthbench",
                                     "is a text dataset"),
                                    (trained_run, small_data, "depthbench_cloze",
                                     "is a synthetic dataset")):
        p = subprocess.run([sys.executable, "-m", "depthbench", "lm-eval", "run", "--model",
                            "depthbench", "--limit", "2", "--tasks", task, "--model_args",
                            f"pretrained={run}", "--metadata", json.dumps({"data": str(data)})],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 2, p.stderr[-800:]
        lines = p.stderr.strip().splitlines()
        assert needle in lines[-1] and "Traceback" not in p.stderr, p.stderr[-800:]


@pytest.mark.parametrize("script,args", [
    ("bench_text.py", ["--mb", "0"]), ("bench_eval.py", ["--readme", "/nonexistent.json"]),
    ("bench_generate.py", ["--people", "-5"]), ("bench_serve.py", ["--width", "x"]),
    ("bench_grid.py", ["--grid-seeds", "0"]), ("calibrate.py", ["--workers", "0"]),
    # kept rows that are not JSON, or another benchmark's; rows that could not be kept, refused
    # before anything runs; names and lists checked at parse time
    ("bench_train.py", ["--readme", str(ROOT / "README.md")]),
    ("bench_train.py", ["--readme", str(ROOT / "docs" / "benchmarks" / "eval.json")]),
    ("bench_eval.py", ["--json-out", "/proc/none/rows.json"]),
    ("bench_generate.py", ["--json-out", str(ROOT / "docs")]),
    ("bench_grid.py", ["--shared-work", "no-such-spec"]),
    ("bench_grid.py", ["--against", "no-such-commit"]),
    ("calibrate.py", ["--seeds", "x"]), ("calibrate.py", ["--threads", "0"]),
    ("calibrate.py", ["--schedules", "cyclic:4"]), ("calibrate.py", ["--schedules", "fixed:4@2"]),
    ("calibrate_text.py", ["--recipes", "no-such"]), ("calibrate_text.py", ["--workers", "0"]),
    ("calibrate_text.py", ["--schedules", "cyclic:4"]), ("calibrate_text.py", ["--seeds", "1-x"]),
    ("cloze_floors.py", ["/nonexistent"]), ("cloze_floors.py", [str(ROOT / "docs")]),
])
@pytest.mark.slow
def test_benchmark_scripts_refuse_bad_arguments_in_one_line(script, args):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-500:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in p.stderr, p.stderr


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
