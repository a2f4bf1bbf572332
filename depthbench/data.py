"""Opening a generated dataset directory, verifying it, and batching it.

Every file is checked against the sha256 in the manifest before use, so a truncated, tampered
or foreign file is reported by name instead of silently training on it. Token arrays are
memory-mapped; batches are gathered from them on demand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_gen.generate import FORMAT_VERSION, SPLITS, dataset_hash, sha256_file
from depthbench.errors import UserError
from depthbench.vocab import Vocab

EVAL_SPLITS = SPLITS[1:]


class DatasetError(UserError):
    """A dataset directory that is missing, incomplete, corrupt or of another format."""


@dataclass
class Split:
    name: str
    tokens: np.ndarray   # (N, T) memory-mapped token ids
    person: np.ndarray   # (N,) person id of each row
    order: np.ndarray    # (N, A) attribute order of each row

    def __len__(self) -> int:
        return self.tokens.shape[0]


class Dataset:
    """A verified dataset directory (see DESIGN.md section 1)."""

    def __init__(self, path: str | Path, verify: bool = True):
        self.path = Path(path)
        fix = "regenerate it with `depthbench generate`"
        mpath = self.path / "manifest.json"
        if not self.path.is_dir():
            raise DatasetError(f"dataset directory {self.path} does not exist; create it with "
                               "`depthbench generate --out DIR`")
        if not mpath.is_file():
            raise DatasetError(f"{self.path} has no manifest.json: not a depthbench dataset; {fix}")
        try:
            self.manifest = json.loads(mpath.read_text())
            version = self.manifest["format_version"]
            files = self.manifest["files"]
            self.hash = self.manifest["dataset_hash"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            raise DatasetError(f"{mpath} is corrupt or incomplete; {fix}") from None
        if version != FORMAT_VERSION:
            raise DatasetError(f"{self.path} has dataset format {version}, this depthbench reads "
                               f"format {FORMAT_VERSION}; {fix}")
        if dataset_hash(self.manifest) != self.hash:
            raise DatasetError(f"{mpath} was edited (its dataset_hash does not match); {fix}")
        for name, rec in files.items():
            f = self.path / name
            if not f.is_file():
                raise DatasetError(f"dataset file {f} is missing; {fix}")
            if f.stat().st_size != rec["bytes"]:
                raise DatasetError(f"dataset file {f} has {f.stat().st_size} bytes, the manifest "
                                   f"says {rec['bytes']} (truncated or replaced); {fix}")
            if verify and sha256_file(f) != rec["sha256"]:
                raise DatasetError(f"dataset file {f} does not match its sha256 in the manifest "
                                   f"(corrupt or tampered); {fix}")
        self.vocab = Vocab.load(self.path / "vocab.json")
        cfg = self.manifest["config"]
        self.attributes = [a["name"] for a in cfg["attributes"]]
        self.value_tokens = np.array([a["value_tokens"] for a in cfg["attributes"]])
        self.n_values = np.array([a["n_values"] for a in cfg["attributes"]])
        self.name_tokens = cfg["name_tokens"]
        self.seq_len = self.manifest["seq_len"]
        self.ceiling_bits = float(self.manifest["ceiling_bits"])
        self._splits: dict[str, Split] = {}

    def split(self, name: str) -> Split:
        if name not in SPLITS:
            raise UserError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
        if name not in self._splits:
            arrays = {}
            for part in ("tokens", "person", "order"):
                f = self.path / f"{name}_{part}.npy"
                try:
                    arrays[part] = np.load(f, mmap_mode="r", allow_pickle=False)
                except (ValueError, OSError) as e:
                    raise DatasetError(f"cannot read {f} ({e}); regenerate the dataset") from None
            self._splits[name] = Split(name, **arrays)
        return self._splits[name]

    def key_positions(self, order: np.ndarray) -> np.ndarray:
        """(N, A) attribute orders -> (N, A) position of the key token of each slot."""
        seg = 1 + self.value_tokens[order]
        return 1 + self.name_tokens + np.cumsum(seg, axis=1) - seg


class TrainBatches:
    """Seeded, resumable batches of training rows.

    Sample j of the infinite stream is row ``perm_e[j % N]`` of epoch ``e = j // N``, where
    ``perm_e`` is a permutation seeded by (seed, e). Step s reads samples [s*B, (s+1)*B); rank r
    of w takes the contiguous slice r*B/w .. (r+1)*B/w of that global batch, so a run on w ranks
    sees exactly the rows of a 1-rank run with the same global batch.
    """

    def __init__(self, split: Split, batch_size: int, seed: int, rank: int = 0, world: int = 1):
        if batch_size % world:
            raise UserError(f"batch_size={batch_size} must be divisible by the number of "
                            f"processes ({world})")
        self.split, self.B, self.seed, self.rank, self.world = split, batch_size, seed, rank, world
        self._perm_epoch, self._perm = None, None

    def _perm_for(self, epoch: int) -> np.ndarray:
        if self._perm_epoch != epoch:
            rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(epoch,)))
            self._perm, self._perm_epoch = rng.permutation(len(self.split)), epoch
        return self._perm

    def batch(self, step: int) -> np.ndarray:
        """The (B/world, T) token rows of this rank at ``step``."""
        per = self.B // self.world
        j = step * self.B + self.rank * per + np.arange(per)
        n = len(self.split)
        rows = np.empty(per, dtype=np.int64)
        for epoch in np.unique(j // n):
            m = j // n == epoch
            rows[m] = self._perm_for(int(epoch))[j[m] % n]
        return np.asarray(self.split.tokens[rows], dtype=np.int64)


def shard_range(n: int, rank: int, world: int) -> tuple[int, int]:
    """Contiguous [lo, hi) of n rows for this rank (sizes differ by at most one)."""
    return n * rank // world, n * (rank + 1) // world
