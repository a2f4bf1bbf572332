"""Trackers are views of the files: a replay logs exactly a run's metrics.jsonl (curve against
step, in-training evaluations) and each run's depth sweep from its eval rows (against depth),
checked through the protocol with a recording tracker, and read back from TensorBoard's own
event files."""

import json

import pytest
from click.testing import CliRunner

from depthbench import trackers
from depthbench.cli.main import main
from depthbench.config import EvalConfig
from depthbench.evaluate.sweep import run_eval


class Recorder:
    runs: dict = {}

    def __init__(self, run):
        self.points = Recorder.runs.setdefault(run, [])

    def log(self, metrics, step):
        self.points.append((step, dict(metrics)))

    def close(self):
        pass


@pytest.fixture
def recorded(monkeypatch):
    Recorder.runs = {}
    monkeypatch.setattr(trackers, "open_tracker", lambda name, out, run, config=None: Recorder(run))
    return Recorder.runs


def test_a_replay_logs_the_runs_curve_and_its_sweep_exactly(trained_run, recorded, tmp_path):
    run_eval(EvalConfig(run=str(trained_run), depths="1-3", splits=("eval_reordered",)))
    trackers.replay(trained_run, "tensorboard", tmp_path / "tb")
    curve = [json.loads(x) for x in (trained_run / "metrics.jsonl").read_text().splitlines()]
    got = recorded[trained_run.name]
    assert [s for s, _ in got] == [r["step"] for r in curve]
    for (_, m), row in zip(got, curve):
        assert m == {f"train/{k}": float(row[k]) for k in trackers.CURVE_KEYS if k in row}
    sweep = recorded[f"{trained_run.name}-sweep"]
    assert [d for d, _ in sweep] == [1, 2, 3]
    rows = [json.loads(x) for f in sorted((trained_run / "eval").glob("*.jsonl"))
            for x in f.read_text().splitlines()]
    last = max(r["step"] for r in rows)
    for depth, m in sweep:
        row = next(r for r in rows if r["depth"] == depth and r["step"] == last)
        assert m["sweep/eval_reordered/bits_per_person"] == pytest.approx(row["bits_per_person"], rel=1e-12)
        assert m["sweep/eval_reordered/exact_match"] == pytest.approx(row["exact_match"], rel=1e-12)


def test_tensorboard_holds_what_the_run_logged(trained_run, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    r = CliRunner().invoke(main, ["track", str(trained_run), "--tracker", "tensorboard",
                                  "--out", str(tmp_path / "tb"), "--json"])
    assert r.exit_code == 0, r.output
    acc = EventAccumulator(str(tmp_path / "tb" / trained_run.name))
    acc.Reload()
    curve = [json.loads(x) for x in (trained_run / "metrics.jsonl").read_text().splitlines()
             if "loss" in x]
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [r["step"] for r in curve]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in curve], rel=1e-6)


def test_a_source_with_nothing_to_track_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(main, ["track", str(tmp_path / "empty"), "--tracker", "tensorboard",
                                  "--out", str(tmp_path / "tb")])
    assert r.exit_code == 2 and "no result files" in r.stderr and len(r.stderr.splitlines()) == 1


def test_a_run_trained_with_a_tracker_logs_each_row_as_it_is_appended(small_data, tmp_path,
                                                                     recorded):
    # live: what the tracker saw is exactly metrics.jsonl, and a resumed run logs only the
    # rows it appends
    from depthbench.config import ModelConfig, TrainConfig, TrainJob
    from depthbench.train.job import run_train
    out = tmp_path / "runs" / "u"
    job = TrainJob(data=str(small_data), out=str(out), model=ModelConfig(d_model=32, n_heads=4),
                   train=TrainConfig(steps=12, batch_size=8, warmup_steps=2, log_every=4,
                                     eval_every=8, ckpt_every=0, keep_steps=(4,), compile=False),
                   schedule="uniform:1-4", tracker="tensorboard")
    run_train(job, log=lambda *a: None, progress=False)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    first = trackers.curve_points(rows)
    assert recorded["u"] == first and [s for s, _ in first] == [4, 8, 8, 12]
    # roll the run back to its step-4 checkpoint, as if it had died there, and resume it
    from depthbench import checkpoint as ckpt
    (out / "checkpoints" / ckpt.ckpt_name(12)).unlink()
    ckpt.atomic_write_text(out / "checkpoints" / "latest", ckpt.ckpt_name(4))
    run_train(TrainJob.from_dict({**job.to_dict(), "resume": True}), log=lambda *a: None,
              progress=False)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert recorded["u"] == first + [p for p in trackers.curve_points(rows) if p[0] > 4]


def test_probe_and_serve_rows_are_logged_point_by_point():
    probe = [{"run": "r", "depth": d, "updates_after_switch": u, "nll_diff": 0.1 * d + u,
              "value_nll_diff": -d, "ci95": 0.01, "step": 100 + u} for u in (0, 16) for d in (1, 2)]
    got = trackers.probe_points(probe)
    assert got == {"r-probe": [(d, {f"probe/after_{u}/nll_diff": 0.1 * d + u,
                                    f"probe/after_{u}/value_nll_diff": float(-d)})
                               for u in (0, 16) for d in (1, 2)]}
    serve = [{"run": "runs/u", "mode": m, "rate": r, "exit": "trace:2", "tokens_per_s": t,
              "fraction": 0.5} for r, m, t in ((0.0, "static", 1.0), (0.0, "cdb", 2.0),
                                                (50.0, "cdb", 3.0))]
    assert trackers.serve_points(serve) == {"serve-u": [
        (0, {"serve/static/tokens_per_s": 1.0, "serve/static/fraction": 0.5,
             "serve/cdb/tokens_per_s": 2.0, "serve/cdb/fraction": 0.5}),
        (1, {"serve/cdb/tokens_per_s": 3.0, "serve/cdb/fraction": 0.5})]}


def test_eval_with_a_tracker_logs_the_sweep_it_wrote(trained_run, tmp_path, recorded):
    r = CliRunner().invoke(main, ["eval", str(trained_run), "--depths", "1-2", "--split",
                                  "eval_reordered", "--max-people", "16", "--out",
                                  str(tmp_path / "ev"), "--tracker", "tensorboard"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "ev.jsonl").read_text().splitlines()]
    want = trackers.sweep_points(rows)[trained_run.name]
    assert recorded[f"{trained_run.name}-sweep"] == sorted(want, key=lambda p: p[0])


@pytest.mark.slow
def test_a_grid_with_a_tracker_logs_every_run_and_changes_no_stage(tmp_path):
    # the tracker is a view: a finished grid run again with one reruns nothing, and the runs
    # it trains with one log live to TensorBoard's own files
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    base = ["run", "smoke", "--set", "probe.enabled=false", "--set", "serve.enabled=false",
            "--set", "eval.switch_checkpoints=[]", "--set", 'train.schedules=["uniform:1-4"]']
    r = CliRunner().invoke(main, base + ["--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, base + ["--out", str(tmp_path / "a"), "--set",
                                         "run.tracker=tensorboard"])
    assert r.exit_code == 0 and "run  train" not in r.output, r.output
    r = CliRunner().invoke(main, base + ["--out", str(tmp_path / "b"), "--set",
                                         "run.tracker=tensorboard"])
    assert r.exit_code == 0, r.output
    acc = EventAccumulator(str(tmp_path / "b" / "tracker" / "uniform_1-4-s0"))
    acc.Reload()
    curve = [json.loads(x) for x in (tmp_path / "b" / "runs" / "uniform_1-4-s0" /
                                     "metrics.jsonl").read_text().splitlines() if "loss" in x]
    assert [e.step for e in acc.Scalars("train/loss")] == [c["step"] for c in curve]
    sweep = EventAccumulator(str(tmp_path / "b" / "tracker" / "uniform_1-4-s0-sweep"))
    sweep.Reload()
    assert [e.step for e in sweep.Scalars("sweep/eval_reordered/exact_match")] == [1, 2, 3, 4]
