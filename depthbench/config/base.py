"""The configs' common ground: the error type, field checks, the plain-dataclass base that
checks types and unknown keys, and reading a config file."""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from pathlib import Path

from depthbench.errors import UserError


class ConfigError(UserError, ValueError):
    """A config value that is out of range or of the wrong kind."""


def require(cond: bool, field: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{field}: {msg}")


def bounded(cfg, limits: dict[str, int]) -> None:
    """Upper bounds far above any real use, so that no value can ask for an absurd allocation
    or a run of centuries."""
    for f, hi in limits.items():
        require(getattr(cfg, f) <= hi, f, f"must be at most {hi} (got {getattr(cfg, f)})")


def _type_problem(value, annotation: str) -> str | None:
    """Why ``value`` does not fit the field annotation (strictly: no bool for int, no string
    for bool, finite floats only), or None."""
    if annotation == "bool":
        return None if isinstance(value, bool) else "must be true or false"
    if annotation == "int":
        return None if type(value) is int else "must be an integer"
    if annotation == "float":
        ok = type(value) in (int, float) and math.isfinite(value)
        return None if ok else "must be a finite number"
    if annotation == "str":
        return None if isinstance(value, str) else "must be a string"
    if annotation == "tuple[int, ...]":
        ok = isinstance(value, (list, tuple)) and all(type(v) is int for v in value)
        return None if ok else "must be a list of integers"
    if annotation == "tuple[str, ...]":
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return None if ok else 'must be a list of strings, e.g. ["a", "b"]'
    if annotation == "tuple[float, ...]":
        ok = isinstance(value, (list, tuple)) and all(
            type(v) in (int, float) and math.isfinite(v) for v in value)
        return None if ok else "must be a list of numbers"
    if annotation == "int | None":
        return None if value is None or type(value) is int else "must be an integer or null"
    if annotation == "float | None":
        ok = value is None or (type(value) in (int, float) and math.isfinite(value))
        return None if ok else "must be a finite number or null"
    if annotation == "dict":
        def plain(v):
            return v is None or type(v) in (bool, int, float, str)
        ok = isinstance(value, dict) and all(
            isinstance(k, str) and (plain(v) or (isinstance(v, list) and all(map(plain, v))))
            for k, v in value.items())
        return None if ok else "must be a table of plain values"
    if annotation == "dict[str, dict]":
        ok = isinstance(value, dict) and all(isinstance(k, str) and not _type_problem(v, "dict")
                                             for k, v in value.items())
        return None if ok else "must be a table of tables of plain values, e.g. { NAME = { lr = 2e-3 } }"
    if annotation in ("ModelConfig", "TrainConfig", "GenConfig"):
        return None if type(value).__name__ == annotation else f"must be a {annotation} table"
    raise AssertionError(f"no type check for {annotation}")


class PlainConfig:
    """JSON round trip with unknown keys refused and every field's type checked."""

    def _check_types(self) -> None:
        for f in dataclasses.fields(self):
            problem = _type_problem(getattr(self, f.name), f.type)
            if not problem and f.name == "tags":
                from depthbench.rows import tags_problem
                problem = tags_problem(self.tags)
            if problem:
                raise ConfigError(f"{f.name}: {problem} (got {getattr(self, f.name)!r})")
            if f.type in ("float", "float | None") and getattr(self, f.name) is not None:
                object.__setattr__(self, f.name, float(getattr(self, f.name)))
            if f.type.startswith("tuple["):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))

    def to_dict(self) -> dict:
        """Plain JSON values (tuples as lists), nested configs as tables."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, d: dict):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} key(s): {', '.join(unknown)}; known: "
                              f"{', '.join(sorted(known))}")
        try:
            return cls(**d)
        except TypeError as e:
            raise ConfigError(f"{cls.__name__}: {e}") from None

    def replace(self, **kw):
        return self.from_dict({**self.to_dict(), **kw})


def read_config_file(path: str | Path, tables: tuple[str, ...] = ()) -> dict:
    """A config file's table: JSON (``.json``) or TOML (anything else); the keys ``tables``
    name, where given, must be tables themselves."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not text") from None
    try:
        d = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise ConfigError(f"config file {path} is not valid {kind}: {e}") from None
    if not isinstance(d, dict):
        raise ConfigError(f"config file {path} must hold a table of config keys")
    for key in tables:
        if key in d and not isinstance(d[key], dict):
            raise ConfigError(f"config file {path}: {key} must be a table (got "
                              f"{type(d[key]).__name__})")
    return d
