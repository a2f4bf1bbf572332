"""The fictional-person knowledge dataset, generated in vectorized shards.

Design choices:
- Names come from a keyed pseudo-random permutation (a Feistel network with cycle walking) of
  the name-index space, applied to the global person index. Names are therefore unique without
  any table of used names, and a shard needs nothing from earlier shards: memory stays bounded
  by the shard size whatever the number of people.
- Every random draw comes from a ``numpy.random.Generator`` seeded by (seed, stream, shard), so
  shards are independent and the output is byte-identical for the same config and seed.
- Trained people's values are balanced: people [k M_a, (k+1) M_a) hold a seeded permutation of
  attribute a's M_a values, so every value is used (near) equally often in training and the
  training distribution of values carries no bits about anyone. Independent draws would not: with
  fewer people than values, the few values used form a table a model learns without names.
- Each person gets h held-out attributes (``held_out_attributes``), which never start a
  training order; training orders start with the other attributes in turn. Every evaluation row
  asks one fact from the name alone: ``<bos> NAME [key]``, then the value, and only that value
  is scored (the rest of the row is the record in a random order, for whole-sequence NLL). The
  reordered split asks each held-out attribute (a position never seen for that person); the
  seen-order control asks the first attribute of h of the person's training orders. A fact
  scored after other true values of its person could be completed from them without reading
  the name (a few people share a value), so none is.
- Token arrays are written as ``.npy`` files whose header is written up front and whose rows
  are appended shard by shard, hashing as they go."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .config import GenConfig
from .format import SPLITS, build_vocab, dataset_hash, manifest_fields, split_rows, token_dtype

# Random streams (first element of a SeedSequence spawn key).
_STREAM_VALUES, _STREAM_PEOPLE, _STREAM_UNSEEN, _STREAM_NAMES, _STREAM_BALANCE = range(5)


# value sets up to this size are assigned in balanced blocks (one permutation of the set per
# block, 32 MiB at most); larger ones are drawn independently (bounded memory at any scale)
BALANCE_MAX_VALUES = 1 << 22


_M1 = np.uint64(0xBF58476D1CE4E5B9)


_M2 = np.uint64(0x94D049BB133111EB)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a bijective avalanche on uint64 (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


class NamePermutation:
    """A seeded bijection of [0, n) onto itself: 4 Feistel rounds on the smallest even-bit
    domain >= n, cycle-walking values that land outside [0, n)."""

    def __init__(self, n: int, seed: int):
        self.n = n
        bits = max(2, int(n - 1).bit_length())
        self.half = (bits + 1) // 2
        self.mask = np.uint64((1 << self.half) - 1)
        ss = np.random.SeedSequence(seed, spawn_key=(_STREAM_NAMES,))
        self.keys = ss.generate_state(4, dtype=np.uint64)

    def _once(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> np.uint64(self.half), x & self.mask
        for k in self.keys:
            left, right = right, left ^ (_mix64(right ^ k) & self.mask)
        return (left << np.uint64(self.half)) | right

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        x = self._once(idx.astype(np.uint64))
        out = x >= np.uint64(self.n)
        while out.any():  # cycle walking keeps the map a bijection on [0, n)
            x[out] = self._once(x[out])
            out = x >= np.uint64(self.n)
        return x.astype(np.int64)


class _Layout:
    """Token ids and the per-attribute value tables shared by every shard."""

    def __init__(self, cfg: GenConfig):
        A = cfg.n_attributes
        self.key_tok = np.arange(3, 3 + A)
        self.name_base = 3 + A
        self.value_base = 3 + A + cfg.name_pool
        self.value_len = np.array([a.value_tokens for a in cfg.attributes])
        self.max_len = int(self.value_len.max())
        # values of attribute a are rows value_offset[a] .. value_offset[a] + M_a - 1 of one table,
        # padded to the longest value
        sizes = np.array([a.n_values for a in cfg.attributes])
        self.value_offset = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(_STREAM_VALUES,)))
        table = np.zeros((int(sizes.sum()), self.max_len), dtype=np.int64)
        for a, attr in enumerate(cfg.attributes):
            codes = rng.choice(cfg.value_pool ** attr.value_tokens, attr.n_values, replace=False)
            for l in range(attr.value_tokens):  # base-Q digits, most significant first
                digit = codes // cfg.value_pool ** (attr.value_tokens - 1 - l) % cfg.value_pool
                table[self.value_offset[a]:self.value_offset[a] + attr.n_values, l] = digit
        self.value_table = table + self.value_base
        # row value_offset[a] + v of the segment table: attribute a's key, then its value v
        # (padded): a rendered row is its attributes' segments in order
        seg = np.zeros((len(table), 1 + self.max_len), dtype=np.int64)
        for a, attr in enumerate(cfg.attributes):
            seg[self.value_offset[a]:self.value_offset[a] + attr.n_values, 0] = self.key_tok[a]
        seg[:, 1:] = self.value_table
        self.segments = seg

    def render(self, cfg: GenConfig, names: np.ndarray, values: np.ndarray,
               orders: np.ndarray, dtype=np.int64, rep: np.ndarray | None = None) -> np.ndarray:
        """(P, name_tokens) name ids and (P, A) value ids of P people, (n, A) orders of n rows,
        ``rep`` (n,) each row's person (default: row i is person i) -> (n, seq_len) tokens.

        Each attribute's segment (its key, then its value padded to the longest value) is one
        row of the segment table, gathered whole into (n, A, 1 + max_len); every row holds each
        attribute once, so dropping the padding leaves the same number of tokens in every row
        and the rows stay rows."""
        n, A = orders.shape
        person = np.arange(n) if rep is None else rep
        tokens = np.empty((n, cfg.seq_len), dtype=dtype)
        tokens[:, 0] = 1
        tokens[:, -1] = 2
        tokens[:, 1:1 + cfg.name_tokens] = (names + self.name_base).astype(dtype)[person]
        # (n, A) segment-table rows in asked order: a flat take (np.take on axis 0 copies whole
        # rows; fancy indexing and take_along_axis are several times slower)
        flat = (values + self.value_offset).astype(np.int32).ravel()
        rows = np.take(flat, orders + (A * person)[:, None])
        table = self.segments.astype(dtype, copy=False)
        if (self.value_len == self.max_len).all():  # gathered straight into the rows
            out = tokens[:, 1 + cfg.name_tokens:-1].reshape(n, A, 1 + self.max_len)
            np.take(table, rows, axis=0, out=out, mode="clip")  # rows are in range; no buffer
        else:
            seg = np.take(table, rows, axis=0)                             # (n, A, 1 + max_len)
            keep = np.arange(1 + self.max_len) <= self.value_len[orders][..., None]
            tokens[:, 1 + cfg.name_tokens:-1] = seg[keep].reshape(n, -1)
        return tokens


def _name_tokens(cfg: GenConfig, perm: NamePermutation, person: np.ndarray) -> np.ndarray:
    code = perm(person)
    digits = [code // cfg.name_pool ** (cfg.name_tokens - 1 - i) % cfg.name_pool
              for i in range(cfg.name_tokens)]
    return np.stack(digits, axis=1)                                        # (n, name_tokens)


def balanced_values(cfg: GenConfig, lo: int, hi: int) -> np.ndarray:
    """(hi - lo, A) value indices of trained people lo..hi-1: person p holds element p mod M_a of
    the permutation seeded by (seed, attribute, p // M_a), so each block of M_a consecutive people
    uses every value once. Shard boundaries do not matter: a block is rebuilt from its seed."""
    out = np.empty((hi - lo, len(cfg.attributes)), dtype=np.int64)
    for a, attr in enumerate(cfg.attributes):
        M = attr.n_values
        if M > BALANCE_MAX_VALUES:
            rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(
                _STREAM_BALANCE, a, lo)))
            out[:, a] = rng.integers(0, M, size=hi - lo)
            continue
        for block in range(lo // M, (hi - 1) // M + 1):
            rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(
                _STREAM_BALANCE, a, block)))
            b0 = block * M
            s0, s1 = max(lo, b0), min(hi, b0 + M)
            out[s0 - lo:s1 - lo, a] = rng.permutation(M)[s0 - b0:s1 - b0]
    return out


# bits of a packed sort key that hold the attribute's index (``random_orders``)
_INDEX_BITS = 10


def random_orders(rng: np.random.Generator, shape: tuple[int, ...], A: int,
                   first: np.ndarray | None = None) -> np.ndarray:
    """``np.argsort(rng.random(shape + (A,)), axis=-1, kind="stable")``, with ``first`` (of
    ``shape``) moved to the front of each order when given: the same draws in about 0.6 of the
    time at the paper preset's shard. ``random()`` turns the top 53 bits of one raw 64-bit draw
    into a double, so those bits order a row as its doubles do; each key packs them (plus one,
    leaving 0 for ``first``) above the attribute's index, which breaks ties as a stable sort
    does, and a plain sort of the keys leaves the indices in the stable argsort's order."""
    assert A <= 1 << _INDEX_BITS
    k = rng.bit_generator.random_raw(int(np.prod(shape)) * A).reshape(shape + (A,))
    k >>= np.uint64(11)
    k += np.uint64(1)
    k <<= np.uint64(_INDEX_BITS)
    k |= np.arange(A, dtype=np.uint64)
    if first is not None:
        np.put_along_axis(k, first[..., None], first[..., None].astype(np.uint64), axis=-1)
    k.sort(axis=-1)
    k &= np.uint64((1 << _INDEX_BITS) - 1)
    return k.astype(np.int64)


def _order_with_first(rng: np.random.Generator, first: np.ndarray, A: int) -> np.ndarray:
    """Uniform random orders of A attributes whose first element is ``first`` (any shape)."""
    return random_orders(rng, first.shape, A, first)


def _perm_hash(orders: np.ndarray) -> np.ndarray:
    h = np.zeros(orders.shape[:-1], dtype=np.uint64)
    for k in range(orders.shape[-1]):
        h = _mix64(h ^ orders[..., k].astype(np.uint64))
    return h


def _held_out_split(rng: np.random.Generator, n: int, A: int) -> np.ndarray:
    """(n, A): a uniform random permutation of the attributes per person; the first h are its
    held-out attributes, the rest start its training orders in turn."""
    return random_orders(rng, (n,), A)


def _training_orders(rng: np.random.Generator, perm: np.ndarray, h: int, r: int) -> np.ndarray:
    """(n, r, A): r distinct orders per person; order i starts with ``perm[:, h + i mod (A-h)]``,
    never with a held-out attribute."""
    n, A = perm.shape
    first = perm[:, h + np.arange(r) % (A - h)]                            # (n, r)
    orders = _order_with_first(rng, first, A)
    while True:
        hh = _perm_hash(orders)                                            # (n, r)
        # order j is a duplicate if an earlier order of its person hashes alike (a collision of
        # two different orders only causes a harmless redraw)
        dup = np.zeros(hh.shape, dtype=bool)
        for j in range(1, r):
            for i in range(j):
                dup[:, j] |= hh[:, i] == hh[:, j]
        if not dup.any():
            return orders
        rows, slots = np.nonzero(dup)
        orders[rows, slots] = _order_with_first(rng, first[rows, slots], A)


class _NpyWriter:
    """Streams rows into a .npy file with a header written up front, hashing as it goes."""

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype):
        self.path, self.shape, self.dtype = path, shape, dtype
        self.f = open(path, "wb")
        self.sha = _HashingFile(self.f)
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": shape}
        np.lib.format.write_array_header_1_0(self.sha, header)
        self.rows = 0

    def write(self, arr: np.ndarray):
        assert arr.shape[1:] == self.shape[1:], (arr.shape, self.shape)
        # the array's own buffer (no bytes copy) to the hash and the file
        self.sha.write(memoryview(np.ascontiguousarray(arr, dtype=self.dtype)).cast("B"))
        self.rows += arr.shape[0]

    def close(self) -> dict:
        assert self.rows == self.shape[0], f"{self.path}: wrote {self.rows} of {self.shape[0]} rows"
        self.f.close()
        return self.sha.record()


class _HashingFile:
    def __init__(self, f):
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def write(self, b):
        b = b.encode() if isinstance(b, str) else b
        self.h.update(b)
        self.n += len(b)
        return self.f.write(b)

    def record(self) -> dict:
        return {"sha256": self.h.hexdigest(), "bytes": self.n}


class _Split:
    """The writers of one split: tokens, person ids, attribute orders, and the text facts."""

    def __init__(self, out: Path, name: str, n_rows: int, cfg: GenConfig, dtype, text_rows: int):
        A = cfg.n_attributes
        self.name, self.text_rows, self.text_done = name, text_rows, 0
        self.writers = {
            "tokens": _NpyWriter(out / f"{name}_tokens.npy", (n_rows, cfg.seq_len), dtype),
            "person": _NpyWriter(out / f"{name}_person.npy", (n_rows,), np.dtype(np.uint32)),
            "order": _NpyWriter(out / f"{name}_order.npy", (n_rows, A), np.dtype(np.uint8)),
        }
        self.jsonl = None
        if name != "train":
            self.jsonl_path = out / f"{name}.jsonl"
            self.jsonl_file = open(self.jsonl_path, "wb")
            self.jsonl = _HashingFile(self.jsonl_file)

    def write(self, tokens, person, orders, vocab_arr, cfg: GenConfig, layout: _Layout):
        self.writers["tokens"].write(tokens)
        self.writers["person"].write(person)
        self.writers["order"].write(orders)
        if self.jsonl is None:
            return
        take = tokens.shape[0] if self.text_rows == 0 else max(0, self.text_rows - self.text_done)
        take = min(take, tokens.shape[0])
        if take == 0:
            return
        k = 1 + cfg.name_tokens                                            # the asked key
        # json.dumps(" ".join(words)) is the words' own escapes joined: each token is escaped
        # once (vocab_arr holds them escaped), each attribute name once
        words = vocab_arr[tokens[:take]].tolist()                          # lists of str
        attrs = [json.dumps(a.name) for a in cfg.attributes]
        ends = (k + 1 + layout.value_len).tolist()
        lines = []
        for w, a, p in zip(words, orders[:take, 0].tolist(), person[:take].tolist()):
            lines.append(f'{{"prompt": "{" ".join(w[1:k + 1])}", '
                         f'"target": "{" ".join(w[k + 1:ends[a]])}", '
                         f'"person": {p}, "attribute": {attrs[a]}, '
                         f'"split": "{self.name}"}}\n')
        self.jsonl.write("".join(lines))
        self.text_done += take

    def close(self) -> dict[str, dict]:
        files = {w.path.name: w.close() for w in self.writers.values()}
        if self.jsonl is not None:
            self.jsonl_file.close()
            files[self.jsonl_path.name] = self.jsonl.record()
        return files


def generate_into(cfg: GenConfig, out: Path,
                  progress: Callable[[int], None] | None = None) -> dict:
    """Write the dataset of ``cfg`` into the empty directory ``out``; returns its manifest.
    ``depthbench.data.generate`` writes it into place atomically."""
    A, r = cfg.n_attributes, cfg.orders_per_person
    vocab = build_vocab(cfg)
    dtype = token_dtype(len(vocab))
    vocab_arr = np.array([json.dumps(t)[1:-1] for t in vocab], dtype=object)  # JSON-escaped
    layout = _Layout(cfg)
    perm = NamePermutation(cfg.name_pool ** cfg.name_tokens, cfg.seed)
    h = cfg.n_held_out
    rows = split_rows(cfg)
    splits = {name: _Split(out, name, rows[name], cfg, dtype,
                           0 if name == "train" else cfg.text_eval_people * h)
              for name in SPLITS}

    def people(stream: int, start: int, stop: int):
        for shard, lo in enumerate(range(start, stop, cfg.shard_people)):
            hi = min(lo + cfg.shard_people, stop)
            rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(stream, shard)))
            person = np.arange(lo, hi)
            names = _name_tokens(cfg, perm, person)
            if stream == _STREAM_PEOPLE and cfg.balanced_values:
                values = balanced_values(cfg, lo, hi)                      # (n, A)
            else:  # unseen people's values are fresh uniform draws, as trained people's would be
                values = np.stack([rng.integers(0, a.n_values, size=hi - lo)
                                   for a in cfg.attributes], axis=1)       # (n, A)
            yield rng, person, names, values

    def ask(split: str, person, names, values, orders):
        """Write h name-only questions per person: orders (n, h, A), each asking orders[:, j, 0]."""
        n = person.shape[0]
        rep = np.repeat(np.arange(n), h)
        flat = orders.reshape(n * h, A)
        splits[split].write(layout.render(cfg, names, values, flat, dtype, rep), person[rep], flat,
                            vocab_arr, cfg, layout)

    for rng, person, names, values in people(_STREAM_PEOPLE, 0, cfg.n_people):
        n = person.shape[0]
        split_of = _held_out_split(rng, n, A)                              # (n, A)
        train_orders = _training_orders(rng, split_of, h, r)               # (n, r, A)
        asked = _order_with_first(rng, split_of[:, :h], A)                 # (n, h, A)
        flat = train_orders.reshape(n * r, A)                              # person-major rows
        rep = np.repeat(np.arange(n), r)
        tokens = layout.render(cfg, names, values, flat, dtype, rep)       # each order once
        # the seen-order control asks the first attribute of the person's first h orders: rows
        # of the training orders already rendered
        seen = (np.arange(n)[:, None] * r + np.arange(h) % r).ravel()
        seen_rows = (tokens[seen], person[rep[seen]], flat[seen])
        times = cfg.exposure_of(person)[rep]                               # (n r,)
        if (times > 1).any():   # each order written as often as its person's exposure says
            tokens, flat, rep = (np.repeat(a, times, axis=0) for a in (tokens, flat, rep))
        splits["train"].write(tokens, person[rep], flat, vocab_arr, cfg, layout)
        ask("eval_reordered", person, names, values, asked)
        splits["eval_seen_order"].write(*seen_rows, vocab_arr, cfg, layout)
        if progress:
            progress(n)

    total = cfg.n_people + cfg.n_unseen_people
    for rng, person, names, values in people(_STREAM_UNSEEN, cfg.n_people, total):
        n = person.shape[0]
        asked = _order_with_first(rng, _held_out_split(rng, n, A)[:, :h], A)
        ask("eval_unseen_people", person, names, values, asked)
        if progress:
            progress(n)

    files = {}
    for s in splits.values():
        files.update(s.close())
    vocab_bytes = (json.dumps({"tokens": vocab}, indent=0) + "\n").encode()
    (out / "vocab.json").write_bytes(vocab_bytes)
    files["vocab.json"] = {"sha256": hashlib.sha256(vocab_bytes).hexdigest(),
                           "bytes": len(vocab_bytes)}

    manifest = {**manifest_fields(cfg), "files": dict(sorted(files.items()))}
    manifest["dataset_hash"] = dataset_hash(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
