"""Checkpoints: atomic to write, safe to read.

A checkpoint is one ``torch.save`` file of tensors and plain values only (model, optimizer, RNG
states, step, configs, dataset hash, package version), read back with
``torch.load(weights_only=True)`` so that loading never unpickles arbitrary objects. Writing
goes to a temporary file in the same directory, is fsynced, then renamed over the target, and
the ``latest`` pointer is replaced the same way: a crash leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import warnings
import zipfile
from pathlib import Path

import torch

from depthbench.data_gen.format import sha256_file
from depthbench.errors import UserError
from depthbench.fsio import atomic_write_text
from depthbench.version import __version__

FORMAT = 1


class CheckpointError(UserError):
    """A checkpoint that is missing, truncated, corrupt or unsafe to load."""


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
        # torch.load does not check the archive's CRCs: a flipped byte in tensor data would load
        # as silently different weights, so every checkpoint carries its sha256 beside it
        atomic_write_text(checksum_path(path), f"{sha256_file(tmp)}  {path.name}\n")
        os.replace(tmp, path)
        atomic_write_text(ckpt_dir / "latest", path.name + "\n")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def checksum_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".sha256")


def remove(path: Path) -> None:
    """A checkpoint and its checksum."""
    Path(path).unlink(missing_ok=True)
    checksum_path(path).unlink(missing_ok=True)


def _verify(path: Path) -> None:
    """Against the sha256 the trainer wrote beside it: torch.load checks no CRC, so a
    checkpoint that cannot be verified is not loaded."""
    side = checksum_path(path)
    if not side.is_file() and not zipfile.is_zipfile(path):   # torch.save writes a zip
        raise CheckpointError(f"{path} is not a checkpoint (a .pt file that depthbench train "
                              "wrote) nor a run directory; give the run directory")
    if not side.is_file():
        raise CheckpointError(f"checkpoint {path} has no checksum file {side.name} beside it, so "
                              "its weights cannot be verified; copy the .sha256 file with the "
                              "checkpoint (or give the run directory)")
    try:
        want = side.read_text().split()[0]
    except (UnicodeDecodeError, OSError, IndexError):
        want = ""
    if sha256_file(path) != want:
        raise CheckpointError(f"{path} does not match its checksum {side.name} (corrupt or "
                              "tampered); use another checkpoint or retrain")


def load(path: Path, map_location="cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    _verify(path)
    try:
        with warnings.catch_warnings():   # a refused file is reported below, in one line
            warnings.simplefilter("ignore", UserWarning)
            ck = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, RuntimeError, ValueError,
            KeyError, AttributeError, TypeError) as e:
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is not a readable depthbench checkpoint (truncated, "
                              f"corrupt or unsafe to load: {first}); use another checkpoint or "
                              "retrain") from None
    if not isinstance(ck, dict) or ck.get("format") != FORMAT or "model" not in ck:
        raise CheckpointError(f"{path} is not a depthbench checkpoint (format {FORMAT})")
    problem = _checkpoint_problem(ck)
    if problem:
        raise CheckpointError(f"{path} is not a valid depthbench checkpoint ({problem}); use "
                              "another checkpoint or retrain")
    return ck


def _is_int(x) -> bool:
    return type(x) is int


def _is_num(x) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


# the fields a checkpoint written by the trainer holds, and what each must be
_CKPT_FIELDS = {
    "step": lambda v: _is_int(v) and v >= 0,
    "model": lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(t, torch.Tensor)
                                                   for k, t in v.items()),
    "model_config": lambda v: isinstance(v, dict),
    "train_config": lambda v: isinstance(v, dict),
    "optimizer": lambda v: isinstance(v, dict) and isinstance(v.get("state"), dict)
    and isinstance(v.get("param_groups"), list),
    "rng": lambda v: isinstance(v, dict) and isinstance(v.get("torch"), torch.Tensor)
    and v["torch"].dtype == torch.uint8,
    "schedule": lambda v: isinstance(v, str),
    "dataset_hash": lambda v: isinstance(v, str),
    "flops": _is_num, "wall_clock": _is_num,
    "tokens": lambda v: _is_int(v) and v >= 0,
}


def _checkpoint_problem(ck: dict) -> str | None:
    for key, ok in _CKPT_FIELDS.items():
        if key not in ck:
            return f"no {key!r}"
        if not ok(ck[key]):
            return f"{key!r} has the wrong type or value"
    if "cpu_clock" in ck and not (_is_num(ck["cpu_clock"]) and ck["cpu_clock"] >= 0):
        return "'cpu_clock' has the wrong type or value"  # optional: older checkpoints lack it
    return None


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
        try:
            name = pointer.read_text().strip()
        except (UnicodeDecodeError, OSError):
            name = ""
        if not re.fullmatch(r"step_\d{7}\.pt", name):
            raise CheckpointError(f"{pointer} is corrupt (it must name a checkpoint file such as "
                                  "step_0000800.pt); delete it to use the newest checkpoint")
        p = d / name
        if not p.is_file():
            raise CheckpointError(f"{pointer} names {name}, which is missing; restore it, or "
                                  "delete the pointer to use the newest remaining checkpoint")
        return p
    ckpts = list_checkpoints(run_dir)
    return ckpts[max(ckpts)] if ckpts else None


def resolve(run_or_ckpt: str | Path, step: int | None = None) -> Path:
    """A run directory (its latest checkpoint, or the one at ``step``) or a checkpoint file."""
    p = Path(run_or_ckpt)
    if p.is_file():
        if step is not None:
            raise CheckpointError(f"{p} is a checkpoint file, so --checkpoint {step} cannot pick "
                                  "another step; give the run directory with --checkpoint, or "
                                  "the checkpoint file alone")
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
    if c is None and (p / "config.json").is_file() and any(p.glob("*.safetensors")):
        raise CheckpointError(f"{p} is a model folder (an export or a port), not a run; load it "
                              f"with --model depthbench:{p} (or ouro:, huginn:, hf:)")
    if c is None:
        raise CheckpointError(f"run {p} has no checkpoint; train it with `depthbench train`")
    return c


def read_run(run_dir: Path) -> dict:
    """The run record ``run.json``, checked against its schema (every field the trainer writes)."""
    from depthbench.config import ModelConfig, TrainConfig
    from depthbench.schedules import parse_schedule

    f = Path(run_dir) / "run.json"
    if not Path(run_dir).is_dir():
        raise CheckpointError(f"{run_dir} is not a run directory (it does not exist or is a file)")
    try:
        rec = json.loads(f.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{run_dir} is not a run directory (no run.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        raise CheckpointError(f"{f} is corrupt; retrain the run") from None
    fields = {
        "version": lambda v: isinstance(v, str),
        "model": lambda v: isinstance(v, dict) and ModelConfig.from_dict(v) is not None,
        "train": lambda v: isinstance(v, dict) and TrainConfig.from_dict(v) is not None,
        "schedule": lambda v: isinstance(v, str) and parse_schedule(v) is not None,
        "seed": lambda v: _is_int(v) and v >= 0,
        "data": lambda v: isinstance(v, str),
        "dataset_hash": lambda v: isinstance(v, str),
        "seq_len": lambda v: _is_int(v) and v >= 1,
        "tokens_per_step": lambda v: _is_int(v) and v >= 1,
        "flop_model": _flop_model_ok,
        "switch_step": lambda v: v is None or (_is_int(v) and v >= 0),
    }
    if not isinstance(rec, dict):
        raise CheckpointError(f"{f} must hold a JSON object; retrain the run")
    for key, ok in fields.items():
        try:
            good = key in rec and ok(rec[key])
        except UserError as e:
            raise CheckpointError(f"{f}: field {key!r} is invalid ({e}); retrain the run") from None
        if not good:
            raise CheckpointError(f"{f}: field {key!r} is missing or has the wrong type; retrain "
                                  "the run")
    import dataclasses

    from depthbench.flops import FlopModel
    model = ModelConfig.from_dict(rec["model"])
    if model.vocab_size and {k: v for k, v in rec["flop_model"].items()} != \
            dataclasses.asdict(FlopModel.of(model, rec["seq_len"])):
        raise CheckpointError(f"{f}: field 'flop_model' does not follow from the run's model "
                              "config and sequence length (edited); retrain the run")
    return rec


def load_run(run_or_ckpt: str | Path, step: int | None = None, device="cpu"):
    """(model in eval mode, checkpoint dict) from a run directory or checkpoint file."""
    from depthbench.config import ConfigError, ModelConfig
    from depthbench.models.build import build_model

    path = resolve(run_or_ckpt, step)
    ck = load(path, map_location=device)
    run_dir = run_dir_of(run_or_ckpt)
    if run_dir is not None:
        _check_belongs(ck, read_run(run_dir), path, run_dir)
    try:
        cfg = ModelConfig.from_dict(ck["model_config"])
    except (ConfigError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path} holds no valid model config ({e})") from None
    model = build_model(cfg.replace(init_from=""))   # the checkpoint's weights replace any start
    try:
        model.load_state_dict(ck["model"])
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not fit the model config ({str(e)[:120]})") from None
    from depthbench.models.config import check_finite
    check_finite(model.named_parameters(), path)
    ck["path"] = str(path)
    return model.to(device).eval(), ck


def _flop_model_ok(v) -> bool:
    """The FLOP model a run records: exactly FlopModel's fields, each of its type and range."""
    import dataclasses

    from depthbench.flops import FlopModel
    names = {f.name for f in dataclasses.fields(FlopModel)}
    return (isinstance(v, dict) and set(v) <= names and {"f0", "fr", "n_grad_loops", "readout"}
            <= set(v) and all(_is_num(v[k]) and v[k] >= 0 for k in ("f0", "fr", "readout"))
            and v["fr"] > 0 and _is_int(v["n_grad_loops"]) and v["n_grad_loops"] >= 0
            and isinstance(v.get("gate_readouts", False), bool))


def _check_belongs(ck: dict, rec: dict, path: Path, run_dir: Path) -> None:
    """A checkpoint inside a run directory is that run's: the same model, training config,
    schedule and dataset as its record (a checkpoint copied in from another run, with its own
    valid checksum, is refused)."""
    for ck_key, rec_key in (("model_config", "model"), ("train_config", "train"),
                            ("schedule", "schedule"), ("dataset_hash", "dataset_hash")):
        if json.loads(json.dumps(ck.get(ck_key))) != rec.get(rec_key):
            raise CheckpointError(f"checkpoint {path} does not belong to run {run_dir}: its "
                                  f"{rec_key} differs from the run record's; use the run's own "
                                  "checkpoints or give the checkpoint file on its own")


def _check_finished(ck: dict, rec: dict, run: str | Path) -> None:
    """A run directory is read as its result only once training reached its planned steps; a
    run stopped early (killed, or still training) is refused, its checkpoint named instead."""
    at, planned = ck.get("step"), rec["train"]["steps"]
    if isinstance(at, int) and at < planned:
        raise CheckpointError(f"run {run} stopped at step {at} of {planned} (killed, or still "
                              f"training): finish it with `depthbench train --out {run} --resume`"
                              f", or give the checkpoint file {ck.get('path', '')} to read that "
                              "step as it is")


def run_dir_of(run_or_ckpt: str | Path) -> Path | None:
    """The run directory of a run directory or of a checkpoint inside one (else None)."""
    p = Path(run_or_ckpt)
    d = p if p.is_dir() else p.parent.parent
    return d if (d / "run.json").is_file() else None


def run_name(run_or_ckpt: str | Path) -> str:
    """The name a run's rows carry: its run directory's name (for a checkpoint inside a run
    too), else the checkpoint file's stem."""
    d = run_dir_of(run_or_ckpt)
    return d.name if d is not None else Path(run_or_ckpt).stem


def run_keys(name: str, ck: dict, meta: dict) -> dict:
    """The columns that key a row to the checkpoint it reads: run, schedule, seed, step (every
    eval, text, lm-eval and probe row starts with them)."""
    return {"run": name, "schedule": ck.get("schedule"), "seed": meta.get("seed"),
            "step": ck["step"]}


def check_compatible(ck: dict, ds, data: str | Path) -> None:
    """The one check that a checkpoint was trained on dataset ``ds`` (read from ``data``)."""
    if ck.get("dataset_hash") != ds.hash:
        raise CheckpointError(
            f"checkpoint {ck.get('path', '')} was trained on dataset "
            f"{str(ck.get('dataset_hash'))[:12]}, but {data} is {ds.hash[:12]}; pass the --data "
            "it was trained on")


def open_run(run_or_ckpt: str | Path, step: int | None = None, data: str | Path | None = None,
             device="cpu", verify: bool = True, data_option: str = "--data"):
    """``(model, checkpoint dict, run record or {}, Dataset)``: a checkpoint with the dataset it
    was trained on (``data``, else the one its run records), checked to match; where neither
    names one, the error asks for ``data_option`` (how the caller's command takes it)."""
    from depthbench.data.synthetic import open_dataset

    model, ck = load_run(run_or_ckpt, step, device=device)
    run_dir = run_dir_of(run_or_ckpt)
    meta = read_run(run_dir) if run_dir is not None else {}
    if step is None and Path(run_or_ckpt).is_dir() and meta:
        _check_finished(ck, meta, run_or_ckpt)
    data = data or meta.get("data")
    if not data:
        raise CheckpointError(f"{run_or_ckpt} records no dataset; pass {data_option}")
    ds = open_dataset(data, verify=verify)
    check_compatible(ck, ds, data)
    return model, ck, meta, ds
