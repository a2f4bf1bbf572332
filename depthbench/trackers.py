"""Experiment trackers behind one small protocol (``Tracker``: ``log(metrics, step)`` and
``close()``), fed from what depthbench already writes: a run's ``metrics.jsonl`` (the training
curve and its in-training evaluations) and result rows (a depth sweep's eval rows, probe and
serve rows). The files stay the truth; a tracker is a view of them, written offline: live as a
run trains (``train --tracker``, ``[run] tracker`` in a spec: ``LiveCurve``), as each command
writes its rows (``eval``, ``probe-update``, ``serve-bench``, ``serve-sim`` with ``--tracker``),
and replayed any time (``depthbench track``).

    tensorboard   torch.utils.tensorboard's SummaryWriter (pip install tensorboard)
    trackio       trackio, its SQLite store under the tracker directory (pip install trackio)
    wandb         Weights & Biases, offline unless WANDB_MODE says otherwise (pip install wandb)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol

from depthbench.config import TRACKERS
from depthbench.errors import UserError

CURVE_KEYS = ("loss", "lr", "K", "tokens", "flops", "wall_clock", "cpu_clock")


class Tracker(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def _need(module: str, name: str):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"--tracker {name} needs {name}: pip install {name}") from None


class TensorBoard:
    def __init__(self, out: Path, run: str, config: dict):
        _need("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter
        self.w = SummaryWriter(log_dir=str(out / run))
        if config:
            self.w.add_text("config", "```\n" + json.dumps(config, indent=1, default=str) + "\n```")

    def log(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.w.add_scalar(k, v, step)

    def close(self) -> None:
        self.w.close()


class Trackio:
    def __init__(self, out: Path, run: str, config: dict):
        import os
        # trackio keeps its SQLite store in TRACKIO_DIR (read when it is first imported): under
        # out, unless the user chose another
        os.environ.setdefault("TRACKIO_DIR", str(out.resolve()))
        self.t = _need("trackio", "trackio")
        self.run = self.t.init(project=out.name, name=run, config=config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.t.log(metrics, step=step)

    def close(self) -> None:
        self.t.finish()


class Wandb:
    def __init__(self, out: Path, run: str, config: dict):
        import os
        self.w = _need("wandb", "wandb")
        self.run = self.w.init(project=out.name, name=run, config=config, dir=str(out),
                               mode=os.environ.get("WANDB_MODE", "offline"), reinit=True)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


def tracker_dir(given: str | Path | None, beside: str | Path) -> Path:
    """Where a tracker writes: the directory given, else ``tracker/`` beside ``beside`` (a run
    directory or a result file)."""
    return Path(given) if given else Path(beside).parent / "tracker"


def open_tracker(name: str, out: str | Path, run: str, config: dict | None = None) -> Tracker:
    """A tracker of kind ``name`` writing run ``run`` under ``out``."""
    kinds = {"tensorboard": TensorBoard, "trackio": Trackio, "wandb": Wandb}
    if name not in kinds:
        raise UserError(f"unknown tracker {name!r}; choose one of {', '.join(TRACKERS)}")
    return kinds[name](Path(out), run, config or {})


def _numbers(d: dict) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def curve_points(rows: list[dict]) -> list[tuple[int, dict[str, float]]]:
    """(step, metrics) of a run's metrics.jsonl rows: the training curve under ``train/`` and
    each in-training evaluation under ``eval/depth_K/``."""
    out = []
    for r in rows:
        if "eval" in r:
            m = {f"eval/depth_{k}/{name}": v for k, d in r["eval"].items()
                 for name, v in _numbers(d).items()}
        else:
            m = {f"train/{k}": v for k, v in _numbers(r).items() if k in CURVE_KEYS}
        if m:
            out.append((int(r["step"]), m))
    return out


class LiveCurve:
    """A training run's curve logged as its rows are appended to metrics.jsonl (``row``), so
    that a tracker shows a run while it trains; a resumed run logs the rows it appends. The
    tracker opens at the first row, once the run has checked its inputs: a refused command
    leaves no tracker run behind."""

    def __init__(self, name: str, out: str | Path, run: str, config: dict | None = None):
        self.args, self.tracker = (name, out, run, config), None

    def row(self, row: dict) -> None:
        if self.tracker is None:
            self.tracker = open_tracker(*self.args)
        for step, m in curve_points([row]):
            self.tracker.log(m, step)

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.close()


def sweep_points(rows: list[dict]) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """Per run, (serving depth, metrics) of its eval rows at their last step, each metric
    under ``sweep/SPLIT/``: a tracker's x axis is the serving depth here."""
    last: dict[str, int] = {}
    for r in rows:
        last[r["run"]] = max(last.get(r["run"], -1), int(r.get("step") or 0))
    out: dict[str, list] = {}
    for r in rows:
        if int(r.get("step") or 0) != last[r["run"]] or "depth" not in r:
            continue
        keep = {k: v for k, v in _numbers(r).items() if k not in ("depth", "step", "seed")}
        out.setdefault(r["run"], []).append(
            (int(r["depth"]), {f"sweep/{r.get('split', 'all')}/{k}": v for k, v in keep.items()}))
    return out


PROBE_KEYS = ("nll_diff", "value_nll_diff")


def probe_points(rows: list[dict]) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """Per run, (serving depth, metrics) of its probe rows: each probed checkpoint's benefit of
    the deeper update under ``probe/after_U/`` (U: updates after the switch, or the step)."""
    out: dict[str, list] = {}
    for r in rows:
        at = r.get("updates_after_switch")
        at = f"after_{int(at)}" if isinstance(at, (int, float)) and math.isfinite(at) else \
            f"step_{int(r.get('step') or 0)}"
        m = {f"probe/{at}/{k}": v for k, v in _numbers(r).items() if k in PROBE_KEYS}
        if m and "depth" in r:
            out.setdefault(f"{r['run']}-probe", []).append((int(r["depth"]), m))
    return out


def serve_points(rows: list[dict]) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """Per served model, each mode's serve row under ``serve/MODE/`` (``serve/EXIT/MODE/``
    where the rows sweep exits); the step is the row's place among the request rates served
    (0: the closed loop, or the only rate)."""
    def rate(r: dict) -> float:
        return _numbers({"rate": r.get("rate")}).get("rate", 0.0)

    rates = sorted({rate(r) for r in rows})
    exits = len({str(r.get("exit")) for r in rows}) > 1
    out: dict[str, dict[int, dict]] = {}
    for r in rows:
        name = "serve-" + Path(str(r.get("run") or "model")).name.replace(":", "-")
        tag = f"serve/{r.get('exit')}/{r['mode']}" if exits else f"serve/{r['mode']}"
        out.setdefault(name, {}).setdefault(rates.index(rate(r)), {}).update(
            {f"{tag}/{k}": v for k, v in _numbers(r).items() if k != "rate"})
    return {n: sorted(by.items()) for n, by in out.items()}


ROW_POINTS = {"eval": sweep_points, "probe": probe_points, "serve": serve_points}


def log_rows(rows: dict[str, list[dict]], tracker: str, out: str | Path) -> dict[str, int]:
    """Log result rows by kind (eval: each run's depth sweep; probe; serve) into ``tracker``
    under ``out``; returns the points logged per tracker run."""
    logged = {}
    for kind, points in ROW_POINTS.items():
        if not rows.get(kind):
            continue
        for run, pts in points(rows[kind]).items():
            name = f"{run}-sweep" if kind == "eval" else run
            at: dict[int, dict] = {}    # one log per step (trackers want steps in order)
            for x, m in pts:
                at.setdefault(x, {}).update(m)
            t = open_tracker(tracker, out, name)
            for x in sorted(at):
                t.log(at[x], x)
            t.close()
            logged[name] = len(pts)
    return logged


def log_row_files(files: list[str | Path], tracker: str, out: str | Path) -> dict[str, int]:
    """Log the eval, probe and serve rows of JSONL row files (a stage's outputs) into
    ``tracker`` under ``out``; files that are not there, or hold other kinds, add nothing."""
    rows: dict[str, list[dict]] = {}
    for f in map(Path, files):
        if f.suffix == ".jsonl" and f.is_file():
            for line in f.read_text().splitlines():
                r = json.loads(line) if line.strip() else {}
                if r.get("kind") in ROW_POINTS:
                    rows.setdefault(r["kind"], []).append(r)
    return log_rows(rows, tracker, out)


def replay(source: str | Path, tracker: str, out: str | Path) -> dict[str, int]:
    """Log ``source`` into ``tracker`` under ``out``: a run directory's metrics.jsonl (its
    curve) and its eval rows, or a rows file or directory (each run's depth sweep, probe and
    serve rows). Returns the points logged per tracker run."""
    from depthbench.report.load import load_rows
    from depthbench.runlog import metrics_rows
    source, logged = Path(source), {}
    if (source / "metrics.jsonl").is_file():
        from depthbench.checkpoint import read_run
        t = open_tracker(tracker, out, source.name, read_run(source))
        pts = curve_points(metrics_rows(source))
        for step, m in pts:
            t.log(m, step)
        t.close()
        logged[source.name] = len(pts)
        evals = source / "eval"
        if not evals.is_dir():
            return logged
        source = evals
    frames = load_rows([source])
    rows = {k: frames[k].to_dict("records") for k in ROW_POINTS if frames.get(k) is not None}
    if not rows:
        if logged:
            return logged
        raise UserError(f"{source} holds no run (metrics.jsonl) and no eval, probe or serve "
                        "rows; give a run directory or the rows a command wrote")
    return {**logged, **log_rows(rows, tracker, out)}
