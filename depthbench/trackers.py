"""Experiment trackers behind one small protocol (``Tracker``: ``log(metrics, step)`` and
``close()``), fed from what depthbench already writes: a run's ``metrics.jsonl`` (the training
curve and its in-training evaluations) and result rows (a depth sweep's eval rows, probe and
serve rows). The files stay the truth; a tracker is a view of them, written offline and replayed
any time (``depthbench track``).

    tensorboard   torch.utils.tensorboard's SummaryWriter (pip install tensorboard)
    trackio       trackio, stored locally (pip install trackio)
    wandb         Weights & Biases, offline unless WANDB_MODE says otherwise (pip install wandb)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol

from depthbench.errors import UserError

TRACKERS = ("tensorboard", "trackio", "wandb")
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


def replay(source: str | Path, tracker: str, out: str | Path) -> dict[str, int]:
    """Log ``source`` into ``tracker`` under ``out``: a run directory's metrics.jsonl (its
    curve) and its eval rows, or a rows file or directory (each run's depth sweep). Returns the
    points logged per run."""
    from depthbench.report.load import load_rows
    from depthbench.train.metrics import metrics_rows
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
    ev = load_rows([source]).get("eval")
    if ev is None:
        if logged:
            return logged
        raise UserError(f"{source} holds no run (metrics.jsonl) and no eval rows; give a run "
                        "directory or the rows a depth sweep wrote")
    for run, pts in sweep_points(ev.to_dict("records")).items():
        t = open_tracker(tracker, out, f"{run}-sweep")
        for depth, m in sorted(pts, key=lambda p: p[0]):
            t.log(m, depth)
        t.close()
        logged[f"{run}-sweep"] = len(pts)
    return logged
