"""Natural text: a tokenized corpus for training looped models and their per-depth NLL and bits
per byte (the paper's natural-text half).

``prepare_text`` streams documents from plain-text files (documents separated by blank lines),
``.jsonl`` files (one document per line, in its ``text`` field), ``.gz`` of either, directories
of them, or ``python-docs`` (the documentation that ships with the Python interpreter: the
help topics of ``pydoc_data`` and the docstrings of the standard library's modules, so that a
fresh machine has a corpus). It trains a byte-level BPE with HF ``tokenizers`` (or loads a given
``tokenizer.json``), splits documents into train and validation by a seeded draw per document,
and writes each split as one flat token array (``.bin``, the smallest unsigned dtype that holds
the vocabulary, memory-mappable) with an end-of-text token after every document, the
tokenizer, a small held-out cloze task and a manifest in the dataset's style (format, tokenizer
hash, counts, bytes per token, the sha256 of every file, a hash over it all). Memory stays flat
in the corpus size: documents are read, encoded and written in batches. The same input and
settings give the same bytes.

``TextDataset`` opens and verifies such a directory; ``TextBatches`` draws training windows of
``seq_len + 1`` tokens at offsets seeded by (seed, step); ``text_sweep`` gives NLL per token and
bits per byte at every serving depth of the validation split from one pass.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from data_gen.generate import dataset_hash, sha256_file
from depthbench.errors import UserError

FORMAT = "depthbench-text"
FORMAT_VERSION = 2   # 2: documents by content (deduplicated, split by digest), the word-order cloze
EOT = "<|endoftext|>"
BUILTIN = "python-docs"
SUFFIXES = (".txt", ".jsonl", ".txt.gz", ".jsonl.gz")
SPLITS = ("train", "validation")
FILES = ("train.bin", "validation.bin", "tokenizer.json", "cloze.jsonl")
FIX = "prepare it again with `depthbench prepare-text`"
BATCH_DOCS = 512          # documents encoded and written together


class TextDataError(UserError):
    """A corpus or text dataset that cannot be used (missing, binary, empty, corrupt)."""


# ---- reading documents ---------------------------------------------------------------------------
def _python_docs() -> Iterator[str]:
    """The help topics pydoc ships, then the docstrings of the standard library's modules,
    classes and functions, each cut into paragraphs, in a fixed order (the corpus depends on the
    Python version; the manifest's hash records it)."""
    import ast
    import pkgutil
    import sys
    try:
        from pydoc_data.topics import topics
    except ImportError:
        topics = {}
    texts = [topics[name] for name in sorted(topics)]
    stdlib = Path(os.__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(stdlib)])
                   if not m.name.startswith("_") and m.name not in sys.builtin_module_names
                   and m.name not in ("test", "idlelib", "lib2to3", "tkinter", "turtledemo"))
    for name in names:
        f = stdlib / f"{name}.py"
        if not f.is_file():
            f = stdlib / name / "__init__.py"
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    texts.append(doc)
    for text in texts:
        for para in text.split("\n\n"):
            if len(para.strip()) >= 80:
                yield para.strip()


def input_files(inputs: list[str]) -> list[str | Path]:
    """The corpus files of ``inputs`` in reading order (a directory: its files with a corpus
    suffix, sorted, recursively); ``python-docs`` stays a name."""
    out: list[str | Path] = []
    for item in inputs:
        if item == BUILTIN:
            out.append(BUILTIN)
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
                                    f"directories of them or {BUILTIN}")
            out.append(p)
        else:
            raise TextDataError(f"corpus input {p} does not exist")
    if not out:
        raise TextDataError("give at least one corpus input")
    # one file reached twice (named twice, a directory and a file in it, a symlink to it) is
    # read once; a copy under another name is caught document by document (``documents``)
    seen, unique = set(), []
    for f in out:
        key = f if f == BUILTIN else Path(f).resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def corpus_digest(inputs: list[str], tokenizer: str | None = None) -> str:
    """The sha256 of what ``prepare_text`` would read: every input file's bytes in reading
    order (``python-docs``: the Python version it is read from) and a given tokenizer's, so
    that a corpus edited in place is a different input."""
    import sys
    h = hashlib.sha256()
    for f in input_files(inputs):
        if f == BUILTIN:
            h.update(f"{BUILTIN} {sys.version}".encode())
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
    if src == BUILTIN:
        yield from (d for d in _python_docs() if d.strip())
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
def _train_tokenizer(inputs: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((d for d, _ in unique_documents(inputs)), trainer=trainer)
    return tok


def _load_tokenizer(path: str | Path):
    from tokenizers import Tokenizer
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises its own Exception subclass on a bad file
        raise TextDataError(f"--tokenizer {path} is not a tokenizer.json file "
                            f"({str(e).splitlines()[0][:100]})") from None
    if tok.token_to_id(EOT) is None:
        tok.add_special_tokens([EOT])
    return tok


def _dtype(vocab: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab <= 2 ** 16 else np.dtype(np.uint32)


CLOZE_CONTEXT, CLOZE_CONT, CLOZE_NGRAM = 16, 8, 8   # words of context, of continuation; n-gram


def _ngrams(words: list[str], n: int = CLOZE_NGRAM) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _cloze(held_out: list[str], seed: int, training: Iterator[str] | None = None, n: int = 256,
           choices: int = 4) -> tuple[list[dict], int]:
    """A small sanity task from held-out documents: a document's first 16 words as context, its
    next 8 as the true continuation, and as distractors the same 8 words in other seeded orders,
    so every choice holds the same words and no rule that reads words but not their order (word
    overlap with the context, word frequencies) can tell them apart: it reads chance exactly.
    A candidate whose 24 words share any 8-word run with a ``training`` document is left out
    (its answer could be memorized, not predicted). Returns the items and how many candidates
    were left out."""
    docs = [d.split() for d in held_out if len(d.split()) >= CLOZE_CONTEXT + CLOZE_CONT]
    # a continuation whose words cannot make ``choices`` distinct orders gives no item
    docs = [w for w in docs if len(set(w[CLOZE_CONTEXT:CLOZE_CONTEXT + CLOZE_CONT])) >= 3][: 4 * n]
    index: dict[tuple[str, ...], list[int]] = {}
    for i, w in enumerate(docs):
        for g in _ngrams(w[:CLOZE_CONTEXT + CLOZE_CONT]):
            index.setdefault(g, []).append(i)
    seen = set()
    for doc in training or ():
        for g in _ngrams(doc.split()):
            seen.update(index.get(g, ()))
    clean = [w for i, w in enumerate(docs) if i not in seen]
    rng = np.random.default_rng([seed, 7])
    items = []
    for words in clean[:n]:
        ctx = words[:CLOZE_CONTEXT]
        cont = words[CLOZE_CONTEXT:CLOZE_CONTEXT + CLOZE_CONT]
        opts = [cont]
        while len(opts) < choices:
            alt = [cont[k] for k in rng.permutation(len(cont))]
            if alt not in opts:
                opts.append(alt)
        order = rng.permutation(choices)
        items.append({"context": " ".join(ctx), "choices": [" " + " ".join(opts[k]) for k in order],
                      "label": int(np.flatnonzero(order == 0)[0])})
    return items, len(seen)


def content_key(doc: str) -> bytes:
    """A document's identity: the digest of its text with whitespace runs collapsed, so that a
    copy reached by any route (another file, a re-wrapped paragraph) is the same document."""
    return hashlib.blake2b(" ".join(doc.split()).encode("utf-8"), digest_size=16).digest()


def unique_documents(inputs: list[str], removed: dict | None = None) -> Iterator[tuple[str, bytes]]:
    """(document, ``content_key``) of every document of ``documents`` but exact copies of an
    earlier one, which are counted in ``removed`` (documents, bytes). The index of keys holds
    16 bytes per document."""
    seen: set[bytes] = set()
    for doc in documents(inputs):
        key = content_key(doc)
        if key in seen:
            if removed is not None:
                removed["documents"] += 1
                removed["bytes"] += len(doc.encode("utf-8"))
            continue
        seen.add(key)
        yield doc, key


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


def _write_splits(tok, inputs: list[str], tmp: Path, val_fraction: float, seed: int,
                  dtype: np.dtype, eot: int, check_coverage: bool = False) -> tuple[dict, list[str]]:
    """Encode the corpus in batches of documents into ``tmp/{train,validation}.bin``, each
    document followed by end-of-text, once (an exact copy of an earlier document, whitespace
    aside, is dropped and counted) and held out by ``in_validation`` of its content; the counts
    per split (and of the copies dropped) and the first held-out documents (for the cloze
    task). With ``check_coverage`` (a given tokenizer) a document the tokenizer cannot encode
    whole is refused."""
    counts = {s: {"documents": 0, "tokens": 0, "bytes": 0} for s in SPLITS}
    counts["duplicates_removed"] = {"documents": 0, "bytes": 0}
    held_out: list[str] = []
    sinks = {s: open(tmp / f"{s}.bin", "wb") for s in SPLITS}

    def flush(batch: list[tuple[str, bytes]]) -> None:
        docs = [d for d, _ in batch]
        for (doc, key), enc in zip(batch, tok.encode_batch(docs)):
            if check_coverage and (at := _uncovered(doc, enc)) is not None:
                n = counts["train"]["documents"] + counts["validation"]["documents"] + 1
                raise TextDataError(f"the tokenizer cannot encode {doc[at]!r} (document {n}, "
                                    f"character {at}): that text would be dropped silently; give "
                                    "a tokenizer that covers the corpus (byte-level BPE) or "
                                    "--vocab-size to train one")
            v = in_validation(key, seed, val_fraction)
            s = "validation" if v else "train"
            ids = np.asarray(enc.ids + [eot], dtype=dtype)
            sinks[s].write(ids.tobytes())
            c = counts[s]
            c["documents"] += 1
            c["tokens"] += len(ids)
            c["bytes"] += len(doc.encode("utf-8"))
            if v and len(held_out) < 2048:
                held_out.append(doc)
    try:
        batch: list[tuple[str, bytes]] = []
        for doc, key in unique_documents(inputs, counts["duplicates_removed"]):
            batch.append((doc, key))
            if len(batch) == BATCH_DOCS:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
    finally:
        for f in sinks.values():
            f.close()
    return counts, held_out


def _check_counts(counts: dict, val_fraction: float, seq_len: int) -> None:
    """Splits that could not train or be read: no document, no side, or less than a window."""
    if not counts["train"]["documents"] + counts["validation"]["documents"]:
        raise TextDataError("the corpus holds no document (empty input)")
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


def prepare_text(inputs: list[str], out: str | Path, vocab_size: int = 0,
                 tokenizer: str | None = None, val_fraction: float = 0.01, seed: int = 0,
                 seq_len: int = 128, force: bool = False, log=None) -> dict:
    """Tokenize a corpus into a text dataset at ``out`` (see the module docstring); returns its
    manifest. Nothing is left at ``out`` unless every file was written."""
    from depthbench.fsio import check_replaceable, replaced_dir
    if bool(vocab_size) == bool(tokenizer):
        raise TextDataError("give either --vocab-size N (train a byte-level BPE) or --tokenizer "
                            "tokenizer.json")
    if vocab_size and not 260 <= vocab_size <= 2 ** 20:
        raise TextDataError(f"--vocab-size {vocab_size} must be between 260 (the 256 bytes and "
                            "a few merges) and 1048576")
    if not (isinstance(val_fraction, float | int) and 0 < val_fraction < 1):
        raise TextDataError(f"--val-fraction {val_fraction} must be strictly between 0 and 1")
    if not 8 <= seq_len <= 65536:
        raise TextDataError(f"--seq-len {seq_len} must be between 8 and 65536")
    out = Path(out)
    files = input_files(inputs)   # every input exists before anything is written
    if out.is_dir() and any(p.name != ".lock" for p in out.iterdir()) and not force:
        raise TextDataError(f"{out} is not empty; pass --force to replace it or choose another "
                            "--out")
    check_replaceable(out, "text-dataset")
    for f in files:
        if f != BUILTIN and (out.resolve() == Path(f).resolve()
                             or out.resolve() in Path(f).resolve().parents):
            raise TextDataError(f"--out {out} holds the corpus file {f}; write elsewhere")
    tok = _load_tokenizer(tokenizer) if tokenizer else _train_tokenizer(inputs, vocab_size)
    vocab = tok.get_vocab_size()
    eot = tok.token_to_id(EOT)
    dtype = _dtype(vocab)
    with replaced_dir(out, "text-dataset") as tmp:
        tok.save(str(tmp / "tokenizer.json"))
        counts, held_out = _write_splits(tok, inputs, tmp, val_fraction, seed, dtype, eot,
                                         check_coverage=bool(tokenizer))
        removed = counts.pop("duplicates_removed")
        _check_counts(counts, val_fraction, seq_len)
        # a second pass over the training documents leaves out cloze candidates they contain
        training = (d for d, key in unique_documents(inputs)
                    if not in_validation(key, seed, val_fraction))
        items, contaminated = _cloze(held_out, seed, training)
        (tmp / "cloze.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "settings": {"inputs": [str(f) if f == BUILTIN else Path(f).name for f in files],
                         "vocab_size": vocab_size, "tokenizer": Path(tokenizer).name if tokenizer
                         else None, "val_fraction": val_fraction, "seed": seed,
                         "seq_len": seq_len},
            "vocab_size": vocab, "eot_id": eot, "dtype": dtype.name, "seq_len": seq_len,
            "tokenizer_sha256": sha256_file(tmp / "tokenizer.json"),
            "splits": counts, "duplicates_removed": removed,
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
    if m.get("dtype") != _dtype(vocab).name:
        bad(f"dtype {m.get('dtype')!r} is not the token dtype of a {vocab}-token vocabulary "
            f"({_dtype(vocab).name})")
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
        return _load_tokenizer(self.path / "tokenizer.json")

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


# ---- evaluating ---------------------------------------------------------------------------------
def eval_windows(tokens: np.ndarray, T: int, max_windows: int | None = None) -> np.ndarray:
    """The validation split cut into consecutive windows of ``T`` tokens (inputs and targets:
    every token but the first of each window is predicted once; the tail that fills no window is
    left out)."""
    n = (len(tokens) - 1) // (T - 1)
    if max_windows:
        n = min(n, max_windows)
    idx = np.arange(n)[:, None] * (T - 1) + np.arange(T)[None, :]
    return np.asarray(tokens[idx], dtype=np.int64)


def text_sweep(model, ds: TextDataset, depths: list[int], rt=None, batch_size: int = 64,
               max_windows: int | None = None) -> dict[int, dict]:
    """NLL per token (nats) and bits per byte at every depth of ``depths`` on the validation
    split, from one forward of max(depths) loops per batch. Bits per byte spread the predicted
    tokens' total NLL over the UTF-8 bytes of text they stand for (``token_bytes``; for a
    tokenizer that is not byte-level, the split's mean bytes per token)."""
    import torch
    import torch.nn.functional as F

    from depthbench.runtime import shard_range
    model.eval()
    w = eval_windows(ds.tokens["validation"], ds.seq_len, max_windows)
    if not len(w):
        raise TextDataError(f"{ds.path}: the validation split's {len(ds.tokens['validation'])} "
                            f"tokens fill no window of {ds.seq_len - 1}; a reading over no "
                            f"token would read as a perfect model; {FIX} with a larger "
                            "--val-fraction or a shorter --seq-len")
    lo, hi = shard_range(len(w), rt.rank, rt.world) if rt else (0, len(w))
    device = rt.device if rt else torch.device("cpu")
    sums = {k: 0.0 for k in depths}
    n_tok, n_bytes = 0, 0.0
    per_token = ds.token_bytes()
    bpt = ds.manifest["bytes_per_token"]["validation"]
    ac = rt.autocast() if rt else torch.autocast("cpu", enabled=False)
    with torch.no_grad():
        for a in range(lo, hi, batch_size):
            x = torch.as_tensor(w[a:min(a + batch_size, hi)], device=device)
            inp, tgt = x[:, :-1], x[:, 1:]
            n_tok += tgt.numel()
            n_bytes += (float(per_token[w[a:a + len(x), 1:]].sum()) if per_token is not None
                        else tgt.numel() * bpt)
            with ac:
                for k, logits in model.readouts(inp, depths):
                    logits = logits.float()
                    sums[k] += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     tgt.reshape(-1), reduction="sum"))
    if rt is not None and rt.world > 1:
        total = rt.all_sum([sums[k] for k in depths] + [float(n_tok), n_bytes])
        sums, n_tok, n_bytes = dict(zip(depths, total[:-2])), int(total[-2]), total[-1]
    return {k: {"nll": sums[k] / max(1, n_tok), "tokens": n_tok, "bytes": n_bytes,
                "bits_per_byte": sums[k] / math.log(2) / max(1.0, n_bytes)}
            for k in depths}


def cloze_items(ds: TextDataset) -> list[dict]:
    return [json.loads(x) for x in (ds.path / "cloze.jsonl").read_text().splitlines() if x]


def cloze_accuracy(model, ds: TextDataset, depths: list[int], device=None) -> dict[int, dict]:
    """At every depth, two scores of the dataset's cloze items, each the share of items whose
    true continuation scores highest (chance: one over the number of choices):

    ``cloze_accuracy``     the continuation's summed loglikelihood after the context, as
                           lm-eval's multiple-choice ``acc``;
    ``cloze_accuracy_mi``  that loglikelihood minus the continuation's loglikelihood after
                           end-of-text alone (pointwise mutual information with the context,
                           lm-eval's ``acc_mutual_info``): how much the context, not the
                           continuation's own frequency, picks the answer.
    """
    import torch
    items = cloze_items(ds)
    if not items:
        return {k: {"cloze_accuracy": float("nan"), "cloze_accuracy_mi": float("nan")}
                for k in depths}
    tok = ds.tokenizer()
    limit = model.cfg.max_seq_len
    eot = ds.vocab.eos
    n_items, n_choices = len(items), len(items[0]["choices"])
    labels = torch.tensor([it["label"] for it in items])
    dev = device or next(model.parameters()).device
    lls = {k: [] for k in depths}
    model.eval()
    # each choice after its context, then after end-of-text alone (padded apart: the second
    # group is a few tokens long)
    for with_context in (True, False):
        seqs, spans = [], []
        for it in items:
            ctx = tok.encode(it["context"]).ids if with_context else [eot]
            for choice in it["choices"]:
                cont = tok.encode(choice).ids
                ids = (ctx + cont)[-(limit + 1):]
                seqs.append(ids)
                spans.append((len(ids) - len(cont), len(ids)))
        T = max(len(x) for x in seqs)
        x = torch.full((len(seqs), T), eot, dtype=torch.long)
        for i, ids in enumerate(seqs):
            x[i, :len(ids)] = torch.tensor(ids)
        x = x.to(dev)
        mask = torch.zeros(len(seqs), T - 1, dtype=torch.bool, device=dev)
        for i, (a, b) in enumerate(spans):
            mask[i, max(a, 1) - 1:b - 1] = True   # target position j predicts token j + 1
        with torch.no_grad():
            for k, logits in model.readouts(x[:, :-1], depths):
                logp = torch.log_softmax(logits.float(), -1)
                ll = (logp.gather(-1, x[:, 1:, None])[..., 0] * mask).sum(-1)
                lls[k].append(ll.view(n_items, n_choices).cpu())
    out = {}
    for k, (cond, uncond) in lls.items():
        out[k] = {"cloze_accuracy": int((cond.argmax(-1) == labels).sum()) / n_items,
                  "cloze_accuracy_mi": int(((cond - uncond).argmax(-1) == labels).sum())
                  / n_items}
    return out


def text_rows(ck: dict, meta: dict, run_name: str, ds: TextDataset, res: dict[int, dict],
              params: int, cloze: dict[int, dict] | None = None) -> list[dict]:
    """Eval rows of a text run, one per depth, split ``validation``, with the cloze scores at
    that depth where ``cloze`` gives them."""
    n_items = len(cloze_items(ds)) if cloze else 0
    return [{"run": run_name, "schedule": ck.get("schedule"), "seed": meta.get("seed"),
             "step": ck["step"], "depth": k, "split": "validation", "nll": r["nll"],
             "bits_per_byte": r["bits_per_byte"], "tokens": r["tokens"],
             **({**cloze[k], "cloze_items": n_items} if cloze else {}),
             "params": params,
             "n_grad_loops": int(ck.get("model_config", {}).get("n_grad_loops", 0)),
             "modeled_train_flops": ck.get("flops"), "wall_clock_s": ck.get("wall_clock"),
             "train_cpu_s": ck.get("cpu_clock"), "dataset_hash": ds.hash,
             "checkpoint": ck.get("path")}
            for k, r in sorted(res.items())]
