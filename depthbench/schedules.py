"""Depth schedules: pure functions of (step, total_steps, seed) -> K.

Each step's draw uses its own generator seeded by (seed, step), so a resumed run, and every
rank of a distributed run, draws exactly the same K without sharing state.

Specs:
    fixed:4                          K = 4 always
    uniform:1-16                     K uniform in 1..16
    fixed-first:0.8:4:1-16           K = 4 for the first 80% of steps, then uniform 1..16
    fixed-first:0.8:4:poisson-lognormal:mean=8,max=16
                                     the same fixed phase, then K drawn from another
                                     distribution (any fixed, uniform or poisson-lognormal spec)
    poisson-lognormal:mean=8,max=16  K = 1 + Poisson(tau), tau ~ LogNormal with mean 8 - 1, K <= 16
    curriculum:1-16:0.5              K uniform in 1..M, M ramping linearly from 1 to 16 over the
                                     first 50% of steps, then 16
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from depthbench.errors import UserError

# the deepest loop count any spec or option may name: far beyond the field's models (Huginn
# serves at up to 64-128 loops), small enough that no depth can ask for an absurd allocation
MAX_DEPTH = 1024

SPEC_HELP = ("fixed:K, uniform:A-B, fixed-first:FRACTION:K:A-B (or :K:DISTRIBUTION, e.g. "
             ":4:poisson-lognormal:mean=8,max=16), "
             "poisson-lognormal:mean=M,max=N, curriculum:A-B:FRACTION")


class ScheduleError(UserError, ValueError):
    """A schedule or depth spec that does not parse."""


def _rng(seed: int, step: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0xD3, step)))


# every step's uniform draw, per (seed, lo, hi), drawn once per process: planning a grid asks
# for the same runs' depths many times (shared prefixes, the compute-matched step search), and
# one generator per step costs about 20 us, so a 20,000-step paper grid took seconds per ask
_UNIFORM: dict[tuple[int, int, int], np.ndarray] = {}


def _uniform_draws(seed: int, lo: int, hi: int, stop: int) -> np.ndarray:
    """Steps 0..stop-1's draws of K uniform in lo..hi, each from its own (seed, step) generator
    (the same integers ``Schedule.depth`` draws)."""
    have = _UNIFORM.get((seed, lo, hi), np.zeros(0, dtype=np.int64))
    if len(have) < stop:
        more = [int(_rng(seed, s).integers(lo, hi + 1)) for s in range(len(have), stop)]
        have = _UNIFORM[(seed, lo, hi)] = np.concatenate([have, np.array(more, dtype=np.int64)])
    return have[:stop]


def _num(x: float) -> str:
    """The shortest text that reads back as ``x`` (8.0 -> "8")."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Schedule:
    spec: str
    kind: str
    k: int = 0                 # fixed depth (fixed, fixed-first)
    lo: int = 1                # depth range (uniform, fixed-first, curriculum)
    hi: int = 1
    fraction: float = 0.0      # switch point (fixed-first) or ramp length (curriculum)
    mean: float = 0.0          # poisson-lognormal
    sigma: float = 0.5
    finish: Schedule | None = None  # fixed-first: the finishing distribution (None: uniform lo..hi)

    @property
    def canonical(self) -> str:
        """The one spelling of this schedule (``fixed:02`` and ``" fixed:2 "`` are ``fixed:2``),
        so that a schedule given two ways is one schedule."""
        if self.kind == "fixed":
            return f"fixed:{self.k}"
        if self.kind == "uniform":
            return f"uniform:{self.lo}-{self.hi}"
        if self.kind == "fixed-first":
            tail = self.finish.canonical if self.finish else f"{self.lo}-{self.hi}"
            return f"fixed-first:{_num(self.fraction)}:{self.k}:{tail}"
        if self.kind == "curriculum":
            return f"curriculum:{self.lo}-{self.hi}:{_num(self.fraction)}"
        sigma = "" if self.sigma == 0.5 else f",sigma={_num(self.sigma)}"
        return f"poisson-lognormal:mean={_num(self.mean)},max={self.hi}{sigma}"

    @property
    def max_depth(self) -> int:
        return {"fixed": self.k}.get(self.kind, max(self.hi, self.k))

    def switch_step(self, total_steps: int) -> int | None:
        """The first step of the finishing phase of a fixed-first schedule."""
        if self.kind != "fixed-first":
            return None
        return int(round(self.fraction * total_steps))

    def depth(self, step: int, total_steps: int, seed: int) -> int:
        if self.kind == "fixed":
            return self.k
        rng = _rng(seed, step)
        if self.kind == "uniform":
            return int(rng.integers(self.lo, self.hi + 1))
        if self.kind == "fixed-first":
            if step < self.switch_step(total_steps):
                return self.k
            if self.finish is not None:
                return self.finish.depth(step, total_steps, seed)
            return int(rng.integers(self.lo, self.hi + 1))
        if self.kind == "curriculum":
            ramp = max(1, int(round(self.fraction * total_steps)))
            top = self.lo + (self.hi - self.lo) * min(1.0, step / ramp)
            return int(rng.integers(self.lo, int(math.floor(top)) + 1))
        assert self.kind == "poisson-lognormal"
        # log-normal rate whose mean is mean - 1, so that E[1 + Poisson(tau)] = mean
        m = max(self.mean - 1.0, 1e-6)
        tau = rng.lognormal(math.log(m) - self.sigma ** 2 / 2, self.sigma)
        return int(min(self.hi, 1 + rng.poisson(tau)))

    def depths(self, total_steps: int, seed: int, start: int = 0) -> np.ndarray:
        # the fixed steps need no draw (a fixed schedule, a fixed-first run's fixed phase)
        fixed_until = {"fixed": total_steps,
                       "fixed-first": self.switch_step(total_steps)}.get(self.kind, start)
        cut = min(max(start, fixed_until), total_steps)
        if self.kind in ("uniform", "fixed-first") and self.finish is None:
            drawn = _uniform_draws(seed, self.lo, self.hi, total_steps)[cut:]
        elif self.kind == "fixed-first":
            drawn = self.finish.depths(total_steps, seed, cut)
        else:
            drawn = np.array([self.depth(s, total_steps, seed) for s in range(cut, total_steps)],
                             dtype=np.int64)
        return np.concatenate([np.full(cut - start, self.k, dtype=np.int64), drawn])


def _int(text: str, spec: str, what: str) -> int:
    if not re.fullmatch(r"[0-9]+", text.strip()):
        raise ScheduleError(f"spec {spec!r}: {what} {text!r} is not a positive integer; "
                            f"specs: {SPEC_HELP}")
    v = int(text)
    if not 1 <= v <= MAX_DEPTH:
        raise ScheduleError(f"spec {spec!r}: {what} must be between 1 and {MAX_DEPTH} (got {v})")
    return v


def _range(text: str, spec: str) -> tuple[int, int]:
    lo, sep, hi = text.partition("-")
    if not sep:
        raise ScheduleError(f"spec {spec!r}: {text!r} is not a depth range A-B; specs: {SPEC_HELP}")
    a, b = _int(lo, spec, "depth"), _int(hi, spec, "depth")
    if a > b:
        raise ScheduleError(f"spec {spec!r}: range {a}-{b} is empty (A must be <= B)")
    return a, b


def _fraction(text: str, spec: str) -> float:
    try:
        f = float(text)
    except ValueError:
        raise ScheduleError(f"schedule {spec!r}: {text!r} is not a fraction in (0, 1)") from None
    if not 0 < f < 1:
        raise ScheduleError(f"schedule {spec!r}: fraction {f} must be strictly between 0 and 1")
    return f


def _finish(tail: str, spec: str) -> Schedule:
    """The finishing distribution of a fixed-first spec: a fixed, uniform or poisson-lognormal
    spec (a distribution of K; not a schedule that changes over training)."""
    try:
        finish = parse_schedule(tail)
    except ScheduleError as e:
        raise ScheduleError(f"schedule {spec!r}: its finishing distribution {tail!r} does not "
                            f"parse ({e})") from None
    if finish.kind not in ("fixed", "uniform", "poisson-lognormal"):
        raise ScheduleError(f"schedule {spec!r}: the finishing distribution must be a fixed, "
                            f"uniform or poisson-lognormal spec, not {finish.kind}")
    return finish


def parse_schedule(spec: str | Schedule) -> Schedule:
    """The ``Schedule`` a spec names (a parsed one as it is); ScheduleError where it names
    none."""
    if isinstance(spec, Schedule):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise ScheduleError(f"schedule {spec!r} is not a spec; specs: {SPEC_HELP}")
    kind, _, rest = spec.strip().partition(":")
    parts = rest.split(":")
    if kind == "fixed" and len(parts) == 1:
        return Schedule(spec, kind, k=_int(parts[0], spec, "depth"))
    if kind == "uniform" and len(parts) == 1:
        lo, hi = _range(parts[0], spec)
        return Schedule(spec, kind, lo=lo, hi=hi)
    if kind == "fixed-first" and len(parts) >= 3:
        fraction, k = _fraction(parts[0], spec), _int(parts[1], spec, "depth")
        tail = ":".join(parts[2:])
        if ":" not in tail:
            lo, hi = _range(tail, spec)
            return Schedule(spec, kind, fraction=fraction, k=k, lo=lo, hi=hi)
        finish = _finish(tail, spec)
        if finish.kind == "uniform":  # one spelling: fixed-first:F:K:A-B
            return Schedule(spec, kind, fraction=fraction, k=k, lo=finish.lo, hi=finish.hi)
        return Schedule(spec, kind, fraction=fraction, k=k, lo=finish.lo,
                        hi=finish.max_depth, finish=finish)
    if kind == "curriculum" and len(parts) == 2:
        lo, hi = _range(parts[0], spec)
        return Schedule(spec, kind, lo=lo, hi=hi, fraction=_fraction(parts[1], spec))
    if kind == "poisson-lognormal" and len(parts) == 1:
        kv = {}
        for item in parts[0].split(","):
            key, sep, val = item.partition("=")
            if not sep or key not in ("mean", "max", "sigma") or key in kv:
                raise ScheduleError(f"schedule {spec!r}: expected mean=M,max=N[,sigma=S]")
            kv[key] = val
        if "mean" not in kv or "max" not in kv:
            raise ScheduleError(f"schedule {spec!r}: needs both mean= and max=")
        try:
            mean, sigma = float(kv["mean"]), float(kv.get("sigma", 0.5))
        except ValueError:
            raise ScheduleError(f"schedule {spec!r}: mean and sigma must be numbers") from None
        hi = _int(kv["max"], spec, "max")
        if not (1 <= mean <= hi) or not (0 < sigma < 5):
            raise ScheduleError(f"schedule {spec!r}: need 1 <= mean <= max and 0 < sigma < 5")
        return Schedule(spec, kind, lo=1, hi=hi, mean=mean, sigma=sigma)
    raise ScheduleError(f"schedule {spec!r} is not understood; specs: {SPEC_HELP}")


def parse_depths(spec: str) -> list[int]:
    """Depth lists for sweeps: ``1-16``, ``1,2,4,8``, ``1-4,8,16``."""
    out: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        if "-" in part:
            a, b = _range(part, spec)
            out.extend(range(a, b + 1))
        else:
            out.append(_int(part, spec, "depth"))
    if not out:
        raise ScheduleError(f"depth spec {spec!r} names no depth (e.g. 1-16 or 1,2,4)")
    return sorted(set(out))
