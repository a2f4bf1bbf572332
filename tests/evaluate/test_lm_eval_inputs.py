"""lm-eval's inputs, checked before it runs: bounded arguments, a bare checkpoint name, tasks of
the other dataset kind."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from depthbench.errors import UserError


def _lm_eval(*args):
    return subprocess.run([sys.executable, "-m", "depthbench", "lm-eval", "run", "--model",
                           "depthbench", "--limit", "2", "--tasks", "depthbench", *args],
                          capture_output=True, text=True, timeout=300)


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


def test_lm_eval_refuses_a_run_that_stopped_early_and_reads_its_checkpoint(trained_run, tmp_path):
    """As eval and serve-bench do: a run directory is read as its result only once training
    reached its planned steps; the checkpoint file it names is read as it is."""
    pytest.importorskip("lm_eval")
    from depthbench.evaluate.harness import DepthbenchLM
    run = tmp_path / "killed"
    shutil.copytree(trained_run, run)
    for p in (run / "checkpoints").glob("*"):
        if not p.name.startswith("step_0000200.pt"):   # killed before step 400 was written
            p.unlink()
    with pytest.raises(UserError, match="stopped at step 200 of 400"):
        DepthbenchLM(pretrained=str(run))
    lm = DepthbenchLM(pretrained=str(run / "checkpoints" / "step_0000200.pt"))
    assert lm.checkpoint.endswith("step_0000200.pt")


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


def test_model_args_are_typed_from_lm_evals_own_argument_string():
    """lm-eval's parser turns ``--model_args`` into strings and numbers; ``ModelArgs.parse``
    makes one typed value of them, and refuses a bad value before any model is read (the
    pretrained path here does not exist)."""
    pytest.importorskip("lm_eval")
    from lm_eval.utils import simple_parse_args_string

    from depthbench.evaluate.model_args import ModelArgs
    given = simple_parse_args_string("pretrained=nowhere/run,exit=fixed:3,max_depth=8,"
                                     "checkpoint_step=200,max_length=32,kv_policy=single")
    a = ModelArgs.parse({**given, "batch_size": "auto:4", "max_batch_size": 8, "device": "cuda:0"})
    assert (a.pretrained, a.n_loops, a.max_depth, a.min_depth, a.checkpoint_step) == \
        ("nowhere/run", 8, 8, 1, 200)
    assert (a.batch_size, a.max_length, a.kv_policy, a.data) == (8, 32, "single", None)
    assert a.criterion.max_depth == 8 and a.exit == "fixed:3"
    import torch
    assert a.device == ("cuda:0" if torch.cuda.is_available() else "cpu")
    assert a.positions(64) == 32 and ModelArgs.parse({"pretrained": "r"}).positions(64) == 64
    with pytest.raises(UserError, match="max_length"):
        a.positions(16)
    for bad, needle in [({"exit": "warp:2"}, "exit spec"), ({"max_length": "x"}, "max_length"),
                        ({"checkpoint_step": -1}, "checkpoint_step"), ({"nope": 1}, "nope")]:
        with pytest.raises(UserError, match=needle):
            ModelArgs.parse({"pretrained": "nowhere/run", **bad})


def test_an_unknown_lm_eval_task_is_one_line(trained_run, small_data):
    """lm-eval raises a ValueError for a task it does not know; through depthbench it is one
    line naming the task, not a traceback."""
    pytest.importorskip("lm_eval")
    p = subprocess.run([sys.executable, "-m", "depthbench", "lm-eval", "run", "--model", "depthbench",
                        "--model_args", f"pretrained={trained_run}", "--tasks", "no_such_task",
                        "--metadata", json.dumps({"data": str(small_data)})],
                       capture_output=True, text=True, timeout=300)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-2000:]
    assert "knows no task" in lines[0] and "no_such_task" in lines[0] and "Traceback" not in p.stderr
