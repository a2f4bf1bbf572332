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
    for (step, m), row in zip(got, curve):
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
