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

from depthbench.data_gen.config import GenConfig
from depthbench.data_gen.format import (
    FORMAT_VERSION,
    SPLITS,
    array_specs,
    build_vocab,
    dataset_hash,
    expected_files,
    manifest_fields,
    sha256_file,
)
from depthbench.errors import UserError
from depthbench.fsio import file_record_ok
from depthbench.vocab import Vocab

FIX = "regenerate it with `depthbench generate`"


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
        mpath = self.path / "manifest.json"
        if not self.path.exists():
            raise DatasetError(f"dataset directory {self.path} does not exist; create it with "
                               "`depthbench generate --out DIR` (people) or `depthbench "
                               "prepare-text CORPUS --out DIR` (text)")
        if not self.path.is_dir():
            raise DatasetError(f"{self.path} is a file, not a dataset directory; pass the directory "
                               "that `depthbench generate --out DIR` wrote (a corpus file: "
                               "`depthbench prepare-text FILE --out DIR` makes one of it)")
        if not mpath.is_file():
            raise DatasetError(f"{self.path} has no manifest.json: not a depthbench dataset; {FIX}")
        self.manifest, self.config = _read_manifest(mpath)
        self.hash = self.manifest["dataset_hash"]
        files = self.manifest["files"]
        for name, rec in files.items():
            f = self.path / name
            if not f.is_file():
                raise DatasetError(f"dataset file {f} is missing; {FIX}")
            if f.stat().st_size != rec["bytes"]:
                raise DatasetError(f"dataset file {f} has {f.stat().st_size} bytes, the manifest "
                                   f"says {rec['bytes']} (truncated or replaced); {FIX}")
            if verify and sha256_file(f) != rec["sha256"]:
                raise DatasetError(f"dataset file {f} does not match its sha256 in the manifest "
                                   f"(corrupt or tampered); {FIX}")
        self.vocab = _read_vocab(self.path / "vocab.json", self.config)
        cfg = self.config
        self.attributes = [a.name for a in cfg.attributes]
        self.value_tokens = np.array([a.value_tokens for a in cfg.attributes])
        self.n_values = np.array([a.n_values for a in cfg.attributes])
        self.name_tokens = cfg.name_tokens
        self.seq_len = cfg.seq_len
        self.ceiling_bits = float(cfg.ceiling_bits)
        self._splits: dict[str, Split] = {}
        # every split is mapped now, right after the hash check: a dataset regenerated at this
        # path later (generate --force under a running train) cannot feed this one's splits
        specs, self._mapped = array_specs(self.config), {}
        for name in SPLITS:
            for part in ("tokens", "person", "order"):
                f = self.path / f"{name}_{part}.npy"
                try:
                    a = np.load(f, mmap_mode="r", allow_pickle=False)
                except (ValueError, OSError, EOFError) as e:
                    raise DatasetError(f"cannot read {f} ({str(e)[:100]}); {FIX}") from None
                dtype, shape = specs[f.name]
                if a.dtype != dtype or a.shape != shape:
                    raise DatasetError(f"{f} holds a {a.dtype} array of shape {a.shape}, the "
                                       f"manifest's config needs {dtype} {shape}; {FIX}")
                self._mapped[name, part] = a

    def split(self, name: str) -> Split:
        if name not in SPLITS:
            raise UserError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
        if name not in self._splits:
            limits = {"tokens": len(self.vocab),
                      "person": self.config.n_people + self.config.n_unseen_people,
                      "order": self.config.n_attributes}
            arrays = {}
            for part in ("tokens", "person", "order"):
                f, a = self.path / f"{name}_{part}.npy", self._mapped[name, part]
                if a.size and int(a.max()) >= limits[part]:
                    raise DatasetError(f"{f} holds the value {int(a.max())}, out of range "
                                       f"(must be < {limits[part]}); {FIX}")
                arrays[part] = a
            self._splits[name] = Split(name, **arrays)
        return self._splits[name]

    kind = "synthetic"

    def lm_vocab(self) -> Vocab:
        """The vocabulary the lm-eval adapter encodes text with."""
        return self.vocab

    def train_batches(self, batch_size: int, seed: int, rank: int = 0, world: int = 1):
        return TrainBatches(self.split("train"), batch_size, seed, rank, world)

    def key_positions(self, order: np.ndarray) -> np.ndarray:
        """(N, A) attribute orders -> (N, A) position of the key token of each slot."""
        seg = 1 + self.value_tokens[order]
        return 1 + self.name_tokens + np.cumsum(seg, axis=1) - seg

    def asked(self, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The scored fact of evaluation rows with orders (N, A): (key positions (N, 1), orders
        (N, 1)). Only the first fact, right after the name, counts: every later one follows
        other true values of its person and could be completed without reading the name."""
        return np.full((order.shape[0], 1), 1 + self.name_tokens), order[:, :1]

    @property
    def tiers(self) -> tuple[int, ...]:
        """Each exposure tier's exposure (times its people's orders are written), in tier
        order; empty where every trained person is seen alike."""
        e = tuple(self.config.exposure)
        return e if len(e) > 1 else ()

    def tier_of(self, person: np.ndarray) -> np.ndarray:
        """The exposure tier of each person id (-1: an unseen person, or a dataset without
        tiers)."""
        person = np.asarray(person, dtype=np.int64)
        if not self.tiers:
            return np.full(person.shape, -1, dtype=np.int64)
        M = int(self.n_values[0])
        return np.where(person < self.config.n_people, (person // M) % len(self.tiers), -1)

    @property
    def rows_per_person(self) -> int:
        """Evaluation rows (name-only questions) per person."""
        return self.config.n_held_out


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


def _read_manifest(mpath: Path) -> tuple[dict, GenConfig]:
    """The manifest, checked field by field: everything that follows from the generator config
    must equal what the config gives, the file table must name exactly the dataset's files (plain
    names inside the directory), and the hash must cover the whole manifest."""
    def bad(msg: str) -> DatasetError:
        return DatasetError(f"{mpath}: {msg}; {FIX}")
    try:
        m = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        raise bad("not valid JSON (corrupt or truncated)") from None
    if not isinstance(m, dict):
        raise bad("must hold a JSON object")
    version = m.get("format_version")
    if type(version) is not int:
        raise bad(f"format_version must be an integer (got {version!r})")
    if version != FORMAT_VERSION:
        raise bad(f"dataset format {version}, but this depthbench reads format {FORMAT_VERSION}")
    if not isinstance(m.get("config"), dict):
        raise bad("has no generator config")
    try:
        cfg = GenConfig.from_dict(m["config"])
    except (ValueError, TypeError, KeyError) as e:
        raise bad(f"invalid generator config ({str(e)[:120]})") from None
    for key, want in manifest_fields(cfg).items():
        if m.get(key) != want:
            raise bad(f"field {key!r} does not follow from the manifest's generator config "
                      "(edited)")
    extra = sorted(set(m) - set(manifest_fields(cfg)) - {"files", "dataset_hash"})
    if extra:
        raise bad(f"unknown field(s) {', '.join(extra)}")
    files = m.get("files")
    if not isinstance(files, dict) or set(files) != expected_files(cfg):
        raise bad("its file table must list exactly the dataset's files: "
                  + ", ".join(sorted(expected_files(cfg))))
    for name, rec in files.items():
        if not file_record_ok(rec):
            raise bad(f"file entry {name!r} must be {{sha256: 64 hex digits, bytes: integer}}")
    if not isinstance(m.get("dataset_hash"), str) or dataset_hash(m) != m["dataset_hash"]:
        raise bad("was edited (its dataset_hash does not match its content)")
    return m, cfg


def _read_vocab(path: Path, cfg: GenConfig) -> Vocab:
    try:
        tokens = json.loads(path.read_text()).get("tokens")
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, AttributeError):
        tokens = None
    if tokens != build_vocab(cfg):
        raise DatasetError(f"{path} is not the vocabulary of the manifest's generator config "
                           f"(corrupt or edited); {FIX}")
    return Vocab(tokens)


def open_dataset(path: str | Path, verify: bool = True):
    """The dataset at ``path``: a generated synthetic one (``Dataset``) or a tokenized text
    corpus (``text.TextDataset``), told apart by its manifest's format."""
    from depthbench.data.text import TextDataset, is_text_dataset
    return TextDataset(path, verify) if is_text_dataset(path) else Dataset(path, verify)


def require_synthetic(ds, what: str) -> None:
    """Refuse (UserError) a text dataset where ``what`` reads people and attributes."""
    if getattr(ds, "kind", "synthetic") != "synthetic":
        raise UserError(f"{what} needs a synthetic (generated) dataset; {ds.path} is a text "
                        "corpus: evaluate text runs with `depthbench eval` (NLL and bits per "
                        "byte per depth)")
