"""Checkpoints: atomic to write, safe to read.

A checkpoint is one ``torch.save`` file of tensors and plain values only (model, optimizer, RNG
states, step, configs, dataset hash, package version), read back with
``torch.load(weights_only=True)`` so that loading never unpickles arbitrary objects. Writing
goes to a temporary file in the same directory, is fsynced, then renamed over the target, and
the ``latest`` pointer is replaced the same way: a crash leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import torch

from depthbench import __version__
from depthbench.errors import UserError

FORMAT = 1


class CheckpointError(UserError):
    """A checkpoint that is missing, truncated, corrupt or unsafe to load."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def remove_stale_temporaries(ckpt_dir: Path) -> None:
    """Temporary files of writes that a crash interrupted (never read, safe to delete)."""
    if Path(ckpt_dir).is_dir():
        for f in Path(ckpt_dir).glob(".*.tmp-*"):
            f.unlink(missing_ok=True)


def ckpt_name(step: int) -> str:
    return f"step_{step:07d}.pt"


def save(ckpt_dir: Path, step: int, state: dict) -> Path:
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / ckpt_name(step)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    payload = {"format": FORMAT, "version": __version__, "step": step, **state}
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        atomic_write_text(ckpt_dir / "latest", path.name + "\n")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def load(path: Path, map_location="cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        ck = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, RuntimeError, ValueError,
            KeyError, AttributeError, TypeError) as e:
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is not a readable depthbench checkpoint (truncated, "
                              f"corrupt or unsafe to load: {first}); use another checkpoint or "
                              "retrain") from None
    if not isinstance(ck, dict) or ck.get("format") != FORMAT or "model" not in ck:
        raise CheckpointError(f"{path} is not a depthbench checkpoint (format {FORMAT})")
    return ck


def list_checkpoints(run_dir: Path) -> dict[int, Path]:
    d = Path(run_dir) / "checkpoints"
    out = {}
    for p in d.glob("step_*.pt") if d.is_dir() else []:
        try:
            out[int(p.stem.split("_")[1])] = p
        except ValueError:
            continue
    return dict(sorted(out.items()))


def latest(run_dir: Path) -> Path | None:
    d = Path(run_dir) / "checkpoints"
    pointer = d / "latest"
    if pointer.is_file():
        p = d / pointer.read_text().strip()
        if p.is_file():
            return p
    ckpts = list_checkpoints(run_dir)
    return ckpts[max(ckpts)] if ckpts else None


def resolve(run_or_ckpt: str | Path, step: int | None = None) -> Path:
    """A run directory (its latest checkpoint, or the one at ``step``) or a checkpoint file."""
    p = Path(run_or_ckpt)
    if p.is_file():
        return p
    if not p.is_dir():
        raise CheckpointError(f"{p} is neither a run directory nor a checkpoint file")
    if step is not None:
        ckpts = list_checkpoints(p)
        if step not in ckpts:
            raise CheckpointError(f"run {p} has no checkpoint at step {step}; it has steps "
                                  f"{', '.join(map(str, ckpts)) or 'none'}")
        return ckpts[step]
    c = latest(p)
    if c is None:
        raise CheckpointError(f"run {p} has no checkpoint; train it with `depthbench train`")
    return c


def read_run(run_dir: Path) -> dict:
    f = Path(run_dir) / "run.json"
    try:
        return json.loads(f.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{run_dir} is not a run directory (no run.json)") from None
    except json.JSONDecodeError:
        raise CheckpointError(f"{f} is corrupt; retrain the run") from None


def load_model(run_or_ckpt: str | Path, step: int | None = None, device="cpu"):
    """(model in eval mode, checkpoint dict) from a run directory or checkpoint file."""
    from depthbench.config import ConfigError, ModelConfig
    from depthbench.model import LoopedTransformer

    path = resolve(run_or_ckpt, step)
    ck = load(path, map_location=device)
    try:
        cfg = ModelConfig.from_dict(ck["model_config"])
    except (ConfigError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path} holds no valid model config ({e})") from None
    model = LoopedTransformer(cfg)
    try:
        model.load_state_dict(ck["model"])
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not fit the model config ({str(e)[:120]})") from None
    ck["path"] = str(path)
    return model.to(device).eval(), ck
