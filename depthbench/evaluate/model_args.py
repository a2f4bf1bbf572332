"""The ``depthbench`` lm-eval model's arguments, parsed once into one typed value.

lm-eval hands a model its ``--model_args`` as keywords whose values are strings, or numbers and
booleans where a string reads as one, and adds ``batch_size`` (a number, "auto" or "auto:N"),
``max_batch_size`` and ``device`` from its own options. ``ModelArgs.parse`` turns them into a
``ModelArgs``: each name known, each integer in its range, the exit criterion parsed, the device
one that is there; anything else is a one-line ``UserError`` before a model is read."""

from __future__ import annotations

from dataclasses import dataclass, fields

from depthbench.errors import UserError
from depthbench.exits import ExitCriterion, parse_exit
from depthbench.schedules import MAX_DEPTH


def int_arg(name: str, value, lo: int = 1, hi: int = MAX_DEPTH) -> int:
    """``value`` (an int, or a string or float that reads as one) as an int in ``lo..hi``."""
    if isinstance(value, bool):
        raise UserError(f"depthbench model argument {name}={value!r} is not an integer")
    try:
        v = int(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"depthbench model argument {name}={value!r} is not an integer") from None
    if not lo <= v <= hi or str(value).strip() not in (str(v), f"{v}.0"):
        raise UserError(f"depthbench model argument {name}={value!r} must be an integer in "
                        f"{lo}..{hi}")
    return v


@dataclass(frozen=True)
class ModelArgs:
    pretrained: str                  # a run directory, a checkpoint, or ouro:/huginn:/hf:DIR
    n_loops: int                     # the depth likelihoods are read at (default: max_depth)
    max_depth: int = 16
    min_depth: int = 1
    exit: str | None = None          # generation through the depth-adaptive engine
    criterion: ExitCriterion | None = None   # ``exit`` parsed
    kv_policy: str = "depth_indexed"
    data: str | None = None          # the dataset (a run's own where none is given)
    checkpoint_step: int | None = None
    batch_size: int = 16             # lm-eval's "auto" reads as 16; max_batch_size caps it
    device: str = "cpu"              # lm-eval's default cuda falls back to the CPU without one
    max_length: int | None = None    # positions a request may take (None: the model's)

    @classmethod
    def names(cls) -> list[str]:
        """The argument names lm-eval may pass (``criterion`` is derived, not given)."""
        return [f.name for f in fields(cls) if f.name != "criterion"] + ["max_batch_size"]

    @classmethod
    def parse(cls, given: dict) -> ModelArgs:
        unknown = sorted(set(given) - set(cls.names()))
        if unknown:
            raise UserError(f"unknown depthbench model argument(s) {', '.join(unknown)}; "
                            f"known: {', '.join(cls.names())}")
        if not given.get("pretrained"):
            raise UserError("depthbench model needs pretrained=RUN_DIR_OR_CHECKPOINT")
        max_depth = int_arg("max_depth", given.get("max_depth", 16))
        min_depth = int_arg("min_depth", given.get("min_depth", 1))
        n_loops = given.get("n_loops")
        batch = str(given.get("batch_size", 16)).split(":")[0]
        batch = 16 if batch == "auto" else int_arg("batch_size", batch, hi=1 << 20)
        if given.get("max_batch_size") is not None:
            batch = min(batch, int_arg("max_batch_size", given["max_batch_size"], hi=1 << 20))
        step, length = given.get("checkpoint_step"), given.get("max_length")
        exit = given.get("exit") or None
        return cls(
            pretrained=str(given["pretrained"]), max_depth=max_depth, min_depth=min_depth,
            n_loops=int_arg("n_loops", n_loops) if n_loops is not None else max_depth,
            exit=exit, criterion=parse_exit(exit, min_depth, max_depth) if exit else None,
            kv_policy=str(given.get("kv_policy", "depth_indexed")),
            data=str(given["data"]) if given.get("data") else None,
            checkpoint_step=int_arg("checkpoint_step", step, 0, 10**9) if step is not None else None,
            batch_size=batch, device=usable_device(given.get("device")),
            max_length=int_arg("max_length", length, hi=1 << 30) if length else None)

    def positions(self, limit: int) -> int:
        """The positions a request may take on a model of ``limit`` positions."""
        return int_arg("max_length", self.max_length, hi=limit) if self.max_length else limit


def usable_device(device: str | None) -> str:
    """``device``, or the CPU where none is given or it names CUDA on a machine without it."""
    import torch
    if device and (not str(device).startswith("cuda") or torch.cuda.is_available()):
        return str(device)
    return "cpu"
