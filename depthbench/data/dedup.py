"""Near-duplicate documents: MinHash signatures of word shingles, banded for lookup.

Two documents are near duplicates when the Jaccard similarity J of their sets of word 5-grams
(``SHINGLE``; words lowercased, punctuation dropped) is about 0.8 or more. Each document gets a
``PERMUTATIONS``-value MinHash signature (the minimum of a seeded 64-bit mix of each shingle's
hash, one seed per value); the fraction of equal values estimates J with a standard deviation
of sqrt(J (1 - J) / 128), 0.035 at J = 0.8. A document is a near copy of an earlier one when
the estimate reaches ``THRESHOLD`` (0.75: a pair at J = 0.85 is missed with probability about
0.2%; erring toward dropping, since a dropped document costs a little data and a kept near copy
contaminates the validation split). Candidates are found by locality-sensitive hashing: the
signature is cut into ``BANDS`` bands of 4 values, and a document that shares a whole band with
an earlier one is compared with it on the whole signature (a pair at J = 0.75 shares a band
with probability 1 - (1 - 0.75^4)^32 > 0.9999).

A held-out document can also be *contained* in the training split without being near any one
training document (boilerplate shared by many documents, one paragraph of a long one, a few words
edited): ``Contained`` holds the training split's word 5-grams and gives the share of a
document's 5-grams found there; a held-out document at ``CONTAINED`` or more is not held out.

Everything is a pure function of the text (no process-seeded ``hash``), so the same corpus gives
the same decisions on every machine. The index keeps each kept document's signature (8 bytes
per value) and its band keys: about 2 KB per document.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

import numpy as np

SHINGLE = 5
PERMUTATIONS = 128
BANDS = 32
THRESHOLD = 0.75
CONTAINED = 0.5      # a held-out document with half its word 5-grams in training is dropped
_CHUNK = 8192   # shingles hashed at a time

_WORD = re.compile(r"\w+")
_SEEDS = np.random.default_rng(np.random.SeedSequence(0x6D696E68)).integers(
    0, 2 ** 64, PERMUTATIONS, dtype=np.uint64, endpoint=False)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer (a bijective avalanche on uint64, wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@functools.lru_cache(maxsize=1 << 18)
def _word_hash(w: str) -> int:
    return int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")


def normal_text(doc: str) -> str:
    """What identifies a text: Unicode NFKC (a composed and a decomposed accent, a ligature
    and its letters are one text), invisible format characters (zero-width spaces, joiners,
    BOMs: category Cf) dropped, whitespace runs collapsed."""
    return " ".join(unicodedata.normalize("NFKC", doc).translate(_format_chars()).split())


@functools.cache
def _format_chars() -> dict[int, None]:
    """str.translate's table deleting every Unicode format character (category Cf), built
    once: translate runs in C, where a test per character in Python costs 0.1 s a MB."""
    return {c: None for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"}


def content_key(doc: str) -> bytes:
    """A document's identity: the digest of its ``normal_text``, so that a copy reached by any
    route (another file, a re-wrapped paragraph, another Unicode form) is the same document."""
    return hashlib.blake2b(normal_text(doc).encode("utf-8"), digest_size=16).digest()


def words(doc: str) -> list[str]:
    """The document's words, lowercased, of its ``normal_text`` (Unicode forms and invisible
    characters do not split or change a word)."""
    return _WORD.findall(normal_text(doc).lower())


def shingles(doc: str, size: int = SHINGLE) -> np.ndarray:
    """The distinct 64-bit hashes of the document's word ``size``-grams (a shorter document
    is one shingle of all its words)."""
    ws = words(doc)
    if not ws:
        return np.zeros(0, dtype=np.uint64)
    ids = np.array([_word_hash(w) for w in ws], dtype=np.uint64)
    n = max(1, len(ids) - size + 1)
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(min(size, len(ids))):    # an order-dependent combination of the words
            h = _mix(h ^ ids[j:j + n])
    return np.unique(h)


def signature(doc: str) -> np.ndarray | None:
    """(PERMUTATIONS,) uint64 MinHash signature; None for a document without words."""
    sh = shingles(doc)
    if not len(sh):
        return None
    out = np.full(PERMUTATIONS, np.iinfo(np.uint64).max, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in range(0, len(sh), _CHUNK):   # (PERMUTATIONS, chunk): memory flat in doc size
            np.minimum(out, _mix(sh[None, i:i + _CHUNK] ^ _SEEDS[:, None]).min(axis=1), out=out)
    return out


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The estimated Jaccard similarity of two signatures."""
    return float((a == b).mean())


class NearDuplicates:
    """The documents kept so far; ``seen(doc)`` says whether ``doc`` is a near duplicate of one
    of them (then it is not added)."""

    def __init__(self, threshold: float = THRESHOLD):
        self.threshold = threshold
        self.bands: list[dict[bytes, list[int]]] = [{} for _ in range(BANDS)]
        self.sigs: list[np.ndarray] = []

    def seen(self, doc: str) -> bool:
        sig = signature(doc)
        if sig is None:
            return False
        keys = [sig[i::BANDS].tobytes() for i in range(BANDS)]
        for band, key in zip(self.bands, keys):
            if any(similarity(sig, self.sigs[j]) >= self.threshold for j in band.get(key, ())):
                return True
        for band, key in zip(self.bands, keys):
            band.setdefault(key, []).append(len(self.sigs))
        self.sigs.append(sig)
        return False


def jaccard(a: str, b: str) -> float:
    """The exact Jaccard similarity of two documents' shingle sets (the tests' oracle)."""
    sa, sb = set(shingles(a).tolist()), set(shingles(b).tolist())
    return len(sa & sb) / max(1, len(sa | sb))


class NearCopies:
    """The content keys of the near copies one pass over a corpus found, so that the passes
    after it (the tokenizer's, the splits', the cloze's) drop the same documents without
    hashing every shingle again."""

    def __init__(self):
        self.keys: set[bytes] = set()
        self.found = False


class Contained:
    """The distinct word ``size``-grams of the documents ``add``-ed (the training split), as
    one sorted array (8 bytes per distinct n-gram; merged every ``_MERGE`` new ones, so memory
    stays near the index's own size), and ``share(doc)``: the fraction of ``doc``'s n-grams
    among them (words as ``words`` reads them: case, punctuation and Unicode form aside)."""

    _MERGE = 1 << 22

    def __init__(self, size: int = SHINGLE):
        self.size = size
        self.index = np.zeros(0, dtype=np.uint64)
        self.parts: list[np.ndarray] = []
        self.pending = 0

    def add(self, doc: str) -> None:
        sh = shingles(doc, self.size)
        self.parts.append(sh)
        self.pending += len(sh)
        if self.pending >= self._MERGE:
            self._merge()

    def _merge(self) -> None:
        self.index = np.unique(np.concatenate([self.index, *self.parts]))
        self.parts, self.pending = [], 0

    def found(self, doc: str) -> np.ndarray:
        """For each of ``doc``'s distinct n-grams, whether an added document has it."""
        if self.parts:
            self._merge()
        sh = shingles(doc, self.size)
        if not len(sh) or not len(self.index):
            return np.zeros(len(sh), dtype=bool)
        at = np.minimum(np.searchsorted(self.index, sh), len(self.index) - 1)
        return self.index[at] == sh

    def share(self, doc: str) -> float:
        hit = self.found(doc)
        return float(hit.mean()) if len(hit) else 0.0

    def any(self, doc: str) -> bool:
        return bool(self.found(doc).any())
