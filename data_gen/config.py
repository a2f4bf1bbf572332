"""Generator configuration: one keyword-only dataclass, presets as functions, plain values only.

Validation happens in ``__post_init__`` and names the field to change, because every refused
config reaches the user as a one-line CLI error.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_ATTRIBUTE_NAMES = (
    "birth_city", "employer", "university", "major", "birth_date",
    "work_city", "hobby", "pet", "instrument", "language",
    "sport", "car", "food", "color", "band", "book",
)


@dataclass(frozen=True, kw_only=True)
class Attribute:
    """One attribute: its key token is ``[name]``; it has ``n_values`` distinct values, each a
    fixed sequence of ``value_tokens`` tokens from the shared value-token pool."""

    name: str
    n_values: int
    value_tokens: int = 2

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or not self.name.isascii() \
                or not self.name.replace("_", "").isalnum():
            raise ValueError(f"attributes: name {self.name!r} must be letters, digits and '_'")
        for f in ("n_values", "value_tokens"):
            if type(getattr(self, f)) is not int:
                raise ValueError(f"attributes.{self.name}.{f} must be an integer "
                                 f"(got {getattr(self, f)!r})")
        if self.value_tokens > 64:
            raise ValueError(f"attributes.{self.name}.value_tokens must be at most 64")
        if self.n_values < 2:
            raise ValueError(f"attributes.{self.name}.n_values must be >= 2 (got {self.n_values})")
        if self.value_tokens < 1:
            raise ValueError(
                f"attributes.{self.name}.value_tokens must be >= 1 (got {self.value_tokens})")

    @property
    def bits(self) -> float:
        return math.log2(self.n_values)


def _attribute_from_dict(d) -> Attribute:
    known = {f.name for f in dataclasses.fields(Attribute)}
    if not isinstance(d, dict) or set(d) - known or "name" not in d or "n_values" not in d:
        raise ValueError(f"attributes: {d!r} must be a table with keys name, n_values "
                         "and optionally value_tokens")
    return Attribute(**d)


def _n_orders(n_attributes: int, held_out: int) -> int:
    """Orders available for training once the held-out attributes may not come first:
    (A - h) choices of first attribute, then any order of the remaining A - 1."""
    return (n_attributes - held_out) * math.factorial(n_attributes - 1)


@dataclass(frozen=True, kw_only=True)
class GenConfig:
    n_people: int = 512
    attributes: tuple[Attribute, ...] = field(
        default_factory=lambda: tuple(Attribute(name=n, n_values=256) for n in DEFAULT_ATTRIBUTE_NAMES[:6]))
    name_tokens: int = 3           # tokens per person name
    name_pool: int = 64            # distinct name tokens N0..N{pool-1}
    value_pool: int = 128          # distinct value tokens V0..V{pool-1}, shared by all attributes
    orders_per_person: int = 4     # distinct training orders per person (multiplicity)
    # attributes per person never first in training, each asked from the name alone (the
    # name-only reading's facts); 0 = half the attributes, rounded down
    held_out_attributes: int = 0
    n_unseen_people: int = 128     # control people, never trained on
    text_eval_people: int = 0      # people per split written to eval_*.jsonl (0 = all)
    # every block of M_a consecutive trained people holds each of attribute a's M_a values once
    # (a seeded permutation per block), so each value is used floor or ceil of n_people / M_a
    # times and the training distribution of values is (near) uniform: a model that learns it
    # without binding values to names reads no bits (DESIGN.md section 1). False: independent
    # uniform draws, which leak log2(M_a * count / n_people) bits per fact when M_a > n_people.
    balanced_values: bool = True
    shard_people: int = 65536      # people generated and written per shard (bounds memory)
    seed: int = 0
    # times each training order of a person is written, by value block: people [k M, (k+1) M)
    # (M: every attribute's value count) repeat their orders exposure[k % len(exposure)] times,
    # so some people are seen more often than others and memorizing the task spreads over a
    # wider range of compute. With n_people a multiple of len(exposure) x M each value is held
    # once per tier, so the training distribution of values stays uniform (floor 0 bits).
    exposure: tuple[int, ...] = (1,)

    def __post_init__(self):
        if isinstance(self.attributes, str):
            object.__setattr__(self, "attributes", parse_attributes(self.attributes))
        attrs = tuple(a if isinstance(a, Attribute) else _attribute_from_dict(a)
                      for a in self.attributes)
        object.__setattr__(self, "attributes", attrs)
        for name in ("n_people", "name_tokens", "name_pool", "value_pool", "orders_per_person",
                     "shard_people"):
            if type(getattr(self, name)) is not int or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer (got {getattr(self, name)!r})")
        if not isinstance(self.balanced_values, bool):
            raise ValueError(f"balanced_values must be true or false (got {self.balanced_values!r})")
        for name in ("n_unseen_people", "text_eval_people", "seed", "held_out_attributes"):
            if type(getattr(self, name)) is not int or getattr(self, name) < 0:
                raise ValueError(f"{name} must be an integer >= 0 (got {getattr(self, name)!r})")
        # far beyond paper scale; person ids are stored as uint32
        for name, hi in (("n_people", 2**31), ("n_unseen_people", 2**31), ("name_tokens", 64),
                         ("name_pool", 1 << 20), ("value_pool", 1 << 20),
                         ("orders_per_person", 1 << 16), ("shard_people", 1 << 24),
                         ("seed", 2**32 - 1)):
            if getattr(self, name) > hi:
                raise ValueError(f"{name} must be at most {hi} (got {getattr(self, name)})")
        if len(attrs) < 2:
            raise ValueError("attributes: need at least 2 attributes so that an evaluation order "
                             "can start with an attribute never first in training")
        names = [a.name for a in attrs]
        if len(set(names)) != len(names):
            raise ValueError(f"attributes: names must be distinct (got {names})")
        if len(attrs) > 255:
            raise ValueError("attributes: at most 255 attributes")
        if self.held_out_attributes > len(attrs) - 1:
            raise ValueError(
                f"held_out_attributes={self.held_out_attributes} is too large: with {len(attrs)} "
                f"attributes at most {len(attrs) - 1} can be held out (one must start the "
                "training orders); lower it or add attributes")
        if self.orders_per_person > _n_orders(len(attrs), self.n_held_out):
            raise ValueError(
                f"orders_per_person={self.orders_per_person} is too large: with {len(attrs)} "
                f"attributes, {self.n_held_out} of them held out, only "
                f"{_n_orders(len(attrs), self.n_held_out)} training orders start with another "
                "attribute; lower orders_per_person or held_out_attributes, or add attributes")
        names_needed = self.n_people + self.n_unseen_people
        if self.name_pool ** self.name_tokens < names_needed:
            raise ValueError(
                f"name_pool={self.name_pool} with name_tokens={self.name_tokens} gives only "
                f"{self.name_pool ** self.name_tokens} names for {names_needed} people; raise "
                "name_pool or name_tokens")
        if self.name_pool ** self.name_tokens >= 2 ** 62:
            raise ValueError("name_pool ** name_tokens must be below 2**62; lower name_tokens")
        for a in attrs:
            if self.value_pool ** a.value_tokens < a.n_values:
                raise ValueError(
                    f"attributes.{a.name}: {a.n_values} distinct values need more than "
                    f"value_pool={self.value_pool} ** value_tokens={a.value_tokens} sequences; "
                    "raise value_pool or value_tokens")
            if a.n_values > 2 ** 31:
                raise ValueError(f"attributes.{a.name}.n_values must be below 2**31")
        self._check_exposure()   # last: a bad attribute or count is named before the tiers it breaks

    def _check_exposure(self) -> None:
        e = self.exposure
        if isinstance(e, str):
            try:
                e = tuple(int(x) for x in e.split(","))
            except ValueError:
                raise ValueError(f"exposure must be positive integers, e.g. 1,2,4,8 (got {e!r})") \
                    from None
        if isinstance(e, int) and not isinstance(e, bool):
            e = (e,)
        if not isinstance(e, (tuple, list)) or not e or not all(
                type(x) is int and 1 <= x <= 1024 for x in e) or len(e) > 64:
            raise ValueError("exposure must be 1 to 64 integers in 1..1024, e.g. 1,2,4,8 "
                             f"(got {self.exposure!r})")
        if len(set(e)) == 1:   # one tier: every person alike, whatever the blocks
            object.__setattr__(self, "exposure", (e[0],))
            return
        object.__setattr__(self, "exposure", tuple(e))
        sizes = {a.n_values for a in self.attributes}
        M = next(iter(sizes))
        if len(sizes) > 1 or not self.balanced_values or self.n_people % (len(e) * M):
            raise ValueError(
                f"exposure {','.join(map(str, e))}: needs balanced values, one value count for "
                f"every attribute and n_people a multiple of {len(e)} x that count, so that each "
                f"value is held once per exposure tier (got n_people={self.n_people}, value "
                f"counts {sorted(sizes)}); or set exposure=1 for one tier")

    def exposure_of(self, person):
        """Times each training order of trained people ``person`` (an int array) is written."""
        import numpy as np
        e = np.asarray(self.exposure, dtype=np.int64)
        if len(e) == 1:
            return np.full(np.shape(person), e[0], dtype=np.int64)
        return e[(np.asarray(person) // self.attributes[0].n_values) % len(e)]

    @property
    def train_rows(self) -> int:
        """Rows of the training split: each person's orders times its exposure."""
        if len(self.exposure) == 1:
            return self.n_people * self.orders_per_person * self.exposure[0]
        M, T = self.attributes[0].n_values, len(self.exposure)
        return self.orders_per_person * M * (self.n_people // (T * M)) * sum(self.exposure)

    # ---- derived -----------------------------------------------------------------------------
    @property
    def n_attributes(self) -> int:
        return len(self.attributes)

    @property
    def seq_len(self) -> int:
        """<bos> NAME ([key] VALUE)* <eos>: the same for every order."""
        return 2 + self.name_tokens + sum(1 + a.value_tokens for a in self.attributes)

    @property
    def n_held_out(self) -> int:
        """Facts per person the name-only reading asks (``held_out_attributes``, resolved)."""
        return self.held_out_attributes or max(1, len(self.attributes) // 2)

    @property
    def ceiling_bits(self) -> float:
        """The name-only reading's ceiling: bits per person of a model that knows every asked
        fact. Each person's held-out attributes are a uniform draw, so this is the expectation,
        h times the mean bits of an attribute (exact when all attributes have the same value-set
        size; an eval row carries the exact ceiling of the facts it scored)."""
        return self.n_held_out * sum(a.bits for a in self.attributes) / len(self.attributes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if self.exposure == (1,):   # the default leaves every earlier dataset's manifest (and
            del d["exposure"]       # hash) as it was
        else:
            d["exposure"] = list(self.exposure)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> GenConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown config key(s) {', '.join(unknown)}; known keys: "
                             f"{', '.join(sorted(known))}")
        return cls(**d)


def parse_attributes(spec: str) -> tuple[Attribute, ...]:
    """``name:n_values[:value_tokens],...`` -> attributes, for ``--set attributes=...``."""
    out = []
    for part in spec.split(","):
        bits = part.strip().split(":")
        if len(bits) not in (2, 3):
            raise ValueError(f"attributes: {part!r} is not name:n_values[:value_tokens]")
        try:
            nums = [int(b) for b in bits[1:]]
        except ValueError:
            raise ValueError(f"attributes: {part!r} has a non-integer count") from None
        out.append(Attribute(name=bits[0], n_values=nums[0],
                             **({"value_tokens": nums[1]} if len(nums) == 2 else {})))
    return tuple(out)


# ---- presets ---------------------------------------------------------------------------------
def tiny() -> GenConfig:
    """CPU quickstart and tests: the packaged grids' tiered task. 256 people x 6 attributes of 64
    values in four tiers of 64 people, each tier seen 1, 8, 64 and 512 times as often, each value
    used once per tier (floor 0 bits); 3 attributes per person asked from the name alone (an
    18-bit ceiling).

    With every person seen equally often (the earlier preset: 768 people of 256-value attributes,
    docs/calibration.md ``name-n768``) memorizing is a step from nothing to everything, and the
    seeds that take the step late spread a grid past the calibration's criteria; with tiers each
    tier is learned at its own share of training and the seeds agree (table3, 8 seeds; the
    ``presets`` grid checks the by-hand path on 6)."""
    return GenConfig(n_people=256, exposure=(1, 8, 64, 512),
                     attributes=tuple(Attribute(name=n, n_values=64)
                                      for n in DEFAULT_ATTRIBUTE_NAMES[:6]))


def small() -> GenConfig:
    """16,384 people, 8 attributes of 4,096 balanced values (4 asked per person: a 48-bit
    ceiling), four people a value."""
    return GenConfig(
        n_people=16_384, name_pool=256, n_unseen_people=1000,
        attributes=tuple(Attribute(name=n, n_values=4096) for n in DEFAULT_ATTRIBUTE_NAMES[:8]))


def paper() -> GenConfig:
    """Paper scale: 2^20 people, 8 attributes of 65,536 balanced values (16 people a value);
    the text eval files cover a subsample for lm-eval."""
    return GenConfig(
        n_people=1 << 20, name_pool=1024, value_pool=512, n_unseen_people=10_000,
        text_eval_people=10_000,
        attributes=tuple(Attribute(name=n, n_values=65536) for n in DEFAULT_ATTRIBUTE_NAMES[:8]))


PRESETS = {"tiny": tiny, "small": small, "paper": paper}


def parse_value(text: str):
    """A --set value: JSON when it parses (numbers, booleans, lists), a list of bare words
    (``[eval_reordered, fixed:2]``, as a shell leaves it without quotes) as a list of their
    values, else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return _bare_list(text)


def _bare_list(text: str):
    """``[a, b]``'s items, each a ``parse_value``; any other text (a nested or broken list,
    an empty item) as it is."""
    s = text.strip()
    if not (s.startswith("[") and s.endswith("]")) or "[" in s[1:-1]:
        return text
    items = [t.strip() for t in s[1:-1].split(",")]
    return [parse_value(t) for t in items] if all(items) else text


def resolve_config(preset: str | None = "tiny", config_file: str | Path | None = None,
                   overrides: dict | None = None, seed: int | None = None) -> GenConfig:
    """preset -> TOML file -> --set overrides -> --seed, each layer replacing keys."""
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    d = (PRESETS[preset or "tiny"]()).to_dict()
    if config_file is not None:
        path = Path(config_file)
        kind = "JSON" if path.suffix == ".json" else "TOML"
        try:
            text = path.read_text()
            file_d = json.loads(text) if kind == "JSON" else tomllib.loads(text)
        except FileNotFoundError:
            raise ValueError(f"config file {path} does not exist") from None
        except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"config file {path} is not valid {kind}: {e}") from None
        if not isinstance(file_d, dict):
            raise ValueError(f"config file {path} must hold a table of dataset config keys")
        # a whole config as GenConfig.to_dict wrote it (a manifest's, a plan's) omits exposure
        # at its default: one tier, not the preset's tiers
        whole = {f.name for f in dataclasses.fields(GenConfig)} - {"exposure"} <= set(file_d)
        d.update({"exposure": 1} if whole else {}, **file_d)
    d.update(overrides or {})
    if seed is not None:
        d["seed"] = seed
    return GenConfig.from_dict(d)
