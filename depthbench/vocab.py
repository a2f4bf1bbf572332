"""The token vocabulary of a dataset: whitespace-separated token text <-> integer ids."""

from __future__ import annotations

from depthbench.errors import UserError


class Vocab:
    def __init__(self, tokens: list[str]):
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            raise UserError("vocab.json lists a token twice; regenerate the dataset")
        self.pad, self.bos, self.eos = (self.index[t] for t in ("<pad>", "<bos>", "<eos>"))
        self.key_ids = [i for i, t in enumerate(self.tokens) if t.startswith("[")]

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.index[t] for t in text.split()]
        except KeyError as e:
            raise UserError(f"token {e.args[0]!r} is not in the dataset's vocabulary") from None

    def decode(self, ids) -> str:
        return " ".join(self.tokens[int(i)] for i in ids)
