"""The trainer: golden and deterministic losses, exact resume (also after SIGKILL), DDP equals
one process, compute matching, and one-line refusals that keep the last good checkpoint."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from click.testing import CliRunner

from depthbench import checkpoint as ckpt
from depthbench.cli.main import main
from depthbench.config import ModelConfig, TrainConfig
from depthbench.data.generate import generate
from depthbench.data_gen import Attribute, GenConfig
from depthbench.errors import UserError
from depthbench.flops import FlopModel, schedule_flops
from depthbench.runlog import metrics_rows
from depthbench.schedules import parse_schedule
from depthbench.train.loop import train
from depthbench.train.updates import lr_at

MODEL = ModelConfig(d_model=32, n_heads=4, n_core=1)
SETS = ["--set", "d_model=32", "--set", "batch_size=16", "--set", "log_every=1",
        "--set", "warmup_steps=2", "--set", "ckpt_every=4"]


def tcfg(**kw):
    base = dict(steps=12, batch_size=16, log_every=1, warmup_steps=2, ckpt_every=4, seed=1)
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data") / "ds"
    generate(GenConfig(n_people=48, n_unseen_people=8, name_pool=8, value_pool=16,
                       attributes=(Attribute(name="a", n_values=50), Attribute(name="b", n_values=30),
                                   Attribute(name="c", n_values=16, value_tokens=1))), d)
    return d


def losses(run):
    return [r["loss"] for r in metrics_rows(run) if "loss" in r]


def quiet(*a, **k):
    return None


# Losses of the first steps of a seeded tiny CPU run (torch 2.13 CPU, one thread). A change to
# the model, data order, depth draws or optimizer shows up here.
GOLDEN = [3.4088, 3.3553, 3.2964, 3.2666, 3.2540]  # dataset format 4


def test_golden_losses_and_determinism(data, tmp_path):
    a = train(data, tmp_path / "a", MODEL, tcfg(), "uniform:1-6", progress=False, log=quiet)
    # the schedule given parsed (as run_train passes a TrainJob's) trains the same run
    b = train(data, tmp_path / "b", MODEL, tcfg(), parse_schedule("uniform:1-6"), progress=False,
              log=quiet)
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    assert a["final_loss"] == b["final_loss"]
    assert losses(tmp_path / "a")[:5] == pytest.approx(GOLDEN, abs=2e-4)
    rows = metrics_rows(tmp_path / "a")
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert all(r["flops"] > 0 and r["wall_clock"] > 0 and r["tokens"] > 0 for r in rows)
    assert all(0 < r["cpu_clock"] for r in rows)  # the process's own CPU seconds
    c = train(data, tmp_path / "c", MODEL, tcfg(seed=2), "uniform:1-6", progress=False, log=quiet)
    assert c["final_loss"] != a["final_loss"]


def test_resume_from_a_checkpoint_continues_exactly(data, tmp_path):
    cfg = tcfg(keep_steps=(4,))
    full = train(data, tmp_path / "r", MODEL, cfg, "fixed-first:0.5:2:1-5", progress=False,
                 log=quiet)
    reference = losses(tmp_path / "r")
    w_ref = ckpt.load(ckpt.latest(tmp_path / "r"))["model"]
    # roll the run back to its step-4 checkpoint, as if it had died there
    (tmp_path / "r" / "checkpoints" / ckpt.ckpt_name(12)).unlink()
    ckpt.atomic_write_text(tmp_path / "r" / "checkpoints" / "latest", ckpt.ckpt_name(4))
    again = train(data, tmp_path / "r", MODEL, cfg, "fixed-first:0.5:2:1-5", resume=True,
                  progress=False, log=quiet)
    assert losses(tmp_path / "r") == reference
    assert again["modeled_train_flops"] == full["modeled_train_flops"]
    w = ckpt.load(ckpt.latest(tmp_path / "r"))["model"]
    for k in w_ref:
        assert torch.equal(w[k], w_ref[k]), k


def _cli(*args):
    return [sys.executable, "-m", "depthbench", *args]


@pytest.mark.slow
def test_sigkill_then_resume_matches_the_uninterrupted_run(data, tmp_path):
    args = ["train", "--data", str(data), "--schedule", "uniform:1-4", "--steps", "60",
            "--seed", "3", *SETS]
    subprocess.run(_cli(*args, "--out", str(tmp_path / "ref")), check=True, capture_output=True)
    run = tmp_path / "killed"
    p = subprocess.Popen(_cli(*args, "--out", str(run)), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:  # kill once a checkpoint exists and training went past it
        if (run / "metrics.jsonl").is_file() and len(losses(run)) >= 10:
            break
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert len(losses(run)) < 60, "killed before the end"
    r = subprocess.run(_cli(*args, "--out", str(run), "--resume"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert losses(run) == losses(tmp_path / "ref")


@pytest.mark.slow
def test_two_process_gloo_run_equals_one_process(data, tmp_path):
    args = ["train", "--data", str(data), "--schedule", "uniform:1-4", "--steps", "6",
            "--seed", "5", *SETS]
    subprocess.run(_cli(*args, "--out", str(tmp_path / "one")), check=True, capture_output=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                        "--standalone", "-m", "depthbench", *args, "--out", str(tmp_path / "two")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert losses(tmp_path / "two") == pytest.approx(losses(tmp_path / "one"), rel=1e-5, abs=1e-6)


def test_match_flops_spends_the_reference_runs_flops(data, tmp_path):
    r = CliRunner().invoke(main, ["train", "--data", str(data), "--out", str(tmp_path / "ff"),
                                  "--schedule", "fixed:2", "--steps", "20", *SETS, "--json"])
    assert r.exit_code == 0, r.output
    ref = json.loads(r.stdout.strip().splitlines()[-1])["modeled_train_flops"]
    r = CliRunner().invoke(main, ["train", "--data", str(data), "--out", str(tmp_path / "u"),
                                  "--schedule", "uniform:1-8", "--match-flops", str(tmp_path / "ff"),
                                  *SETS, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout.strip().splitlines()[-1])
    rec = ckpt.read_run(tmp_path / "u")
    fm = FlopModel(**rec["flop_model"])
    one_more = schedule_flops(fm, parse_schedule("uniform:1-8"), got["steps"] + 1, 0,
                              rec["tokens_per_step"])
    assert got["modeled_train_flops"] <= ref < one_more
    assert got["steps"] < 20


def test_wsd_and_cosine_learning_rates():
    s = parse_schedule("fixed-first:0.5:4:1-16")
    wsd = TrainConfig(steps=100, warmup_steps=10, lr=1.0, decay_frac=0.2)
    lrs = [lr_at(i, wsd, s) for i in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == 1.0
    assert set(lrs[10:80]) == {1.0} and lrs[-1] == 0.0 and lrs[85] < 1.0
    at_switch = wsd.replace(decay_at_switch=True)
    lrs = [lr_at(i, at_switch, s) for i in range(100)]
    assert lrs[49] == 1.0 and lrs[50] < 1.0 and lrs[-1] == 0.0
    cos = wsd.replace(lr_schedule="cosine")
    lrs = [lr_at(i, cos, s) for i in range(100)]
    assert lrs[10] == pytest.approx(1.0) and lrs[55] == pytest.approx(0.5, abs=0.03)


def _one_line_error(r, needle):
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_user_errors_exit_2_with_one_line(data, tmp_path):
    run = CliRunner().invoke
    _one_line_error(run(main, ["train", "--data", str(tmp_path / "none"), "--out",
                               str(tmp_path / "x")]), "does not exist")
    _one_line_error(run(main, ["train", "--data", str(data), "--out", str(tmp_path / "x"),
                               "--schedule", "uniform:9-2"]), "empty")
    _one_line_error(run(main, ["train", "--data", str(data), "--out", str(tmp_path / "x"),
                               "--set", "d_model=30"]), "n_heads")
    _one_line_error(run(main, ["train", "--data", str(data), "--out", str(tmp_path / "x"),
                               "--set", "bogus=1"]), "unknown config key")
    assert not (tmp_path / "x").exists()
    ok = run(main, ["train", "--data", str(data), "--out", str(tmp_path / "r"), "--steps", "4",
                    *SETS])
    assert ok.exit_code == 0, ok.output
    _one_line_error(run(main, ["train", "--data", str(data), "--out", str(tmp_path / "r"),
                               "--steps", "4", *SETS]), "--resume")
    _one_line_error(run(main, ["train", "--data", str(data), "--out", str(tmp_path / "r"),
                               "--steps", "4", *SETS, "--set", "lr=0.5", "--resume"]), "differ")


def test_tampered_dataset_is_refused(data, tmp_path):
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(data, bad)
    f = bad / "train_tokens.npy"
    raw = bytearray(f.read_bytes())
    raw[-3] ^= 0xFF
    f.write_bytes(bytes(raw))
    r = CliRunner().invoke(main, ["train", "--data", str(bad), "--out", str(tmp_path / "x")])
    _one_line_error(r, "train_tokens.npy")


def test_nan_loss_exits_2_and_keeps_the_last_good_checkpoint(data, tmp_path):
    r = CliRunner().invoke(main, ["train", "--data", str(data), "--out", str(tmp_path / "n"),
                                  "--steps", "40", *SETS, "--set", "lr=1e6", "--set", "grad_clip=0",
                                  # the concat adapter blows up at this LR (additive injection
                                  # under pre-norm only saturates)
                                  "--set", "injection=concat",
                                  "--set", "warmup_steps=0", "--set", "ckpt_every=1"])
    _one_line_error(r, "loss became")
    kept = ckpt.latest(tmp_path / "n")
    assert kept is not None and kept.name in r.stderr
    weights = ckpt.load(kept)["model"]
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_training_with_the_exit_gate_and_truncated_backprop(data, tmp_path):
    cfg = MODEL.replace(exit_gate=True, n_grad_loops=2)
    s = train(data, tmp_path / "g", cfg, tcfg(steps=4), "uniform:1-5", progress=False, log=quiet)
    assert s["steps"] == 4 and s["final_loss"] > 0
    from depthbench.checkpoint import load_run
    model, _ = load_run(tmp_path / "g")
    assert model.cfg.exit_gate and "gate.weight" in model.state_dict()


def test_in_training_eval_rows(data, tmp_path):
    train(data, tmp_path / "e", MODEL, tcfg(steps=4, eval_every=2, eval_depths=(1, 3),
                                            eval_people=8), "fixed:2", progress=False, log=quiet)
    rows = [r for r in metrics_rows(tmp_path / "e") if "eval" in r]
    assert [r["step"] for r in rows] == [2, 4]
    assert set(rows[0]["eval"]) == {"1", "3"} and rows[0]["eval"]["1"]["nll"] > 0
    # the losses are those of a run without the eval (it consumes no randomness)
    train(data, tmp_path / "n", MODEL, tcfg(steps=4), "fixed:2", progress=False, log=quiet)
    assert losses(tmp_path / "e") == losses(tmp_path / "n")


@pytest.mark.parametrize("preset", ["tiny", "small", "paper-200m", "paper-1b"])
def test_presets_train_with_full_backprop_and_the_paper_fixed_first_saving(preset):
    from depthbench.config import model_preset
    from depthbench.train.job import flop_summary
    assert model_preset(preset).n_grad_loops == 0
    # the paper: 62.4% of uniform's FLOPs at a fixed phase of 80%, 68.7% at 67% (F0/Fr about 1)
    f80 = flop_summary("fixed-first:0.8:4:1-16", preset=preset)["fraction_of_uniform"]
    f67 = flop_summary("fixed-first:0.67:4:1-16", preset=preset)["fraction_of_uniform"]
    assert 0.55 < f80 < 0.65 and f80 < f67 < 0.70


# ---- shared prefixes ----------------------------------------------------------------------------
def _strip_clocks(rows):
    return [{k: v for k, v in r.items() if k not in ("wall_clock", "cpu_clock")} for r in rows]


def test_shared_steps_counts_the_identical_leading_updates():
    from depthbench.train.updates import shared_steps
    wsd = tcfg(steps=100, warmup_steps=10, decay_frac=0.2)

    def run(schedule, **kw):
        return MODEL, wsd.replace(**kw), schedule
    # fixed:4 and fixed-first:0.8:4: depth 4 and the same LR until the switch at step 80
    assert shared_steps(run("fixed:4"), run("fixed-first:0.8:4:1-16")) == 80
    assert shared_steps(run("fixed-first:0.67:4:1-16"), run("fixed-first:0.8:4:1-16")) == 67
    # one schedule at two lengths: the same depth draws, the same LR until the shorter decays
    assert shared_steps(run("uniform:1-16"), run("uniform:1-16", steps=40)) == 32
    assert shared_steps(run("uniform:1-16", steps=40), run("uniform:1-16")) == 32
    assert shared_steps(run("fixed:4", steps=60), run("fixed:4", steps=60)) == 60
    # cosine decays from the warmup's end over the run's own length: the warmup and the first
    # step after it (at the peak LR) are shared
    cos = dict(lr_schedule="cosine")
    assert shared_steps(run("fixed:4", **cos), run("fixed:4", steps=50, **cos)) == 11
    # anything else that changes an update: nothing is shared (naive check: the first step)
    for other in (run("fixed:4", seed=2), run("fixed:4", lr=1e-3), run("fixed:3"),
                  run("fixed:4", batch_size=8), (MODEL.replace(d_model=64), wsd, "fixed:4")):
        assert shared_steps(run("fixed:4"), other) == 0
    # what does not change an update does not count
    assert shared_steps(run("fixed:4"), run("fixed:4", keep_steps=(5,), ckpt_every=3)) == 100


def test_a_run_started_from_a_shared_prefix_is_the_run_trained_alone(data, tmp_path):
    """fixed-first:0.75:2 started from fixed:2's checkpoint at the switch ends exactly as the same
    run trained from step 0: every logged loss, the final weights, optimizer and RNG state, the
    counters and the logged rows (clocks aside: the prefix's time is the other run's)."""
    ff, cfg = "fixed-first:0.75:2:1-5", tcfg(steps=16)
    train(data, tmp_path / "trunk", MODEL, cfg, "fixed:2", progress=False, log=quiet,
          share_steps=(12,))
    assert 12 in ckpt.list_checkpoints(tmp_path / "trunk")  # kept for the run that starts there
    alone = train(data, tmp_path / "alone", MODEL, cfg, ff, progress=False, log=quiet)
    said = []
    child = train(data, tmp_path / "child", MODEL, cfg, ff, progress=False, log=said.append,
                  start=(str(tmp_path / "trunk"), 12))
    assert any("starting from" in m and "step 12" in m for m in said)
    assert losses(tmp_path / "child") == losses(tmp_path / "alone")
    assert _strip_clocks(metrics_rows(tmp_path / "child")) == \
        _strip_clocks(metrics_rows(tmp_path / "alone"))
    assert child["modeled_train_flops"] == alone["modeled_train_flops"]
    a, c = (ckpt.load(ckpt.latest(tmp_path / r)) for r in ("alone", "child"))
    for k in a["model"]:
        assert torch.equal(a["model"][k], c["model"][k]), k
    for i, s in a["optimizer"]["state"].items():
        for name, t in s.items():
            assert torch.equal(t, c["optimizer"]["state"][i][name]), (i, name)
    assert torch.equal(a["rng"]["torch"], c["rng"]["torch"])
    assert (a["tokens"], a["step"], a["train_config"]) == (c["tokens"], c["step"], c["train_config"])
    assert ckpt.read_run(tmp_path / "child") == ckpt.read_run(tmp_path / "alone") | {
        "data": ckpt.read_run(tmp_path / "child")["data"]}
    # a run that kept no checkpoint there: the run trains from step 0, to the same result
    train(data, tmp_path / "bare", MODEL, cfg, "fixed:2", progress=False, log=quiet)
    said.clear()
    train(data, tmp_path / "child2", MODEL, cfg, ff, progress=False, log=said.append,
          start=(str(tmp_path / "bare"), 12))
    assert any("training from step 0" in m for m in said)
    assert losses(tmp_path / "child2") == losses(tmp_path / "alone")


@pytest.mark.slow
def test_a_run_started_from_a_shared_prefix_resumes_after_sigkill(data, tmp_path):
    common = ["train", "--data", str(data), "--steps", "60", "--seed", "3", *SETS]
    ff = ["--schedule", "fixed-first:0.2:2:1-4"]
    subprocess.run(_cli(*common, "--schedule", "fixed:2", "--set", "keep_steps=[12]", "--out",
                        str(tmp_path / "trunk")), check=True, capture_output=True)
    subprocess.run(_cli(*common, *ff, "--out", str(tmp_path / "ref")), check=True,
                   capture_output=True)
    run = tmp_path / "killed"
    start = ["--start-from", str(tmp_path / "trunk"), "--start-step", "12"]
    p = subprocess.Popen(_cli(*common, *ff, *start, "--out", str(run)), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:  # past the start, and past a checkpoint of its own
        if (run / "metrics.jsonl").is_file() and len(losses(run)) >= 22:
            break
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert 22 <= len(losses(run)) < 60, "killed after the start and before the end"
    r = subprocess.run(_cli(*common, *ff, *start, "--out", str(run), "--resume"),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert losses(run) == losses(tmp_path / "ref")


def test_a_start_that_is_not_a_shared_prefix_exits_2_with_one_line(data, tmp_path):
    run = CliRunner().invoke
    base = ["train", "--data", str(data), "--steps", "8", *SETS]
    ok = run(main, [*base, "--schedule", "fixed:2", "--set", "keep_steps=[4]", "--out",
                    str(tmp_path / "t")])
    assert ok.exit_code == 0, ok.output
    ff = [*base, "--schedule", "fixed-first:0.5:2:3-4", "--out", str(tmp_path / "x")]
    _one_line_error(run(main, [*ff, "--start-from", str(tmp_path / "t"), "--start-step", "4",
                               "--seed", "9"]), "not this run's")
    _one_line_error(run(main, [*ff, "--start-from", str(tmp_path / "t"), "--start-step", "5"]),
                    "not this run's")   # past the switch, the depths differ
    _one_line_error(run(main, [*ff, "--start-from", str(tmp_path / "t"), "--start-step", "4",
                               "--set", "lr=1e-4"]), "not this run's")
    _one_line_error(run(main, [*ff, "--start-from", str(tmp_path / "none"), "--start-step", "4"]),
                    "not a run directory")
    _one_line_error(run(main, [*ff, "--start-from", str(tmp_path / "t")]), "go together")
    assert not (tmp_path / "x").exists()
    good = run(main, [*ff, "--start-from", str(tmp_path / "t"), "--start-step", "4"])
    assert good.exit_code == 0, good.output


def test_compiling_is_decided_by_the_config_and_shared_prefixes_respect_it():
    from depthbench.runtime import CPU_COMPILE_MIN_STEPS, compiles
    from depthbench.train.updates import shared_steps
    long = tcfg(steps=CPU_COMPILE_MIN_STEPS, compile=True)
    short = long.replace(steps=CPU_COMPILE_MIN_STEPS - 1)
    assert compiles(True, long.steps, "cpu")[0] and not compiles(False, long.steps, "cpu")[0]
    on, why = compiles(True, short.steps, "cpu")
    assert not on and "do not repay" in why
    assert compiles(True, short.steps, "cuda")[0]          # on a GPU the config alone decides
    # a compiled and an eager run round differently from the first update: nothing is shared
    assert shared_steps((MODEL, long, "fixed:4"), (MODEL, short, "fixed:4")) == 0
    assert shared_steps((MODEL, long, "fixed:4"),
                        (MODEL, long.replace(steps=long.steps + 50), "fixed:4")) > 0


@pytest.mark.slow
def test_compiled_training_matches_eager_within_tolerance(data, tmp_path, monkeypatch):
    """Compiled blocks (inductor's CPU kernels) against eager on the same seeded run: the first
    step's loss (the same weights) within 1e-5 relative, the next within 1e-3 as rounding
    differences grow; compiled twice gives identical losses; the saved module has no compiled
    wrapper in its keys."""
    from depthbench import runtime
    monkeypatch.setattr(runtime, "CPU_COMPILE_MIN_STEPS", 1)
    cfg = tcfg(steps=6, ckpt_every=0)
    train(data, tmp_path / "e", MODEL, cfg, "uniform:1-6", progress=False, log=quiet)
    train(data, tmp_path / "c", MODEL, cfg.replace(compile=True), "uniform:1-6", progress=False,
          log=quiet)
    train(data, tmp_path / "c2", MODEL, cfg.replace(compile=True), "uniform:1-6", progress=False,
          log=quiet)
    e, c = losses(tmp_path / "e"), losses(tmp_path / "c")
    assert c[0] == pytest.approx(e[0], rel=1e-5)
    assert c == pytest.approx(e, rel=1e-3)
    assert losses(tmp_path / "c2") == c
    state = ckpt.load(ckpt.latest(tmp_path / "c"))["model"]
    assert not any("_orig_mod" in k for k in state)


def test_a_run_without_a_live_bar_logs_a_step_line_every_log_every(small_data, tmp_path):
    """Under nohup, Slurm or the grid (no terminal), training says where it is: one line per
    logged step with the share done, loss, depth, LR, throughput, elapsed and ETA."""
    lines = []
    train(small_data, tmp_path / "r", ModelConfig(d_model=16, n_heads=2),
          TrainConfig(steps=12, batch_size=4, warmup_steps=1, ckpt_every=0, log_every=4, seed=0),
          "uniform:1-3", progress=False, log=lines.append)
    steps = [ln for ln in lines if ln.startswith("step ")]
    assert [ln.split(" (")[0] for ln in steps] == ["step 4/12", "step 8/12", "step 12/12"]
    assert all("| loss " in ln and "| eta " in ln and "tok/s" in ln for ln in steps)
    assert steps[-1].split("| eta ")[1] == "0m00s"


def test_quiet_hides_progress_and_verbose_adds_the_config(small_data, tmp_path):
    """-q: the result lines and errors only (no step lines); -v: also the resolved config; the
    default: the step lines. Progress goes through the ``depthbench`` logger."""
    args = ["train", "--data", str(small_data), "--schedule", "uniform:1-3", "--steps", "8",
            "--set", "d_model=16", "--set", "n_heads=2", "--set", "batch_size=4",
            "--set", "log_every=4", "--set", "ckpt_every=0", "--set", "warmup_steps=1"]
    out = {}
    for flag in ("-q", "", "-v"):
        r = CliRunner().invoke(main, [*([flag] if flag else []), *args, "--out",
                                      str(tmp_path / (flag or "default"))])
        assert r.exit_code == 0, r.output
        out[flag] = r.output
    steps = {k: [ln for ln in v.splitlines() if ln.startswith("step ")] for k, v in out.items()}
    assert steps["-q"] == [] and len(steps[""]) == len(steps["-v"]) == 2
    assert "TrainJob: {" in out["-v"] and "TrainJob" not in out[""]
    r = CliRunner().invoke(main, ["-q", "-v", *args, "--out", str(tmp_path / "both")])
    assert r.exit_code == 2 and "-q or -v" in r.stderr


def test_a_train_job_parses_its_schedule_once_where_it_enters():
    from depthbench.config import TrainJob
    job = TrainJob(data="d", out="o", schedule=" fixed-first:0.5:2:1-4")
    assert job.depth_schedule == parse_schedule(" fixed-first:0.5:2:1-4")
    assert job.depth_schedule.switch_step(10) == parse_schedule("fixed-first:0.5:2:1-4").switch_step(10)
    assert job.replace(schedule="fixed:3").depth_schedule.canonical == "fixed:3"
    assert "_schedule" not in job.to_dict()   # the config's keys are its fields only
    with pytest.raises(UserError, match="schedule"):
        TrainJob(data="d", out="o", schedule="fixed:0")
