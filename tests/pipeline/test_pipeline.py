"""`depthbench run` and `depthbench report`: spec validation, resumable stages, report files."""

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from depthbench.cli.main import main
from depthbench.report import build_report, grid_clock

SMALL = """
name = "mini"
[data]
preset = "tiny"
set = { exposure = 1, n_people = 40, n_unseen_people = 8, name_pool = 8 }
[train]
preset = "tiny"
schedules = ["fixed:2", "fixed-first:0.5:2:1-4", "uniform:1-4"]
seeds = [0]
steps = 16
set = { d_model = 32, batch_size = 16, warmup_steps = 2, log_every = 2 }
matched_uniform = "fixed-first:0.5:2:1-4"
matched_schedule = "uniform:1-4"
[eval]
depths = "1-4"
splits = ["eval_reordered", "eval_unseen_people"]
switch_checkpoints = [0, 4]
[probe]
batches = 2
max_people = 16
depth_a = 2
depth_b = 4
[serve]
schedule = "uniform:1-4"
requests = 4
width = 2
max_depth = 4
exit = "argmax:2"
[run]
workers = 1
"""


def run_spec(tmp_path, text, *extra):
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    return CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "exp"), *extra])


@pytest.mark.slow
def test_pipeline_runs_every_stage_then_skips_them_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t0 = time.time()
    r = run_spec(tmp_path, SMALL, "--json")
    elapsed = time.time() - t0
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["runs"] == 4  # three schedules and the compute-matched uniform run
    # one stage row per stage before the report, its seconds its own end minus start; with one
    # worker the stages run one after another inside the run's own time
    st = pd.read_json(tmp_path / "exp" / "results" / "stages.jsonl", lines=True)
    ran = [line.split()[1] for line in r.stdout.splitlines() if line.startswith("run ")]
    assert sorted(st["stage"]) == sorted(s for s in ran if s != "report")
    assert (st["stage_s"] - (st["finished"] - st["started"])).abs().max() < 1e-6
    order = st.sort_values("started")
    assert (order["started"].to_numpy()[1:] >= order["finished"].to_numpy()[:-1]).all()
    clock = grid_clock(st)
    assert clock["workers"] == 1 and clock["stages"]["train"] == 4
    assert sum(clock["stage_s"].values()) <= clock["wall_s"] <= elapsed
    # one worker: the stages ran in this process, whose peak memory bounds theirs
    import resource
    assert 50 < clock["peak_rss_mb"] <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report = tmp_path / "exp" / "report"  # run --out DIR: the report goes to DIR/report
    for f in ("index.html", "README.md", "bits_vs_depth.png", "training_loss.png",
              "update_probe.png", "serving_speedup.png", "nll_vs_flops.png"):
        assert (report / f).is_file(), f
    res = tmp_path / "exp" / "results"
    evals = sorted((res / "eval").glob("*.jsonl"))
    # fixed-first: the switch (8), switch + 4 and the final step are evaluated
    assert [p.name for p in evals if "fixed-first" in p.name] == [
        "fixed-first_0p5_2_1-4-s0_step0000008.jsonl", "fixed-first_0p5_2_1-4-s0_step0000012.jsonl",
        "fixed-first_0p5_2_1-4-s0_step0000016.jsonl"]
    runs = pd.concat(pd.read_json(f, lines=True) for f in sorted((res / "runs").glob("*.jsonl")))
    matched = runs[runs["run"].str.startswith("matched-")].iloc[0]
    ff = runs[runs["schedule"] == "fixed-first:0.5:2:1-4"].iloc[0]
    assert matched["modeled_train_flops"] <= ff["modeled_train_flops"]
    assert matched["steps"] < 16

    again = run_spec(tmp_path, SMALL)
    assert again.exit_code == 0, again.output
    ran = [line for line in again.stdout.splitlines() if line.startswith("run ")]
    assert ran == [], ran
    # a run killed before its first checkpoint (none of its checkpoints, no marker): it resumes
    # and only it reruns
    run_dir = tmp_path / "exp" / "runs" / "fixed_2-s0"
    shutil.rmtree(run_dir / "checkpoints")
    (tmp_path / "exp" / "stages" / "train-fixed_2-s0.json").unlink()
    third = run_spec(tmp_path, SMALL)
    assert third.exit_code == 0, third.output
    ran = [line for line in third.stdout.splitlines() if line.startswith("run ")]
    assert ran == ["run  train-fixed_2-s0"], ran


def test_plan_prints_commands_without_running(tmp_path):
    r = run_spec(tmp_path, SMALL, "--plan")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("depthbench generate")
    assert sum(line.startswith("torchrun") for line in lines) == 4
    assert any(line.startswith("depthbench serve-bench") for line in lines)
    assert not (tmp_path / "exp" / "runs").exists()


def test_a_run_config_plans_what_the_command_plans(tmp_path):
    """``run_grid`` with a ``RunConfig`` is what ``depthbench run`` calls: the same spec, sets
    and output directory plan the same stage configs; the config round-trips through JSON and
    refuses an unknown executor by name."""
    from depthbench.config import ConfigError, RunConfig
    from depthbench.pipeline import run_grid
    spec = tmp_path / "spec.toml"
    spec.write_text(SMALL)
    r = CliRunner().invoke(main, ["run", str(spec), "--plan", "--out", str(tmp_path / "cli"),
                                  "--set", "train.steps=12", "--seeds", "0"])
    assert r.exit_code == 0, r.output
    cfg = RunConfig(spec=str(spec), out=str(tmp_path / "api"), plan=True,
                    sets={"train.steps": 12, "train.seeds": [0]})
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    got = run_grid(cfg, log=lambda m: None)
    assert got["plan"] and [c.replace("/api/", "/cli/") for c in got["commands"]] == \
        r.stdout.splitlines()
    for f in (tmp_path / "api" / "plan").glob("*.json"):
        assert f.read_text().replace("/api/", "/cli/") == \
            (tmp_path / "cli" / "plan" / f.name).read_text(), f.name
    with pytest.raises(ConfigError, match="executor"):
        RunConfig(executor="kubernetes")


def test_lr_sweep_and_arm_set_reach_each_run(tmp_path):
    """A sweep trains every arm and seed at each LR (named and tagged by it; the matched arm
    matched to the same LR's run); arm_set gives one arm its own keys over train.set."""
    text = SMALL.replace('matched_uniform = ', 'lrs = [0.001, 0.004]\narm_set = '
                         '{ "uniform:1-4~fixed-first:0.5:2:1-4" = { warmup_steps = 3 }, '
                         '"fixed:02" = { decay_frac = 0.5 } }\nmatched_uniform = ')
    r = run_spec(tmp_path, text, "--plan")
    assert r.exit_code == 0, r.output
    plan = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "exp" / "plan").glob("train-*.json")}
    assert len(plan) == 2 * 4
    for name, job in plan.items():
        lr = 0.001 if name.startswith("train-lr0.001-") else 0.004
        assert name.startswith(("train-lr0.001-", "train-lr0.004-"))
        assert job["train"]["lr"] == lr and job["tags"]["lr_sweep"] == lr
        assert job["train"]["warmup_steps"] == (3 if "matched" in name else 2)
        from depthbench.config import train_preset
        assert job["train"]["decay_frac"] == (0.5 if "fixed_2" in name
                                              else train_preset("tiny").decay_frac)
        if "matched" in name:
            assert job["match_flops"].endswith(name.split("-")[1] + "-fixed-first_0p5_2_1-4-s0")


def test_length_axis_trains_every_arm_at_each_multiple_of_the_steps(tmp_path):
    """lengths: each arm and seed at each multiple of train.steps, named x2-..., tagged
    length = 2; the matched arm matched to the same length's run."""
    text = SMALL.replace('matched_uniform = ', 'lengths = [1, 2.5]\nmatched_uniform = ')
    r = run_spec(tmp_path, text.replace("[probe]\n", "[probe]\nlr = 0.002\n"), "--plan")
    assert r.exit_code == 0, r.output
    probes = [json.loads(p.read_text()) for p in (tmp_path / "exp" / "plan").glob("probe-*.json")]
    assert len(probes) == 2 * 2 and all(p["lr"] == 0.002 for p in probes)   # a constant probe LR
    plan = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "exp" / "plan").glob("train-*.json")}
    assert len(plan) == 2 * 4
    for name, job in plan.items():
        x = 1 if name.startswith("train-x1-") else 2.5
        assert name.startswith(("train-x1-", "train-x2.5-")) and job["tags"]["length"] == x
        assert job["train"]["steps"] == round(16 * x)
        if "matched" in name:
            assert job["match_flops"].endswith(f"x{x:g}-fixed-first_0p5_2_1-4-s0")


def _rows_without_clocks(exp: Path) -> dict:
    clock = ("wall_clock", "cpu_clock", "wall_clock_s", "cpu_s", "train_cpu_s", "checkpoint")
    out = {}
    for f in sorted((exp / "results").glob("*/*.jsonl")):
        out[f.relative_to(exp).as_posix()] = [
            {k: v for k, v in json.loads(line).items() if k not in clock}
            for line in f.read_text().splitlines()]
    return out


@pytest.mark.slow
def test_shared_prefixes_train_once_and_change_no_row(tmp_path, monkeypatch):
    """fixed-first:0.5:2:1-4 starts from fixed:2's checkpoint at its switch (the grid's pool of 2
    runs it once fixed:2 is done), the compute-matched uniform run from the full uniform run's;
    every result row equals the grid's with share_prefixes off."""
    monkeypatch.chdir(tmp_path)
    spec = SMALL.replace("[serve]", "[serve]\nenabled = false").replace("workers = 1", "workers = 2")
    shared, alone = tmp_path / "shared", tmp_path / "alone"
    shared.mkdir(), alone.mkdir()
    r = run_spec(shared, spec, "--plan")
    assert r.exit_code == 0, r.output
    trains = [line.split()[-1] for line in r.stdout.splitlines() if line.startswith("torchrun")]
    plan = {Path(f).stem: json.loads(Path(f).read_text()) for f in trains}
    child = plan["train-fixed-first_0p5_2_1-4-s0"]
    assert (Path(child["start_from"]).name, child["start_step"]) == ("fixed_2-s0", 8)
    assert plan["train-fixed_2-s0"]["share_steps"] == [8]
    assert list(plan).index("train-fixed_2-s0") < list(plan).index("train-fixed-first_0p5_2_1-4-s0")
    # the compute-matched run starts from the full uniform run where its LR decay begins
    matched = plan["train-matched-uniform_1-4-s0"]
    assert Path(matched["start_from"]).name == "uniform_1-4-s0" and matched["start_step"] > 1
    assert plan["train-uniform_1-4-s0"]["share_steps"] == [matched["start_step"]]
    assert not plan["train-fixed_2-s0"]["start_from"] and not plan["train-uniform_1-4-s0"]["start_from"]
    assert run_spec(shared, spec).exit_code == 0
    log = (shared / "exp" / "logs" / "train-fixed-first_0p5_2_1-4-s0.log").read_text()
    assert "starting from" in log and "at step 8" in log
    log = (shared / "exp" / "logs" / "train-matched-uniform_1-4-s0.log").read_text()
    assert f"at step {matched['start_step']}" in log
    off = spec.replace("workers = 2", "workers = 2\nshare_prefixes = false")
    assert run_spec(alone, off).exit_code == 0
    assert _rows_without_clocks(shared / "exp") == _rows_without_clocks(alone / "exp")
    # a grid run before shared prefixes existed (its markers without them) reruns nothing
    for m in (shared / "exp" / "stages").glob("train-*.json"):
        rec = json.loads(m.read_text())
        for k in ("start_from", "start_step", "share_steps"):
            rec["config"].pop(k)
        m.write_text(json.dumps(rec))
    again = run_spec(shared, spec)
    assert again.exit_code == 0, again.output
    assert [line for line in again.stdout.splitlines() if line.startswith("run ")] == []


BAD = [
    ("[train]\nschedules = ['fixed:0']\n", "train.schedules"),
    ("[train]\nseeds = []\n", "train.schedules"),
    ("[train]\nsteps = 'many'\n", "train.steps: must be an integer"),
    ("[train]\nbogus = 1\n", "unknown key train.bogus"),
    ("[nonsense]\nx = 1\n", "unknown key or section"),
    ("[data]\nset = { n_people = -4 }\n", "data"),
    ("[data]\npreset = 'huge'\n", "unknown preset"),
    ("[train]\nset = { d_model = 30 }\n", "n_heads"),
    ("[eval]\ndepths = '3-1'\n", "eval.depths"),
    ("[eval]\nsplits = ['train']\n", "eval.splits"),
    ("[serve]\nexit = 'warp:1'\n", "serve.exit"),
    ("[serve]\nmodes = ['fast']\n", "serve.modes"),
    ("[serve]\nschedule = 'fixed:9'\n", "serve.schedule"),
    ("[train]\nmatched_uniform = 'fixed:3'\n", "matched_uniform"),
    ("[probe]\nbatches = 1\n", "probe"),
    ("[train]\nlrs = [0.003, 0.003]\n", "train.lrs"),
    ("[train]\nlengths = [1, 1.0]\n", "train.lengths"),
    ("[probe]\nlr = -0.001\n", "probe.lr"),
    ("[train]\nlengths = [0, 2]\n", "train.lengths"),
    ("[train]\nlengths = [1, 2]\nlrs = [0.001]\n", "train.lengths"),
    ("[train]\nlengths = [1, 2]\nbudgets = [0.5, 1.0]\n", "train.lengths"),
    ("[train]\nlrs = [-1.0]\n", "train.lrs"),
    ("[train]\nlrs = []\n", "train.lrs is empty"),
    ("[train]\nlengths = []\n", "train.lengths is empty"),
    ("[train]\nbudgets = []\n", "train.budgets is empty"),
    ("[train]\nlrs = [0.001]\nset = { lr = 0.002 }\n", "train.lrs"),
    ("[train]\nlrs = [0.003, 0.0030000001]\n", "train.lrs"),
    ("[train]\nbudgets = [0.5, 1.0]\narm_set = { 'uniform:1-16 @ 30%' = { lr = 0.001 } }\n",
     "train.arm_set"),
    ("[train]\nbudgets = [0.5]\narm_set = { 'uniform:1-16 @ half' = { lr = 0.001 } }\n",
     "arm_set"),
    ("[train]\narm_set = { 'fixed:9' = { lr = 0.001 } }\n", "train.arm_set"),
    ("[train]\narm_set = { 'uniform:1-16' = { lr = -1.0 } }\n", "train.arm_set.uniform:1-16"),
    ("[train]\narm_set = { 'uniform:1-16' = { d_model = 32 } }\n", "model key"),
    ("[train]\narm_set = { 'uniform:1-16' = { steps = 5 } }\n", "arm_set.uniform:1-16.steps"),
    ("[train]\narm_set = { 'uniform:1-16' = 0.001 }\n", "train.arm_set"),
    ("[train]\nlrs = [0.001]\narm_set = { 'uniform:1-16' = { lr = 0.001 } }\n", "lrs"),
    ("name = 'a b'\n", "name"),
    ("this is not toml", "not valid TOML"),
]


@pytest.mark.parametrize("text,needle", BAD)
def test_bad_specs_exit_2_with_one_line(tmp_path, text, needle):
    r = run_spec(tmp_path, text)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not (tmp_path / "exp").exists()


def test_missing_spec_file(tmp_path):
    r = CliRunner().invoke(main, ["run", str(tmp_path / "none.toml")])
    assert r.exit_code == 2 and "does not exist" in r.stderr


def _hand_made_rows(tmp_path):
    rng = np.random.default_rng(0)
    ev, curves, runs = [], [], []
    for sched, flops in (("fixed:4", 1.0), ("fixed-first:0.8:4:1-16", 1.3), ("uniform:1-16", 2.0)):
        for seed in (0, 1):
            run = f"{sched}-{seed}"
            for depth in range(1, 9):
                for split in ("eval_reordered", "eval_unseen_people"):
                    ev.append({"run": run, "schedule": sched, "seed": seed, "step": 100,
                               "depth": depth, "split": split, "nll": 2 + rng.random(),
                               "value_nll": 3.0, "exact_match": rng.random(),
                               "bits_per_person": 50 * rng.random(), "ceiling_bits": 70.0,
                               "modeled_train_flops": flops * 1e12, "wall_clock_s": 10 * flops})
            for step in range(10, 101, 10):
                curves.append({"run": run, "schedule": sched, "seed": seed, "step": step, "K": 4,
                               "loss": 4 - step / 50, "switch_step": 80 if "first" in sched else None})
            runs.append({"run": run, "schedule": sched, "seed": seed, "final_loss": 2.0,
                         "modeled_train_flops": flops * 1e12, "wall_clock_s": 10 * flops})
    probe = [{"run": "ff", "schedule": "fixed-first:0.8:4:1-16", "step": 80, "depth": d,
              "depth_a": 4, "depth_b": 16, "nll_diff": 0.01 * d, "ci95": 0.005,
              "updates_after_switch": 0} for d in range(1, 9)]
    serve = [{"mode": m, "tokens_per_s": t, "speedup": t / 100, "ceiling": 1.8,
              "fraction_of_ceiling": t / 180, "mean_depth": 8.0}
             for m, t in (("static", 100), ("no_refill", 130), ("batch1", 20), ("cdb", 160))]
    d = tmp_path / "rows"
    d.mkdir()
    for name, rows in (("eval", ev), ("curves", curves), ("runs", runs), ("probe", probe)):
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pd.DataFrame(serve).to_csv(d / "serve.csv", index=False)
    return d


def test_report_from_hand_made_rows_produces_every_file(tmp_path):
    d = _hand_made_rows(tmp_path)
    files = build_report([d], tmp_path / "rep", title="hand-made")
    names = {f.name for f in files}
    assert {"index.html", "README.md", "bits_vs_depth.png", "paired_difference.png",
            "fixed_depth_recall.png", "nll_vs_flops.png", "training_loss.png", "update_probe.png",
            "serving_speedup.png"} <= names
    for f in files:
        assert f.stat().st_size > 0
    md = (tmp_path / "rep" / "README.md").read_text()
    assert "modeled FLOPs (% of uniform" in md and "± " in md
    # the paper's terminal NLL: training loss over the final 4% of updates (here step 100 only)
    assert "terminal training NLL (final 4% of updates)" in md and "| 2.000 ± 0.000" in md
    assert "## Verdicts" in md and "95% CI" in md
    assert md.index("## Verdicts") < md.index("## Figures") < md.index("\n| ")   # tables last
    page = (tmp_path / "rep" / "index.html").read_text()
    assert page.count("<img") == len([n for n in names if n.endswith(".png")])


def test_report_brackets_readings_and_tells_a_matched_arm_apart(tmp_path):
    d = _hand_made_rows(tmp_path)
    rows = [json.loads(x) for x in (d / "eval.jsonl").read_text().splitlines()]
    extra = []
    for r in rows:
        r.update(floor_bits_per_person=0.0 if r["split"] == "eval_reordered" else 0.25,
                 floor_exact_match=0.004, params=1000, people_trained=10, n_grad_loops=0,
                 exact_match=0.5 + r["exact_match"] / 2)   # room for the matched arm's -0.5
        if r["schedule"] == "uniform:1-16":  # the same seeds at fewer FLOPs, a lower reading
            extra.append({**r, "run": "matched-" + r["run"], "matched_to": "fixed:4",
                          "exact_match": r["exact_match"] - 0.5, "modeled_train_flops": 1e12})
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + extra))
    build_report([d], tmp_path / "rep", title="brackets")
    md = (tmp_path / "rep" / "README.md").read_text()
    assert "Brackets" in md and "task bits per parameter" in md and "0.7" in md  # 10 x 70 / 1000
    assert "floor (no model)" in (tmp_path / "rep" / "findings.md").read_text()
    assert (tmp_path / "rep" / "exact_match_vs_depth.png").is_file()
    # the matched arm is its own schedule, and its paired exact-match gap is read off exactly
    assert "uniform:1-16~fixed:4" in md
    line = next(x for x in md.splitlines() if "uniform:1-16~fixed:4" in x and "-0.5000" in x
                and "CI excludes 0" not in x and "| yes" in x)
    assert line.split("|")[2].strip() == "2"  # paired seeds


def test_report_errors(tmp_path):
    r = CliRunner().invoke(main, ["report", str(tmp_path / "nothing"), "--out", str(tmp_path / "r")])
    assert r.exit_code == 2 and "does not exist" in r.stderr
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(main, ["report", str(tmp_path / "empty"), "--out", str(tmp_path / "r")])
    assert r.exit_code == 2 and "no result files" in r.stderr


def test_report_decides_each_comparison_once_with_holm_correction(tmp_path):
    from depthbench.stats import sign_flip_p
    rng = np.random.default_rng(5)
    rows, gap = [], {"fixed:2": 0.2, "fixed:3": 0.0, "uniform:1-4": 0.0}
    for seed in range(8):
        base = rng.uniform(0.3, 0.5)
        for sched, g in gap.items():
            for depth in range(1, 5):
                em = base + g + (rng.normal(0, 0.005) if sched != "uniform:1-4" else 0.0)
                rows.append({"run": f"{sched}-{seed}", "schedule": sched, "seed": seed,
                             "step": 10, "depth": depth, "split": "eval_reordered", "nll": 1.0,
                             "exact_match": em, "bits_per_person": 10 * em, "ceiling_bits": 10.0,
                             "modeled_train_flops": 1e9})
    d = tmp_path / "rows"
    d.mkdir()
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_report([d], tmp_path / "rep", reference="uniform:1-4")
    md = (tmp_path / "rep" / "README.md").read_text()
    claims = [x for x in md.splitlines() if "| 1-4 " in x]
    better = next(x for x in claims if "fixed:2 - uniform:1-4" in x)
    same = next(x for x in claims if "fixed:3 - uniform:1-4" in x)
    # the oracle: all 8 differences positive, so p = 2 / 2^8, Holm over the 2 claims doubles it
    assert "0.0078" in better and "0.0156" in better and "| higher " in better
    assert "8 of 8" in better
    assert "equivalent within ±0.05" in same
    assert "recalls more than `uniform:1-4`" in md and "lies above 0" not in md  # no per-depth claims
    assert sign_flip_p([0.2] * 8) == 2 / 256


def _eval_rows(d):
    return [json.loads(x) for x in (d / "eval.jsonl").read_text().splitlines()]


def _report_fails(tmp_path, paths, needle):
    r = CliRunner().invoke(main, ["report", *map(str, paths), "--out", str(tmp_path / "r")])
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_report_reads_a_file_named_twice_once_and_refuses_copied_rows(tmp_path):
    d = _hand_made_rows(tmp_path)
    build_report([d], tmp_path / "once")
    build_report([d, d / "eval.jsonl", tmp_path / "rows" / ".." / "rows"], tmp_path / "twice")
    assert (tmp_path / "once" / "findings.md").read_text() == \
        (tmp_path / "twice" / "findings.md").read_text()
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "eval.jsonl").write_bytes((d / "eval.jsonl").read_bytes())
    _report_fails(tmp_path, [d, tmp_path / "copy"], "is given 2 times")
    # serve rows copied: every value repeats
    (tmp_path / "copy" / "eval.jsonl").unlink()
    (tmp_path / "copy" / "serve.csv").write_bytes((d / "serve.csv").read_bytes())
    _report_fails(tmp_path, [d, tmp_path / "copy"], "serve row (every column)")


def test_report_refuses_rows_of_two_datasets_and_rows_it_cannot_use(tmp_path):
    d = _hand_made_rows(tmp_path)
    rows = _eval_rows(d)
    for r in rows:
        r["dataset_hash"] = "a" * 16 if r["seed"] == 0 else "b" * 16
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _report_fails(tmp_path, [d], "rows come from 2 datasets")
    seen = [{**r, "split": "eval_seen_order", "dataset_hash": "a" * 16} for r in rows
            if r["split"] == "eval_reordered"]
    (tmp_path / "seen").mkdir()
    (tmp_path / "seen" / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in seen))
    _report_fails(tmp_path, [tmp_path / "seen"], "no eval_reordered split")


BUDGETS = """
name = "budgets-mini"
[data]
preset = "tiny"
set = { exposure = 1, n_people = 40, n_unseen_people = 8, name_pool = 8 }
[train]
preset = "tiny"
schedules = ["fixed:2", "uniform:1-4"]
seeds = [0, 1]
steps = 12
budgets = [0.5, 1.0]
budget_schedule = "uniform:1-4"
set = { d_model = 32, batch_size = 16, warmup_steps = 2, log_every = 2 }
[eval]
depths = "1-4"
splits = ["eval_reordered"]
[probe]
enabled = false
[serve]
enabled = false
[run]
workers = 1
"""


@pytest.mark.slow
def test_budget_grid_spends_each_share_of_the_flop_budget(tmp_path, monkeypatch):
    from depthbench.checkpoint import read_run
    from depthbench.flops import FlopModel, schedule_flops
    from depthbench.schedules import parse_schedule
    monkeypatch.chdir(tmp_path)
    r = run_spec(tmp_path, BUDGETS, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["runs"] == 8
    ref = read_run(tmp_path / "exp" / "runs" / "b100-uniform_1-4-s0")
    fm = FlopModel(**ref["flop_model"])
    full = schedule_flops(fm, parse_schedule("uniform:1-4"), 12, 0, ref["tokens_per_step"])
    assert ref["train"]["steps"] == 12  # the reference schedule at 100% is the budget itself
    for run in (tmp_path / "exp" / "runs").iterdir():
        rec = read_run(run)
        frac = int(run.name[1:4]) / 100
        sched, n = parse_schedule(rec["schedule"]), rec["train"]["steps"]
        spent = schedule_flops(fm, sched, n, rec["seed"], rec["tokens_per_step"])
        more = schedule_flops(fm, sched, n + 1, rec["seed"], rec["tokens_per_step"])
        assert spent <= frac * full < more, run.name
    ev = pd.read_json(tmp_path / "exp" / "results" / "eval" /
                      "b050-fixed_2-s1_step{:07d}.jsonl".format(
                          read_run(tmp_path / "exp" / "runs" / "b050-fixed_2-s1")["train"]["steps"]),
                      lines=True)
    assert set(ev["budget"]) == {0.5}
    assert (tmp_path / "exp" / "report" / "bits_vs_depth_by_budget.png").stat().st_size > 0
    r = run_spec(tmp_path, BUDGETS.replace("budgets = [0.5, 1.0]", "budgets = [0.5, 1.5]"))
    assert r.exit_code == 2 and "train.budgets" in r.stderr


def test_budget_grid_sweeps_each_arm_lr_at_each_budget(tmp_path, monkeypatch):
    """An LR sweep at budgets: every arm, budget and LR is one run; the sweep's report chooses
    one LR per arm and budget (``ARM @ 50%``, the key a spec's arm_set takes back) at its lowest
    mean NLL of the asked value, recomputed here from the eval rows."""
    monkeypatch.chdir(tmp_path)
    spec = BUDGETS.replace("seeds = [0, 1]", "seeds = [0]").replace(
        "budgets = [0.5, 1.0]", "budgets = [0.5, 1.0]\nlrs = [0.01, 0.03]")
    r = run_spec(tmp_path, spec, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["runs"] == 8
    ev = pd.concat(pd.read_json(f, lines=True)
                   for f in (tmp_path / "exp" / "results" / "eval").glob("*.jsonl"))
    ev = ev[ev["split"] == "eval_reordered"]
    means = ev.groupby(["schedule", "budget", "lr_sweep"])["value_nll"].mean()
    want = {f"{s} @ {round(100 * b)}%": float(g.droplevel([0, 1]).idxmin())
            for (s, b), g in means.groupby(level=[0, 1])}
    chosen = json.loads((tmp_path / "exp" / "report" / "lr_sweep.json").read_text())["chosen_lr"]
    assert chosen == want and len(chosen) == 4
    # a spec takes them back per budget; an arm's own key applies at every other budget
    from depthbench.pipeline.spec import TrainSpec
    t = TrainSpec.from_dict({"schedules": ["fixed:2", "uniform:1-4"], "budgets": [0.5, 1.0],
                             "arm_set": {"fixed:2 @ 50%": {"lr": 0.03}, "fixed:2": {"lr": 0.02},
                                         "uniform:01-4 @50%": {"lr": 0.04}}})
    assert t.arm_overrides("fixed:2", 0.5)["lr"] == 0.03
    assert t.arm_overrides("fixed:2", 1.0)["lr"] == 0.02
    assert t.arm_overrides("uniform:1-4", 0.5)["lr"] == 0.04
    assert "lr" not in t.arm_overrides("uniform:1-4", 1.0)


ROOT = Path(__file__).resolve().parents[2]


# every report drawn from its own rows (the scale report, drawn from other reports' rows, is
# rebuilt in tests/report/test_scale.py)
@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "reports").iterdir()
                                        if (p / "rows").is_dir()))
@pytest.mark.slow
def test_each_committed_report_is_rebuilt_from_its_committed_rows(tmp_path, name):
    report = ROOT / "reports" / name
    build_report([report / "rows"], tmp_path / "again", title=name)
    assert (tmp_path / "again" / "findings.md").read_text() == \
        (report / "findings.md").read_text(), f"redraw reports/{name} from its rows"
    def body(f):  # all but the line naming where the rows were read from
        return [x for x in f.read_text().splitlines() if not x.startswith("Generated by")]
    assert body(tmp_path / "again" / "README.md") == body(report / "README.md")


def test_run_help_names_every_packaged_experiment():
    from depthbench.pipeline.spec import EXPERIMENTS
    r = CliRunner().invoke(main, ["run", "--help"])
    assert r.exit_code == 0
    import re
    text = " ".join(re.sub(r"-\n\s+", "-", r.output).split())   # a name wrapped at its hyphen
    listed = text[text.index("packaged experiment ("):text.index("), or a calibration recipe")]
    names = sorted(p.stem for p in EXPERIMENTS.glob("*.toml"))
    assert sorted(n.strip() for n in listed.split("(", 1)[1].split(",")) == names
    assert "calibration/NAME, docs/calibration.md" in text


def test_every_calibration_recipe_is_a_packaged_spec_run_by_its_name(tmp_path):
    """calibration/NAME names a packaged spec (a file of that name is not needed here), its
    report is named after it, and a name outside the packaged ones is a path, refused as one."""
    from depthbench.pipeline.spec import EXPERIMENTS, load_spec, packaged_names, spec_path
    recipes = [n for n in packaged_names() if n.startswith("calibration/")]
    assert recipes == sorted(f"calibration/{p.stem}" for p in
                             (EXPERIMENTS / "calibration").glob("*.toml")) and recipes
    for name in recipes:
        assert spec_path(name) == EXPERIMENTS / f"{name}.toml"
        assert load_spec(name).name == "calibration-" + name.split("/")[1]
    r = CliRunner().invoke(main, ["run", "calibration/no-such-recipe", "--plan",
                                  "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "calibration/NAME" in r.output and not (tmp_path / "x").exists()


def _edited(tmp_path, kind_file, edit):
    d = _hand_made_rows(tmp_path)
    rows = [json.loads(x) for x in (d / kind_file).read_text().splitlines()]
    rows = edit(rows)
    (d / kind_file).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def _set_first(**kw):
    def edit(rows):
        rows[0].update(kw)
        return rows
    return edit


@pytest.mark.parametrize("kind_file,edit,needle", [
    ("eval.jsonl", _set_first(nll=-0.5), "nll"),
    ("eval.jsonl", _set_first(exact_match=1.7), "exact_match"),
    ("eval.jsonl", _set_first(bits_per_person=140.0), "ceiling"),
    ("eval.jsonl", _set_first(depth=0), "depth"),
    ("eval.jsonl", _set_first(depth=1.5), "whole number"),
    ("eval.jsonl", _set_first(facts=0), "facts"),
    ("eval.jsonl", _set_first(people=0), "people"),
    ("eval.jsonl", _set_first(split="eval_bogus"), "eval_bogus"),
    ("eval.jsonl", _set_first(exact_match=True), "exact_match"),
    ("probe.jsonl", _set_first(depth_a=2.5), "whole number"),
    ("curves.jsonl", _set_first(loss=-1.0), "loss"),
    ("probe.jsonl", _set_first(ci95=-0.1), "ci95"),
    ("eval.jsonl", lambda rows: [{**r, "seed": -1} for r in rows], "seed"),
    ("eval.jsonl", lambda rows: [{**r, "wall_clock_s": -5.0} for r in rows], "wall_clock_s"),
    ("runs.jsonl", lambda rows: [{**r, "params": 0} for r in rows], "params"),
    # a seed read at half the depths of the others
    ("eval.jsonl", lambda rows: [r for r in rows if not (r["run"] == "fixed:4-1" and r["depth"] > 4)],
     "same depths"),
    # text rows over 16 tokens against 4,848
    ("eval.jsonl", lambda rows: [{k: v for k, v in {**r, "bits_per_byte": 1.0, "split": "validation",
                                                   "tokens": 16 if r["run"] == "fixed:4-0" else 4848}.items()
                                  if k not in ("bits_per_person", "exact_match", "ceiling_bits")}
                                 for r in rows if r["split"] == "eval_reordered"], "tokens"),
])
def test_the_report_refuses_readings_that_cannot_be_or_cannot_be_paired(tmp_path, kind_file, edit, needle):
    """Readings no depthbench stage can write (a negative NLL, an exact match above 1, bits above
    the ceiling, a negative interval) and runs read unlike (a seed at half the depths, text over
    a different number of tokens): one line, exit 2, no report."""
    d = _edited(tmp_path, kind_file, edit)
    r = CliRunner().invoke(main, ["report", str(d), "--out", str(tmp_path / "rep")])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and needle in r.output, r.output
    assert "np." not in r.output          # plain numbers, not numpy reprs
    assert not (tmp_path / "rep").exists()


def test_stage_rows_that_end_before_they_start_are_refused_and_idle_time_is_not_the_grids():
    from depthbench.report import busy_seconds
    # two invocations of one grid a day apart: 100 s and 50 s of stages, not a day
    a = pd.Series([0.0, 10.0, 86400.0])
    b = pd.Series([100.0, 60.0, 86450.0])
    assert busy_seconds(a, b) == 150.0
    assert busy_seconds(pd.Series([0.0, 5.0]), pd.Series([10.0, 20.0])) == 20.0   # overlapping
    assert np.isnan(busy_seconds(pd.Series([float("nan")]), pd.Series([1.0])))


def test_a_stage_row_ending_before_its_start_is_refused(tmp_path):
    d = _hand_made_rows(tmp_path)
    (d / "stages.jsonl").write_text(json.dumps({"kind": "stage", "stage": "train-x", "command": "train",
                                                "started": 100.0, "finished": 50.0, "stage_s": 5.0}) + "\n")
    r = CliRunner().invoke(main, ["report", str(d), "--out", str(tmp_path / "rep")])
    assert r.exit_code == 2 and "ends before it starts" in r.output, r.output


def test_the_final_checkpoint_is_evaluated_on_every_split_and_kept_ones_on_the_headline_one(tmp_path):
    from depthbench.pipeline.run import Pipeline
    from depthbench.pipeline.spec import load_spec
    spec = tmp_path / "s.toml"
    spec.write_text(SMALL)
    pipe = Pipeline(load_spec(spec), tmp_path / "exp")
    evals = [st for g in pipe.stages() for st in g if st.command == "eval"]
    for st in evals:
        final = st.id.endswith("-final") or st.id.endswith(f"-{pipe.spec.train.steps:07d}")
        want = ["eval_reordered", "eval_unseen_people"] if final else ["eval_reordered"]
        assert list(st.config["splits"]) == want, st.id
    assert {st.id.rsplit("-", 1)[1] for st in evals} >= {f"{8:07d}", f"{12:07d}", f"{16:07d}"}


def test_an_eval_stages_key_covers_its_task_files_content(tmp_path):
    """Task files edited in place are other questions: the eval stage's key changes (so the
    grid reruns it), while a file's modification time alone changes nothing."""
    from depthbench.pipeline.run import Pipeline
    from depthbench.pipeline.spec import load_spec
    from depthbench.pipeline.stages import Stage
    pipe = Pipeline(load_spec("smoke"), tmp_path / "exp")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "t.yaml").write_text("task: mine\n")
    st = Stage("eval-x", "eval", {"run": "r", "task_path": str(tasks)}, [], [])
    first = pipe.ledger.key(st)
    os.utime(tasks / "t.yaml", (1, 1))
    assert pipe.ledger.key(st) == first
    (tasks / "t.yaml").write_text("task: mine\ndataset_path: other\n")
    assert pipe.ledger.key(st) != first
    assert pipe.ledger.key(Stage("eval-x", "eval", {"run": "r", "task_path": ""}, [], [])) != first


def test_schedules_that_share_no_seed_are_not_compared(tmp_path):
    """Rows whose schedules were trained on disjoint seeds pair nothing: the verdict says so
    and no number is printed for a difference that was never computed."""
    d = _edited(tmp_path, "eval.jsonl",
                lambda rows: [{**r, "seed": r["seed"] + 100} if r["schedule"] == "fixed:4" else r
                              for r in rows])
    r = CliRunner().invoke(main, ["report", str(d), "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "rep" / "README.md").read_text()
    assert "share no seed" in text
    assert not [ln for ln in text.splitlines() if "share no seed" in ln and "nan" in ln]


def test_lr_sweep_report_chooses_each_arm_by_mean_serving_nll(tmp_path):
    """A sweep's report: each arm's chosen LR is the naive argmin of its seeds' mean serving NLL
    of the asked value (the person task's verdict metric, not the whole row's NLL, which here
    ranks the LRs the other way; final checkpoints only, an earlier checkpoint ignored),
    written to lr_sweep.json and drawn; the curves name each run's arm at its LR."""
    rng = np.random.default_rng(1)
    ev, curves, naive = [], [], {}
    for arm, matched in (("uniform:1-16", None), ("fixed-first:0.67:4:1-16", None),
                         ("uniform:1-16", "fixed-first:0.67:4:1-16")):
        label = f"{arm}~{matched}" if matched else arm
        means = {}
        for lr in (0.0015, 0.003, 0.006):
            per_seed = []
            for seed in (100, 101):
                run = f"lr{lr:g}-{'matched-' if matched else ''}{arm}-{seed}"
                nll = rng.uniform(1, 3, size=4)
                per_seed.append(nll.mean())
                for step, flip in ((50, True), (100, False)):   # step 50: not final, reversed
                    for depth, x in enumerate(nll, 1):
                        ev.append({"run": run, "schedule": arm, "seed": seed, "step": step,
                                   "depth": depth, "split": "eval_reordered", "nll": 4.5 - x,
                                   "value_nll": 4.5 - x if flip else x,
                                   "exact_match": rng.random(),
                                   "bits_per_person": 1.0, "ceiling_bits": 70.0,
                                   "modeled_train_flops": 1e12, "lr_sweep": lr,
                                   "matched_to": matched})
                curves.append({"run": run, "schedule": arm, "seed": seed, "step": 10, "K": 4,
                               "loss": 3.0, "switch_step": None, "lr_sweep": lr,
                               "matched_to": matched})
            means[lr] = np.mean(per_seed)
        naive[label] = min(means, key=means.get)
    d = tmp_path / "rows"
    d.mkdir()
    for name, rows in (("eval", ev), ("curves", curves)):
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = {f.name for f in build_report([d], tmp_path / "rep", title="sweep")}
    assert {"lr_sweep.png", "lr_sweep.json", "training_loss.png"} <= files
    chosen = json.loads((tmp_path / "rep" / "lr_sweep.json").read_text())["chosen_lr"]
    assert chosen == naive
    md = (tmp_path / "rep" / "README.md").read_text()
    assert "Learning-rate sweep" in md and md.count("| yes ") == 3
    assert "NLL of the asked value" in md
    # rebuilt from the report's own rows: the same choice
    build_report([tmp_path / "rep" / "rows"], tmp_path / "rep2", title="sweep")
    assert json.loads((tmp_path / "rep2" / "lr_sweep.json").read_text())["chosen_lr"] == naive
    # a sweep run in parts, one LR so far: nothing is chosen, and the report says so
    part = pd.DataFrame([r for r in ev if r["lr_sweep"] == 0.003])
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part.to_dict("records")))
    build_report([d], tmp_path / "part", title="sweep")
    assert json.loads((tmp_path / "part" / "lr_sweep.json").read_text())["chosen_lr"] == {}
    md = (tmp_path / "part" / "README.md").read_text()
    assert md.count("at peak LR 0.003 only") == 3 and md.count("no LR is chosen from one") == 3
    assert "| yes " not in md


@pytest.mark.slow
def test_length_report_compares_within_each_length_and_draws_them(tmp_path):
    """Rows of a lengths grid: each comparison is made within one length (pairing runs of the
    same length only: the naive per-length difference), tabled and drawn against length."""
    d = _hand_made_rows(tmp_path)
    ev = [json.loads(x) for x in (d / "eval.jsonl").read_text().splitlines()]
    rows = []
    for x, shift in ((1, 0.0), (2, 0.3)):
        for r in ev:
            bump = shift if r["schedule"] == "fixed:4" else 0.0
            rows.append({**r, "run": f"x{x}-{r['run']}", "length": x,
                         "exact_match": min(1.0, r["exact_match"] + bump)})
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = {f.name for f in build_report([d], tmp_path / "rep", title="lengths")}
    assert "comparisons_by_length.png" in files
    md = (tmp_path / "rep" / "README.md").read_text()
    df = pd.DataFrame(rows)
    re = df[df["split"] == "eval_reordered"]
    for x in (1, 2):
        per = re[re["length"] == x].groupby(["schedule", "seed"])["exact_match"].mean()
        naive = (per["fixed:4"] - per["uniform:1-16"]).mean()
        assert f"At {x}x the spec's steps, `fixed:4`" in md
        assert f"differs by {naive:+.3f}" in md


def test_plateaus_read_the_change_in_mean_serving_nll_between_lengths(tmp_path):
    """Between consecutive lengths each schedule's paired relative change of mean serving NLL
    gets its verdict from the 95% interval against ±1%: a schedule whose NLL falls 10% at 2x is
    still improving, one whose NLL moves 0.2% is on a plateau, one that moves ±5% by seed is not
    resolved; the change equals the naive per-seed ratio."""
    from depthbench.report.compare import plateaus_of
    d = _hand_made_rows(tmp_path)
    ev = [json.loads(x) for x in (d / "eval.jsonl").read_text().splitlines()]
    factor = {"fixed:4": lambda seed: 0.9 - 0.01 * seed, "uniform:1-16": lambda seed: 1.002 - 0.001 * seed,
              "fixed-first:0.8:4:1-16": lambda seed: 1.05 if seed == 0 else 0.95}
    rows = []
    for x in (1, 2):
        for r in ev:
            f = factor[r["schedule"]](r["seed"]) if x == 2 else 1.0
            rows.append({**r, "run": f"x{x}-{r['run']}", "length": x, "nll": r["nll"] * f,
                         "value_nll": r["value_nll"] * f})
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = pd.DataFrame(rows)
    re = df[df["split"] == "eval_reordered"]
    p = plateaus_of(re).set_index("schedule")
    per = re.groupby(["schedule", "length", "seed"])["value_nll"].mean()   # the asked value's
    for s in factor:
        naive = np.mean([per[s, 2, seed] / per[s, 1, seed] - 1 for seed in (0, 1)])
        assert p.loc[s, "diff"] == pytest.approx(naive)
    assert p.loc["fixed:4", "verdict"] == "still improving"
    assert p.loc["uniform:1-16", "verdict"].startswith("on a plateau")
    assert p.loc["fixed-first:0.8:4:1-16", "verdict"].startswith("not resolved at this precision")
    build_report([d], tmp_path / "rep", title="lengths")
    md = (tmp_path / "rep" / "README.md").read_text()
    assert "Plateaus" in md and "`fixed:4` from 1x the spec's steps to 2x" in md
    # rows of one length: no plateau table
    assert plateaus_of(re[re["length"] == 1]).empty


@pytest.mark.parametrize("name,cut", [("eval.jsonl", "mid-row"), ("eval.csv", "mid-row"),
                                      ("eval.jsonl", "null run"), ("eval.csv", "no newline")])
@pytest.mark.slow
def test_truncated_row_files_and_rows_without_a_run_are_refused(tmp_path, name, cut):
    """A row file cut in the middle of its last row (JSONL or CSV) and a row without its run are
    one line, exit 2, no report; a whole file saved without its final newline reads as it is."""
    d = _hand_made_rows(tmp_path)
    rows = [json.loads(x) for x in (d / "eval.jsonl").read_text().splitlines()]
    (d / "eval.jsonl").unlink()
    if cut == "null run":
        rows[3]["run"] = None
    f = d / name
    if name.endswith(".csv"):
        pd.DataFrame(rows).to_csv(f, index=False)
    else:
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = f.read_bytes()
    f.write_bytes(data[:-40] if cut == "mid-row" else data[:-1] if cut == "no newline" else data)
    r = CliRunner().invoke(main, ["report", str(d), "--out", str(tmp_path / "rep")])
    if cut == "no newline":
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    assert ("middle of a row" if cut == "mid-row" else "has no run") in r.output
    assert not (tmp_path / "rep").exists()


def test_two_grids_stage_rows_combine_but_one_grid_twice_is_refused(tmp_path):
    """Each grid has a `generate` and a `report` stage: two grids' rows (a 1x and a 2x length
    grid) combine in one report, counted as both grids' time; the same grid's rows given twice
    are still refused as duplicates."""
    d = _hand_made_rows(tmp_path)
    for name, t0 in (("a", 0.0), ("b", 1000.0)):
        g = tmp_path / name
        g.mkdir()
        (g / "stage.jsonl").write_text("".join(json.dumps(
            {"kind": "stage", "stage": s, "command": s, "started": t0 + i * 10,
             "finished": t0 + i * 10 + 5, "stage_s": 5.0, "workers": 1}) + "\n"
            for i, s in enumerate(("generate", "report"))))
    from depthbench.errors import UserError
    from depthbench.report.load import load_rows
    rows = load_rows([d, tmp_path / "a", tmp_path / "b"])
    assert len(rows["stage"]) == 4
    from depthbench.report import busy_seconds
    assert busy_seconds(rows["stage"]["started"], rows["stage"]["finished"]) == pytest.approx(20.0)
    shutil.copytree(tmp_path / "a", tmp_path / "a2")
    with pytest.raises(UserError, match="stage generate"):
        load_rows([d, tmp_path / "a", tmp_path / "a2"])


def test_run_set_and_seeds_change_any_knob_of_a_packaged_spec(tmp_path):
    """``run NAME --seeds ... --set SECTION.KEY=VALUE`` lays its values over the packaged spec
    (nested tables too) before it is checked; a key outside the spec's sections, a path
    through a value, bad seeds and an unknown key are each one line and exit 2, with nothing
    written."""
    out = tmp_path / "exp"
    r = CliRunner().invoke(main, ["run", "smoke", "--seeds", "3", "--set", "train.steps=12",
                                  "--set", "train.set.d_model=16", "--plan", "--out", str(out)])
    assert r.exit_code == 0, r.output
    plans = sorted(p.name for p in (out / "plan").glob("train-*.json"))
    assert plans == ["train-fixed-first_0p5_2_1-4-s3.json", "train-uniform_1-4-s3.json"]
    job = json.loads((out / "plan" / plans[1]).read_text())
    assert job["train"]["steps"] == 12 and job["model"]["d_model"] == 16
    for args, says in ((["--set", "trian.steps=3"], "first part must be a section"),
                       (["--set", "train.steps.x=3"], "train.steps in"),
                       (["--seeds", "a,b"], "integers separated by commas"),
                       (["--set", "train.stepz=3"], "unknown key train.stepz")):
        bad = tmp_path / "bad"
        r = CliRunner().invoke(main, ["run", "smoke", *args, "--out", str(bad)])
        assert r.exit_code == 2 and says in r.stderr and len(r.stderr.splitlines()) == 1, args
        assert not bad.exists()


def test_run_writes_its_report_under_its_own_directory(tmp_path, monkeypatch):
    """Without report.out the report goes to OUT/report: a run in a checkout never writes over
    a committed report under reports/."""
    from depthbench.pipeline import Pipeline, load_spec
    monkeypatch.chdir(tmp_path)
    pipe = Pipeline(load_spec("quickstart"), tmp_path / "runs" / "quickstart")
    assert pipe.report_dir == tmp_path / "runs" / "quickstart" / "report"


def test_the_serving_chart_legend_covers_no_bar(tmp_path):
    # drawn from the quick start's committed serve rows; every bar's box and the legend's box
    # in display coordinates, after the layout the saved figure has
    from depthbench.report.figures import FigureSet
    from depthbench.report.sections import serve_section
    overlaps = []

    class Checked(FigureSet):
        def save(self, fig, name, caption):
            fig.tight_layout()
            fig.canvas.draw()
            ax = fig.axes[0]
            legend = ax.get_legend().get_window_extent()
            bars = [p.get_window_extent() for p in ax.patches if p.get_height() > 0]
            overlaps.extend(b for b in bars if b.overlaps(legend))
            assert bars
            super().save(fig, name, caption)

    sv = pd.read_csv(ROOT / "reports" / "quickstart" / "rows" / "serve.csv")
    serve_section(Checked(tmp_path), sv)
    assert (tmp_path / "serving_speedup.png").is_file() and not overlaps


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_a_reports_first_screen_in_a_real_browser_holds_its_verdicts_and_headline_figure(tmp_path):
    # the documented check (docs/cli.md): chromium's own rendering at 1280 x 900; the verdicts
    # are black text, the headline figure's curves the report's palette (#1f77b4, #d62728,
    # #2ca02c: the quick start's three schedules)
    import subprocess

    import numpy as np
    from matplotlib.image import imread
    shot = tmp_path / "first.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1280,900", f"--screenshot={shot}",
                    (ROOT / "reports" / "quickstart" / "index.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    px = (imread(shot)[..., :3] * 255).round()
    assert px.shape[:2] == (900, 1280)
    colored = [np.abs(px - np.array(c)).max(axis=-1) < 24
               for c in ((31, 119, 180), (214, 39, 40), (44, 160, 44))]
    assert all(m[450:].sum() > 200 for m in colored)   # the figure's curves, on the first screen
    assert (px[:450].max(axis=-1) < 60).sum() > 5000    # the verdicts' text above it
