"""``depthbench prepare-text``: a natural-text corpus -> a tokenized text dataset.

Documents are identified by content (exact copies, and near copies by MinHash of word 5-grams,
dropped before the tokenizer is trained),
split by a seeded draw from each document's digest (a held-out document half contained in the
training split, by word 5-grams, is dropped), tokenized with a trained or given HF
tokenizer, and written with a cloze only the context can answer (``data.cloze``), whose items
share no 8-word run with training."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from depthbench.console import progress_bar
from depthbench.data.builtin import BUILTINS, builtin_digest, builtin_documents
from depthbench.data.cloze import build as build_cloze
from depthbench.data.cloze import unigram_logp, unigram_score
from depthbench.data.dedup import CONTAINED, Contained, NearCopies, NearDuplicates, content_key
from depthbench.data.text import (
    EOT,
    FILES,
    FORMAT,
    FORMAT_VERSION,
    SPLITS,
    TextDataError,
    dtype_for_vocab,
    load_tokenizer,
)
from depthbench.data_gen.format import dataset_hash, sha256_file

SUFFIXES = (".txt", ".jsonl", ".txt.gz", ".jsonl.gz")


BATCH_DOCS = 512          # documents encoded and written together
# what a held-out or repeated document can be dropped for, each counted in the manifest
DROPPED = ("duplicates_removed", "near_duplicates_removed", "contained_in_training")


# ---- reading documents ---------------------------------------------------------------------------
def input_files(inputs: list[str]) -> list[str | Path]:
    """The corpus files of ``inputs`` in order (a directory: its files, sorted, recursively)."""
    out: list[str | Path] = []
    for item in inputs:
        named = item.removeprefix("builtin:") if item.startswith("builtin:") else None
        if named is not None and named not in BUILTINS:
            raise TextDataError(f"{item}: no built-in corpus is called {named!r}; the built-in "
                                f"corpora are {' and '.join(BUILTINS)}")
        if item in BUILTINS and Path(item).exists():
            raise TextDataError(f"{item} names both a built-in corpus and ./{item} here; give "
                                f"./{item} for yours or builtin:{item} for the built-in one")
        if item in BUILTINS or named:
            out.append(named or item)
            continue
        p = Path(item)
        if p.is_dir():
            # hidden files and directories (.git, .ipynb_checkpoints copies) are not corpus
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(SUFFIXES)
                           and not any(part.startswith(".") for part in f.relative_to(p).parts))
            if not found:
                raise TextDataError(f"{p} holds no corpus file ({', '.join(SUFFIXES)})")
            out += found
        elif p.is_file():
            if not p.name.endswith(SUFFIXES):
                raise TextDataError(f"{p} is not a corpus file; give {', '.join(SUFFIXES)} files, "
                                    f"directories of them or {' or '.join(BUILTINS)}")
            out.append(p)
        else:
            why = "is not a regular file (a pipe or device)" if p.exists() else "does not exist"
            raise TextDataError(f"corpus input {p} {why}")
    if not out:
        raise TextDataError("give at least one corpus input")
    # one file reached twice (named twice, a directory and a file in it, a symlink to it) is
    # read once; a copy under another name is caught document by document (``documents``)
    seen, unique = set(), []
    for f in out:
        key = f if f in BUILTINS else Path(f).resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def corpus_digest(inputs: list[str], tokenizer: str | None = None) -> str:
    """The sha256 of what ``prepare_text`` would read: every input file's bytes in reading
    order (a built-in corpus: ``builtin_digest``) and a given tokenizer's, so that a corpus
    edited in place is a different input."""
    h = hashlib.sha256()
    for f in input_files(inputs):
        if f in BUILTINS:
            h.update(builtin_digest(f).encode())
        else:
            h.update(sha256_file(f).encode())
    if tokenizer:
        h.update(sha256_file(tokenizer).encode())
    return h.hexdigest()


# a document longer than this many characters (a file without blank lines) is cut at whitespace
# into documents of at most this size, so that memory stays bounded by it, not by the file
MAX_DOC_CHARS = 1 << 20


def _cut(text: str, cap: int = 0) -> Iterator[str]:
    cap = cap or MAX_DOC_CHARS
    while len(text) > cap:
        at = max(text.rfind(" ", 0, cap), text.rfind("\n", 0, cap))
        at = at if at > 0 else cap
        yield text[:at]
        text = text[at:].lstrip()
    if text.strip():
        yield text


def _lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline="") as f:   # a BOM is not text
            for line in f:
                if "\x00" in line:
                    raise UnicodeDecodeError("utf-8", b"", 0, 1, "NUL byte")
                yield line
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError) as e:
        why = "not UTF-8 text (binary?)" if isinstance(e, UnicodeDecodeError) else \
            f"unreadable ({type(e).__name__})"
        raise TextDataError(f"corpus file {path} is {why}; give plain text or jsonl") from None


def documents(inputs: list[str]) -> Iterator[str]:
    """Every document of the corpus, streamed, in a fixed order; empty documents are skipped and
    one longer than ``MAX_DOC_CHARS`` is cut (``_cut``). Exact duplicates are removed later, by
    content (``prepare_text``)."""
    for src in input_files(inputs):
        yield from (piece for doc in _file_documents(src) for piece in _cut(doc))


def _file_documents(src) -> Iterator[str]:
    """One input's documents, in order (``documents`` cuts and deduplicates them)."""
    if src in BUILTINS:
        yield from (d for d in builtin_documents(src) if d.strip())
        return
    path = Path(src)
    if ".jsonl" in path.name:
        for i, line in enumerate(_lines(path)):
            if not line.strip():
                continue
            try:
                text = json.loads(line).get("text")
            except (json.JSONDecodeError, AttributeError):
                raise TextDataError(f"{path} line {i + 1} is not a JSON object") from None
            if not isinstance(text, str):
                raise TextDataError(f"{path} line {i + 1} has no string 'text' field")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:   # JSON can spell a lone surrogate, "\ud800"
                raise TextDataError(f"{path} line {i + 1}: its text holds a lone UTF-16 "
                                    "surrogate (not Unicode text); fix or drop the line") from None
            if text.strip():
                yield text
        return
    para: list[str] = []
    size = 0
    for line in _lines(path):
        if line.strip() and size < MAX_DOC_CHARS:
            para.append(line)
            size += len(line)
        elif para:   # a blank line, or a paragraph past the cap (this line starts the next)
            yield "".join(para).rstrip("\n")
            para, size = ([line], len(line)) if line.strip() else ([], 0)
    if para:
        yield "".join(para).rstrip("\n")


# ---- preparing -----------------------------------------------------------------------------------
def _train_tokenizer(inputs: list[str], vocab_size: int, copies: NearCopies | None = None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((d for d, _ in unique_documents(inputs, copies=copies)),
                            trainer=trainer)
    return tok


def unique_documents(inputs: list[str], removed: dict | None = None, near: dict | None = None,
                     copies: NearCopies | None = None) -> Iterator[tuple[str, bytes]]:
    """(document, ``content_key``) of every document but exact copies of an earlier one
    (counted in ``removed``: documents, bytes) and near copies (``dedup.NearDuplicates``;
    counted in ``near``), each dropped whole, so no near copy of a held-out document is
    trained on; ``copies`` carries one finished pass's near copies to the next."""
    seen: set[bytes] = set()
    reuse = copies is not None and copies.found
    similar = None if reuse else NearDuplicates()
    for doc in documents(inputs):
        key = content_key(doc)
        if key in seen:
            count = removed
        elif key in copies.keys if reuse else similar.seen(doc):
            count = near
            if copies is not None and not reuse:
                copies.keys.add(key)
        else:
            seen.add(key)
            yield doc, key
            continue
        if count is not None:
            count["documents"] += 1
            count["bytes"] += len(doc.encode("utf-8"))
    if copies is not None:
        copies.found = True


def in_validation(key: bytes, seed: int, val_fraction: float) -> bool:
    """Whether the document of ``key`` is held out: a seeded draw from its content alone (not its
    position), so the same text always lands on the same side."""
    h = hashlib.blake2b(key, digest_size=8, salt=seed.to_bytes(8, "little")).digest()
    return int.from_bytes(h, "little") / 2 ** 64 < val_fraction


def _uncovered(doc: str, enc) -> int | None:
    """The first non-blank character of ``doc`` that no token of ``enc`` covers, or that became
    the unknown token (a tokenizer that cannot encode it); None if every character is encoded."""
    cover = np.zeros(len(doc) + 1, dtype=np.int64)
    unk = {i for i, t in enumerate(enc.tokens) if t in ("[UNK]", "<unk>", "<UNK>")}
    for i, (a, b) in enumerate(enc.offsets):
        if i not in unk:
            cover[a] += 1
            cover[b] -= 1
    covered = np.cumsum(cover[:-1]) > 0
    blank = np.array([c.isspace() for c in doc], dtype=bool)
    bad = np.flatnonzero(~covered & ~blank)
    return int(bad[0]) if len(bad) else None


class _Splits:
    """The two split files being written: ``write(docs, split)`` encodes documents in batches,
    each followed by end-of-text, and counts them; the first held-out documents are kept for
    the cloze. With ``check_coverage`` (a given tokenizer) a document the tokenizer cannot
    encode whole is refused."""

    def __init__(self, tok, tmp: Path, dtype: np.dtype, eot: int, check_coverage: bool):
        self.tok, self.dtype, self.eot, self.check = tok, dtype, eot, check_coverage
        self.counts = {s: {"documents": 0, "tokens": 0, "bytes": 0} for s in SPLITS}
        self.held_out: list[str] = []
        self.sinks = {s: open(tmp / f"{s}.bin", "wb") for s in SPLITS}
        self.bar = progress_bar(None, "prepare-text", "docs")   # the total is not known ahead

    def write(self, docs, split: str) -> None:
        batch: list[str] = []
        for doc in docs:
            batch.append(doc)
            if len(batch) == BATCH_DOCS:
                self._flush(batch, split)
                batch = []
        if batch:
            self._flush(batch, split)

    def _flush(self, batch: list[str], split: str) -> None:
        for doc, enc in zip(batch, self.tok.encode_batch(batch)):
            if self.check and (at := _uncovered(doc, enc)) is not None:
                n = sum(c["documents"] for c in self.counts.values()) + 1
                raise TextDataError(f"the tokenizer cannot encode {doc[at]!r} (document {n}, "
                                    f"character {at}): that text would be dropped silently; give "
                                    "a tokenizer that covers the corpus (byte-level BPE) or "
                                    "--vocab-size to train one")
            ids = np.asarray(enc.ids + [self.eot], dtype=self.dtype)
            self.sinks[split].write(ids.tobytes())
            c = self.counts[split]
            c["documents"] += 1
            c["tokens"] += len(ids)
            c["bytes"] += len(doc.encode("utf-8"))
            if split == "validation" and len(self.held_out) < 2048:
                self.held_out.append(doc)
        self.bar.update(len(batch))

    def close(self) -> None:
        self.bar.close()
        for f in self.sinks.values():
            f.close()


def _write_splits(tok, inputs: list[str], tmp: Path, val_fraction: float, seed: int,
                  dtype: np.dtype, eot: int, check_coverage: bool = False,
                  copies: NearCopies | None = None) -> tuple[dict, list[str]]:
    """Encode the corpus into ``tmp/{train,validation}.bin`` (``_Splits``), each document once
    (an exact or near copy of an earlier one is dropped and counted) and held out by
    ``in_validation`` of its content. Held-out documents wait in a spool file until the whole
    training split is written; then one whose word 5-grams lie half or more in it
    (``dedup.Contained``) is dropped and counted. Returns the counts per split and of the
    documents dropped, and the first held-out documents (for the cloze task)."""
    dropped = {k: {"documents": 0, "bytes": 0} for k in DROPPED}
    contained = Contained()
    splits = _Splits(tok, tmp, dtype, eot, check_coverage)
    spool_path = tmp / "validation.spool"

    def training(spool):
        for doc, key in unique_documents(inputs, dropped["duplicates_removed"],
                                         dropped["near_duplicates_removed"], copies):
            if in_validation(key, seed, val_fraction):
                spool.write(json.dumps(doc) + "\n")
            else:
                contained.add(doc)
                yield doc

    def validation():
        with open(spool_path, encoding="utf-8") as spool:
            for doc in map(json.loads, spool):
                if contained.share(doc) < CONTAINED:
                    yield doc
                    continue
                dropped["contained_in_training"]["documents"] += 1
                dropped["contained_in_training"]["bytes"] += len(doc.encode("utf-8"))
    try:
        with open(spool_path, "w", encoding="utf-8") as spool:
            splits.write(training(spool), "train")
        splits.write(validation(), "validation")
    finally:
        splits.close()
        spool_path.unlink(missing_ok=True)
    return {**splits.counts, **dropped}, splits.held_out


def _check_counts(counts: dict, val_fraction: float, seq_len: int, contained: int = 0) -> None:
    """Splits that could not train or be read: no document, no side, or less than a window
    (``contained``: validation documents dropped as contained in training)."""
    n_docs = counts["train"]["documents"] + counts["validation"]["documents"] + contained
    if not n_docs:
        raise TextDataError("the corpus holds no document (empty input)")
    if n_docs == 1:
        raise TextDataError("the corpus holds one document, and a held-out split needs several "
                            "(a .txt file's documents are separated by blank lines; a .jsonl "
                            "holds one a line)")
    if not counts["validation"]["documents"] and contained:
        raise TextDataError(f"every validation document ({contained}) repeats text of the "
                            "training documents, so none is held out (each was dropped as "
                            "contained in training); give a corpus of more varied documents")
    if not counts["validation"]["documents"]:
        raise TextDataError(f"--val-fraction {val_fraction} left no validation document of "
                            f"{counts['train']['documents']}; raise it")
    if not counts["train"]["documents"]:
        raise TextDataError(f"--val-fraction {val_fraction} left no training document; "
                            "lower it")
    if counts["validation"]["tokens"] < seq_len + 1:
        raise TextDataError(f"the validation split has {counts['validation']['tokens']} "
                            f"tokens, fewer than one window of --seq-len {seq_len} (it "
                            "would score nothing); raise --val-fraction or lower --seq-len")
    if counts["train"]["tokens"] <= seq_len + 1:
        raise TextDataError(f"the training split has {counts['train']['tokens']} tokens, "
                            f"fewer than one window of --seq-len {seq_len}; give more text "
                            "or a shorter --seq-len")


def run_prepare_text(cfg, force: bool = False, log=None) -> dict:
    """The prepare-text stage: ``prepare_text`` of a ``config.PrepareTextConfig``."""
    return prepare_text(list(cfg.corpus), cfg.out, vocab_size=cfg.vocab_size,
                        tokenizer=cfg.tokenizer or None, val_fraction=cfg.val_fraction,
                        seed=cfg.seed, seq_len=cfg.seq_len, force=force, log=log)


def prepare_text(inputs: list[str], out: str | Path, *, vocab_size: int = 0,
                 tokenizer: str | None = None, val_fraction: float = 0.01, seed: int = 0,
                 seq_len: int = 128, force: bool = False, log=None) -> dict:
    """Tokenize a corpus into a text dataset at ``out`` (see the module docstring); returns its
    manifest. Nothing is left at ``out`` unless every file was written; one writer at a time."""
    from depthbench.config import PrepareTextConfig
    from depthbench.fsio import writer_lock
    PrepareTextConfig(out=str(out), corpus=tuple(map(str, inputs)), vocab_size=vocab_size,
                      tokenizer=tokenizer or "", val_fraction=val_fraction, seed=seed,
                      seq_len=seq_len)   # the settings, checked where every caller's are
    files = input_files(inputs)   # every input exists before anything is written
    with writer_lock(out, "text dataset"):
        return _prepare_text(inputs, files, Path(out), vocab_size, tokenizer, val_fraction, seed,
                             seq_len, force, log)


def _prepare_text(inputs, files, out: Path, vocab_size, tokenizer, val_fraction, seed, seq_len,
                  force, log) -> dict:
    from depthbench.fsio import check_replaceable, replaced_dir
    if out.is_dir() and any(p.name != ".lock" for p in out.iterdir()) and not force:
        raise TextDataError(f"{out} is not empty; pass --force to replace it or choose another "
                            "--out")
    check_replaceable(out, "text-dataset")
    for f in files:
        if f not in BUILTINS and (out.resolve() == Path(f).resolve()
                             or out.resolve() in Path(f).resolve().parents):
            raise TextDataError(f"--out {out} holds the corpus file {f}; write elsewhere")
    copies = NearCopies()   # found by the first pass, reused by the others
    tok = (load_tokenizer(tokenizer) if tokenizer
           else _train_tokenizer(inputs, vocab_size, copies))
    vocab = tok.get_vocab_size()
    eot = tok.token_to_id(EOT)
    dtype = dtype_for_vocab(vocab)
    with replaced_dir(out, "text-dataset") as tmp:
        tok.save(str(tmp / "tokenizer.json"))
        counts, held_out = _write_splits(tok, inputs, tmp, val_fraction, seed, dtype, eot,
                                         check_coverage=bool(tokenizer), copies=copies)
        removed = counts.pop("duplicates_removed")
        near = counts.pop("near_duplicates_removed")
        inside = counts.pop("contained_in_training")
        _check_counts(counts, val_fraction, seq_len, inside["documents"])
        # a second pass over the training documents leaves out cloze candidates they contain
        training = (d for d, key in unique_documents(inputs, copies=copies)
                    if not in_validation(key, seed, val_fraction))
        train_ids = np.fromfile(tmp / "train.bin", dtype=dtype)
        score = unigram_score(lambda t: tok.encode(t).ids, unigram_logp(train_ids, vocab))
        items, contaminated = build_cloze(held_out, seed, score, training)
        del train_ids
        (tmp / "cloze.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "settings": {"inputs": [str(f) if f in BUILTINS else Path(f).name for f in files],
                         "vocab_size": vocab_size, "tokenizer": Path(tokenizer).name if tokenizer
                         else None, "val_fraction": val_fraction, "seed": seed,
                         "seq_len": seq_len},
            "vocab_size": vocab, "eot_id": eot, "dtype": dtype.name, "seq_len": seq_len,
            "tokenizer_sha256": sha256_file(tmp / "tokenizer.json"),
            "splits": counts, "duplicates_removed": removed, "near_duplicates_removed": near,
            "contained_in_training": inside,
            "cloze": {"items": len(items), "left_out_in_training": contaminated},
            "bytes_per_token": {s: c["bytes"] / max(1, c["tokens"]) for s, c in counts.items()},
            "files": {name: {"sha256": sha256_file(tmp / name), "bytes": (tmp / name).stat().st_size}
                      for name in FILES},
        }
        manifest["dataset_hash"] = dataset_hash(manifest)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    if log:
        log(f"{out}: {counts['train']['tokens']:,} training and "
            f"{counts['validation']['tokens']:,} validation tokens, vocabulary {vocab}")
    return manifest
