"""Knowledge metrics (DESIGN.md section 2), kept as sums and counts until the very end.

For a fact (person, attribute a) with value tokens t_1..t_L and value-set size M_a:
    value_nll      sum_i -log p(t_i | context, t_<i)                      (nats, teacher-forced)
    recalled bits  r = max(0, log2 M_a - value_nll / ln 2)
    exact match    greedy decoding of all L tokens is right. Greedy token i+1 is conditioned on
                   greedy token i; if token i was right that context is the teacher-forced one,
                   so "all teacher-forced argmaxes right" is exactly greedy exact match.
bits per person = mean over people of the sum over their asked facts of r. An evaluation row asks
one fact from the name alone and a person has ``rows_per_person`` of them, so it is
bits_sum / (rows / rows_per_person); the row's ceiling is the same sum for a model that knows
every asked fact (sum of log2 M_a over the facts scored, per person).

Beside the asked fact, two breakdowns say where a row's nats and a reading's facts lie:
``row_nll/TYPE`` splits the whole row's NLL (nats per row, the types summing to the row's total)
by the kind of token predicted (``TOKEN_TYPES``: the name, the asked key and value, the later
keys and values, the end of the row); ``exact_match@xE``, ``bits_per_person@xE`` and
``value_nll@xE`` read the asked fact on the people of one exposure tier (seen E times as often),
where a dataset has tiers.

Sums are reduced across ranks (``Runtime.all_sum``) and only then divided (STYLE habit 10).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from depthbench.rows import TOKEN_TYPES

__all__ = ["TOKEN_TYPES", "EvalSums", "FactIndex", "fact_bits", "token_types"]
LN2 = math.log(2.0)


def token_types(name_tokens: int, key_pos: np.ndarray, value_len: np.ndarray,
                seq_len: int) -> np.ndarray:
    """(B, seq_len - 1) index into ``TOKEN_TYPES`` of the token each position predicts, for rows
    ``<bos> name [k] v.. [k] v.. .. <eos>`` with every slot's key at ``key_pos`` (B, A) and its
    value ``value_len`` (B, A) tokens long (slot 0 is the asked fact)."""
    B, A = key_pos.shape
    typ = np.full((B, seq_len), TOKEN_TYPES.index("end"), dtype=np.int64)
    typ[:, 1:1 + name_tokens] = TOKEN_TYPES.index("name")
    rows = np.arange(B)
    for slot in range(A):
        later = 2 if slot else 0
        typ[rows, key_pos[:, slot]] = 1 + later
        for l in range(int(value_len[:, slot].max())):
            on = l < value_len[:, slot]
            typ[rows[on], key_pos[on, slot] + 1 + l] = 2 + later
    return typ[:, 1:]


class FactIndex:
    """Where the value tokens of every fact of a batch sit, as gather indices into the
    (B, T-1) per-position arrays of next-token predictions."""

    def __init__(self, key_pos: np.ndarray, order: np.ndarray, value_len: np.ndarray,
                 device=None, types: np.ndarray | None = None, tier: np.ndarray | None = None):
        """``types`` (B, T-1): each position's ``TOKEN_TYPES`` index (``token_types``), for the
        row NLL by token type; ``tier`` (B,): each row's exposure tier (-1: none), for the
        readings per tier."""
        B, A = order.shape
        lmax = int(value_len.max())
        L = value_len[order]                                               # (B, A)
        offs = np.arange(lmax)
        # value token l of the fact whose key sits at k is tokens[k + 1 + l], predicted at k + l
        pos = key_pos[:, :, None] + offs                                   # (B, A, Lmax)
        mask = offs[None, None, :] < L[:, :, None]
        pos = np.where(mask, pos, key_pos[:, :, None])
        self.pos = torch.as_tensor(pos.reshape(B, -1), device=device)      # (B, A*Lmax)
        self.mask = torch.as_tensor(mask, device=device)                   # (B, A, Lmax)
        self.attr = torch.as_tensor(order, device=device, dtype=torch.long)  # (B, A)
        self.shape = (B, A, lmax)
        self.types = None if types is None else torch.as_tensor(types, device=device)
        self.tier = None if tier is None else torch.as_tensor(tier, dtype=torch.long)


class EvalSums:
    """Running sums of one (depth, split): whole-sequence NLL (and its split by token type),
    per-fact knowledge, and the asked fact per exposure tier (``tiers``: each tier's exposure,
    empty where the dataset has one tier)."""

    def __init__(self, n_values: np.ndarray, rows_per_person: int = 1,
                 tiers: tuple[int, ...] = ()):
        self.log2m = torch.tensor(np.log2(n_values), dtype=torch.float64)
        self.rows_per_person = rows_per_person
        self.tiers = tuple(tiers)
        A = len(n_values)
        self.scalars = dict(nll_sum=0.0, n_tokens=0.0, rows=0.0)
        self.per_attr = {k: torch.zeros(A, dtype=torch.float64)
                         for k in ("value_nll_sum", "bits_sum", "unfloored_bits_sum",
                                   "exact_sum", "n_facts")}
        self.by_type = torch.zeros(len(TOKEN_TYPES), dtype=torch.float64)
        self.typed = False   # whether any batch came with token types
        self.per_tier = {k: torch.zeros(len(self.tiers), dtype=torch.float64)
                         for k in ("value_nll_sum", "bits_sum", "exact_sum", "n_facts", "rows")}

    @torch.no_grad()
    def add(self, logits: torch.Tensor, targets: torch.Tensor, facts: FactIndex) -> None:
        """logits: (B, T-1, V) next-token logits; targets: (B, T-1) the tokens they predict."""
        logits = logits.float()
        # over rows of (B (T-1), V): a class dim that is not the last is several times slower
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                              reduction="none").view(targets.shape)        # (B, T-1)
        self.scalars["nll_sum"] += nll.double().sum().item()
        self.scalars["n_tokens"] += targets.numel()
        self.scalars["rows"] += targets.shape[0]
        B, A, L = facts.shape
        vn = (nll.gather(1, facts.pos).view(B, A, L) * facts.mask).sum(-1).double().cpu()  # (B, A)
        # greedy predictions at the value positions only (an argmax over V at every position
        # would cost as much as the cross entropy)
        at = logits.gather(1, facts.pos[..., None].expand(-1, -1, logits.shape[-1]))
        right = at.argmax(-1) == targets.gather(1, facts.pos)             # (B, A*L)
        ok = (right.view(B, A, L) | ~facts.mask).all(-1).cpu()             # (B, A)
        attr = facts.attr.cpu()
        unfloored = self.log2m[attr] - vn / LN2
        parts = (("value_nll_sum", vn), ("bits_sum", unfloored.clamp(min=0)),
                 ("unfloored_bits_sum", unfloored), ("exact_sum", ok.double()),
                 ("n_facts", torch.ones_like(vn)))
        for key, val in parts:
            self.per_attr[key].index_add_(0, attr.reshape(-1), val.reshape(-1))
        if facts.types is not None:
            self.typed = True
            per_type = torch.zeros(len(TOKEN_TYPES), dtype=torch.float64, device=nll.device)
            per_type.index_add_(0, facts.types.reshape(-1), nll.double().reshape(-1))
            self.by_type += per_type.cpu()   # summed where the logits are: 6 numbers cross
        if self.tiers and facts.tier is not None:
            self._add_tiers(facts.tier, dict(parts))

    def _add_tiers(self, tier: torch.Tensor, parts: dict) -> None:
        """The asked fact's sums of each row, by its person's exposure tier (-1: none)."""
        on = tier >= 0
        t = tier[on]
        for key in ("value_nll_sum", "bits_sum", "exact_sum", "n_facts"):
            self.per_tier[key].index_add_(0, t, parts[key][on].sum(-1))
        self.per_tier["rows"].index_add_(0, t, torch.ones(len(t), dtype=torch.float64))

    def _tensors(self) -> list[torch.Tensor]:
        return [*self.per_attr.values(), self.by_type, *self.per_tier.values()]

    def flat(self) -> list[float]:
        return list(self.scalars.values()) + torch.cat(self._tensors()).tolist()

    def load_flat(self, values: list[float]) -> EvalSums:
        n = len(self.scalars)
        for i, k in enumerate(self.scalars):
            self.scalars[k] = values[i]
        for t in self._tensors():   # the sums themselves, filled in place in flat()'s order
            t.copy_(torch.tensor(values[n:n + len(t)], dtype=torch.float64))
            n += len(t)
        return self

    def result(self, attributes: list[str]) -> dict:
        """The metric columns of a result row (and per-attribute ones)."""
        s, p = self.scalars, self.per_attr
        facts = p["n_facts"].sum().item()
        people = s["rows"] / self.rows_per_person
        per = people or 1.0
        out = {
            "nll": s["nll_sum"] / max(s["n_tokens"], 1.0),
            "value_nll": p["value_nll_sum"].sum().item() / max(facts, 1.0),
            "exact_match": p["exact_sum"].sum().item() / max(facts, 1.0),
            "bits_per_person": p["bits_sum"].sum().item() / per,
            "unfloored_bits_per_person": p["unfloored_bits_sum"].sum().item() / per,
            "ceiling_bits": float((p["n_facts"] * self.log2m).sum().item()) / per,
            "people": int(round(people)),
            "facts": int(facts),
        }
        for a, name in enumerate(attributes):
            n = max(p["n_facts"][a].item(), 1.0)
            out[f"bits/{name}"] = p["bits_sum"][a].item() / n
            out[f"exact_match/{name}"] = p["exact_sum"][a].item() / n
        if self.typed:
            rows = max(s["rows"], 1.0)
            out.update({f"row_nll/{t}": self.by_type[i].item() / rows
                        for i, t in enumerate(TOKEN_TYPES)})
        return {**out, **self._tier_result()}

    def _tier_result(self) -> dict:
        """The asked fact read on each exposure tier's people (NaN for a tier with no rows)."""
        out, q = {}, self.per_tier
        for i, e in enumerate(self.tiers):
            n, people = q["n_facts"][i].item(), q["rows"][i].item() / self.rows_per_person
            nan = float("nan")
            out[f"exact_match@x{e}"] = q["exact_sum"][i].item() / n if n else nan
            out[f"value_nll@x{e}"] = q["value_nll_sum"][i].item() / n if n else nan
            out[f"bits_per_person@x{e}"] = q["bits_sum"][i].item() / people if people else nan
        return out


def fact_bits(value_nll_nats: float, n_values: int) -> float:
    """Recalled bits of one fact (the definition, for tests and readers)."""
    return max(0.0, math.log2(n_values) - value_nll_nats / LN2)
