"""The serving cost model: a machine's per-stage launch costs (``Profile``: a roofline from public
specifications, or fitted on this machine by ``serving.calibrate``) and the work a launch of each
stage does (``stage_work``), priced by ``ProfileCosts``."""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from depthbench.config import LoopShape, ModelConfig, shape_of
from depthbench.errors import UserError
from depthbench.serving.executor import STAGES
from depthbench.serving.memory import kv_bytes, weight_bytes

PROFILE_DIR = Path(__file__).parent / "profiles"


# ---- hardware profiles -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Profile:
    name: str
    kind: str = "roofline"         # roofline | fitted
    source: str = ""               # where the constants come from
    bytes_per_value: int = 2       # bf16 weights and KV (fp32 CPU: 4)
    peak_flops: float = 0.0        # dense matmul FLOP/s (roofline)
    mem_bw: float = 0.0            # bytes/s (roofline)
    flops_efficiency: float = 1.0  # achieved fraction of peak_flops
    bw_efficiency: float = 1.0     # achieved fraction of mem_bw
    launch: float = 0.0            # host seconds per stage launch
    sync: float = 0.0              # seconds per device-to-host read
    token: float = 0.0             # host seconds per emitted token
    iteration: float = 0.0         # scheduler seconds per core launch
    attention: bool = True         # count attention FLOPs and KV bytes (False: parameters only)
    paged: bool = True             # attention reads each row's own positions (a paged or varlen
                                   # kernel); False: every row reads the launch's longest context
    overlap: bool = True           # host work runs while the device works (asynchronous launches);
                                   # only syncs add to the device time
    fit: dict = field(default_factory=dict)   # fitted: stage -> [a, alpha, beta]
    memory: float = 0.0            # device memory in bytes (0: unlimited): the weights and the
                                   # resident requests' KV must fit in memory_util of it
    memory_util: float = 0.9       # the share of memory serving may take (vLLM's default)
    device: str = ""               # the device kind priced, whose scheduler defaults apply ("cpu",
                                   # "cuda"; "": cuda for a roofline, cpu for a fitted profile)

    @property
    def device_type(self) -> str:
        return self.device or ("cuda" if self.kind == "roofline" else "cpu")

    def __post_init__(self):
        for f in ("attention", "paged", "overlap"):
            if not isinstance(getattr(self, f), bool):
                raise UserError(f"profile {self.name}: {f} must be true or false")
        if not (isinstance(self.name, str) and isinstance(self.source, str)):
            raise UserError("profile name and source must be strings")
        if not (type(self.bytes_per_value) is int and 1 <= self.bytes_per_value <= 8):
            raise UserError(f"profile {self.name}: bytes_per_value must be an integer in 1..8")
        if not (isinstance(self.fit, dict) and all(isinstance(c, list) for c in self.fit.values())):
            raise UserError(f"profile {self.name}: [fit] maps stages to [a, alpha, beta]")
        if self.device not in ("", "cpu", "cuda"):
            raise UserError(f"profile {self.name}: device must be cpu or cuda (got {self.device!r})")
        if self.kind not in ("roofline", "fitted"):
            raise UserError(f"profile {self.name}: kind must be roofline or fitted (got {self.kind!r})")
        if self.kind == "roofline" and not (self.peak_flops > 0 and self.mem_bw > 0):
            raise UserError(f"profile {self.name}: a roofline profile needs peak_flops and mem_bw > 0")
        if self.kind == "fitted" and set(self.fit) != set(STAGES):
            raise UserError(f"profile {self.name}: a fitted profile needs [fit] {', '.join(STAGES)}")
        nums = [self.peak_flops, self.mem_bw, self.flops_efficiency, self.bw_efficiency,
                self.launch, self.sync, self.token, self.iteration, self.memory,
                *(v for c in self.fit.values() for v in c)]
        if not all(type(v) in (int, float) and math.isfinite(v) and v >= 0 for v in nums):
            raise UserError(f"profile {self.name}: every constant must be a finite number >= 0 "
                            "(true and false are not numbers)")
        for f in ("flops_efficiency", "bw_efficiency", "memory_util"):
            if not 0 < getattr(self, f) <= 1:
                raise UserError(f"profile {self.name}: {f} must be in (0, 1] (a fraction of the "
                                f"peak; got {getattr(self, f)!r})")
        if not all(len(c) == 3 for c in self.fit.values()):
            raise UserError(f"profile {self.name}: each [fit] stage is [a, alpha, beta]")
        free = [st for st, c in self.fit.items() if not any(c)]
        if free and not (self.launch or self.sync or self.token or self.iteration):
            raise UserError(f"profile {self.name}: [fit] {free[0]} is all zeros and the profile "
                            "has no host cost, so that stage would take no time and every rate "
                            "divide by zero; fit the profile again (serve-sim --calibrate)")

    def seconds(self, stage: str, flops: float, nbytes: float, syncs: int, tokens: int,
                host_extra: float = 0.0) -> float:
        host = self.launch + self.token * tokens + host_extra
        device = self.device_seconds(stage, flops, nbytes)
        return (max(host, device) if self.overlap else host + device) + self.sync * syncs

    def device_seconds(self, stage: str, flops: float, nbytes: float) -> float:
        """The device's part of a launch: fitted ``a + alpha FLOPs + beta bytes``, or the
        roofline's ``max(FLOPs / peak, bytes / bandwidth)`` at the stated efficiencies."""
        if self.kind == "fitted":
            a, alpha, beta = self.fit[stage]
            return a + alpha * flops + beta * nbytes
        return max(flops / (self.peak_flops * self.flops_efficiency),
                   nbytes / (self.mem_bw * self.bw_efficiency))

    def to_toml(self) -> str:
        d = asdict(self)
        fit = d.pop("fit")
        lines = [f"{k} = {json.dumps(v)}" for k, v in d.items()]
        if fit:
            lines += ["", "[fit]  # stage = [a seconds, alpha seconds/FLOP, beta seconds/byte]"]
            lines += [f"{k} = [{', '.join(repr(float(x)) for x in v)}]" for k, v in fit.items()]
        return "\n".join(lines) + "\n"


def load_profile(name_or_path: str) -> Profile:
    """A packaged profile (``h100``, ``h200``) or a profile TOML file (``serve-sim --calibrate``
    writes one for this machine)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            names = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.toml")))
            raise UserError(f"no hardware profile {name_or_path!r}; packaged: {names}, or a .toml file")
    try:
        d = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"profile {path} does not exist") from None
    except OSError as e:
        raise UserError(f"cannot read profile {path}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"profile {path} is not valid TOML: {e}") from None
    known = {f for f in Profile.__dataclass_fields__}
    unknown = sorted(set(d) - known)
    if unknown:
        raise UserError(f"profile {path}: unknown key(s) {', '.join(unknown)}; "
                        f"known: {', '.join(sorted(known))}")
    d.setdefault("name", path.stem)
    try:
        return Profile(**d)
    except TypeError as e:
        raise UserError(f"profile {path}: {e}") from None


# ---- the work of a launch ----------------------------------------------------------------------------
def stage_layers(cfg: ModelConfig | LoopShape, stage: str, max_depth: int) -> tuple[int, bool]:
    """(transformer layers a launch of ``stage`` runs, whether it reads out the head)."""
    s = shape_of(cfg)
    return {"prefill": (s.n_prelude + max_depth * s.n_core + s.n_coda, True),
            "start": (s.n_prelude, False), "core": (s.n_core, False),
            "finish": (s.n_coda, True)}[stage]


def stage_params(s: LoopShape, stage: str, max_depth: int) -> int:
    """Matmul parameters a token runs through in one launch of ``stage``."""
    return {"prefill": s.prelude_params + max_depth * s.core_params + s.coda_params + s.head_params,
            "start": s.prelude_params, "core": s.core_params,
            "finish": s.coda_params + s.head_params}[stage]


def stage_work(cfg: ModelConfig | LoopShape, stage: str, rows: int, tokens: int, L: int,
               max_depth: int, bytes_per_value: int, copies: int = 0, attention: bool = True,
               read: int | None = None) -> tuple[float, float]:
    """(FLOPs, bytes moved) of one launch; see the module docstring. ``cfg``: a model config or
    any looped model's shape (its stages' own parameters, attention at the query width, KV at
    the KV heads' width). ``read``: cached positions read per layer (default ``rows * L``, every
    row padded to the longest context); ``attention=False`` counts parameters only (the paper's
    convention)."""
    s = shape_of(cfg)
    read = rows * L if read is None else read
    if not attention:
        L = copies = read = 0
    n, _ = stage_layers(s, stage, max_depth)
    params = stage_params(s, stage, max_depth)
    per_token = read / max(rows, 1) * (tokens / max(rows, 1))   # positions each token attends
    flops = 2.0 * tokens * params + 4.0 * s.q_width * per_token * rows * n
    kv = s.kv_width
    values = params + 2.0 * kv * n * (read + tokens * (L > 0)) + 4.0 * kv * s.n_core * copies
    return flops, values * bytes_per_value


class ProfileCosts:
    """The simulator's price of a launch (``SimEngine._launch``) on ``profile``, for rows at
    contexts averaging ``read / rows``; a prefill of ``rows`` prompt tokens, ``prompt_len``
    each."""

    def __init__(self, shape, profile, max_depth: int, prompt_len: float, scale=None):
        self.shape, self.profile, self.max_depth = shape, profile, max_depth
        self.prompt_len = max(1.0, prompt_len)
        self.scale = scale or {}   # stage -> factor on the price (``leveled``)
        self.source = f"profile {profile.name}"

    def leveled(self, records) -> ProfileCosts:
        """These costs scaled by one factor so that the launches ``records`` (stage, rows,
        tokens, context, copies, seconds), measured beside the modes, cost in total what they
        took: a fitted profile's level set on a run measured beside the modes (the machine's
        speed drifts by 10% over minutes, every stage alike), its shape (per stage, per launch
        against per row) kept from the width sweep. One factor, not one per stage: a stage of a
        few launches (a prefill) would set its own level on noise."""
        p, measured, predicted = self.profile, 0.0, 0.0
        for stage, n, t, L, cp, dt in records:
            work = stage_work(self.shape, stage, n, t, L, self.max_depth, p.bytes_per_value, cp)
            measured, predicted = measured + dt, predicted + p.device_seconds(stage, *work)
        k = measured / predicted if predicted > 0 else 1.0
        out = ProfileCosts(self.shape, p, self.max_depth, self.prompt_len,
                           {s: k for s in ("prefill", "start", "core", "finish")})
        out.source = f"{self.source}, leveled on static's launches measured beside the modes: x{k:.3f}"
        return out

    def seconds(self, stage: str, rows: float, read: float, emitted: float | None = None) -> float:
        """A launch of ``rows`` rows reading ``read`` cached positions; a finish launch's host
        cost per token falls on the tokens it emits (``emitted``; default every row)."""
        return self.scale.get(stage, 1.0) * self._seconds(stage, rows, read, emitted)

    def _seconds(self, stage: str, rows: float, read: float, emitted: float | None) -> float:
        p = self.profile
        if stage == "prefill":   # rows / T prompts of T tokens
            T = self.prompt_len
            n = rows / T
            flops, nbytes = stage_work(self.shape, stage, n, rows, T, self.max_depth,
                                       p.bytes_per_value, 0, p.attention)
            return p.seconds(stage, flops, nbytes, 1, n)
        L = read / rows   # the positions a row reads, on average
        flops, nbytes = stage_work(self.shape, stage, rows, rows, L, self.max_depth,
                                   p.bytes_per_value, 0, p.attention, read if p.paged else None)
        tokens = (rows if emitted is None else emitted) if stage == "finish" else 0
        return p.seconds(stage, flops, nbytes, int(stage == "finish"), tokens,
                         p.iteration if stage == "core" else 0.0)


# ---- what fits in the profile's memory -----------------------------------------------------------
def kv_rows_that_fit(cfg: ModelConfig | LoopShape, profile: Profile, policy: str, max_depth: int,
                     max_len: int) -> int | None:
    """Resident requests whose KV (each reserved at ``max_len`` positions: a request is admitted
    only where its whole sequence fits, so none is ever preempted) fits beside the weights in
    ``memory_util`` of the profile's memory; None where the profile states no memory. Refuses,
    in one line, a model whose weights and one request do not fit."""
    per_row = kv_bytes(cfg, policy, max_depth, 1, max_len, profile.bytes_per_value)
    return _units_that_fit(cfg, profile, per_row, 1, max_len)


def kv_blocks_that_fit(cfg: ModelConfig | LoopShape, profile: Profile, policy: str,
                       max_depth: int, block_size: int, max_len: int) -> int | None:
    """Paged KV (``BlockPool``): blocks of ``block_size`` positions that fit beside the
    weights in ``memory_util`` of the profile's memory; None where the profile states no memory.
    Refuses, in one line, a model whose weights and the blocks of one request of ``max_len``
    positions do not fit."""
    per_block = kv_bytes(cfg, policy, max_depth, 1, block_size, profile.bytes_per_value)
    return _units_that_fit(cfg, profile, per_block, -(-max_len // block_size), max_len)


def _units_that_fit(cfg, profile: Profile, unit_bytes: int, one_request: int,
                    max_len: int) -> int | None:
    """KV units of ``unit_bytes`` that fit beside the weights (None: no memory stated), at least
    the ``one_request`` units a request of ``max_len`` positions needs, or a one-line refusal."""
    if not profile.memory:
        return None
    weights = weight_bytes(cfg, profile.bytes_per_value)
    free = profile.memory * profile.memory_util - weights
    units = int(free // unit_bytes) if free > 0 else 0
    if units < one_request:
        raise UserError(f"profile {profile.name}: the weights ({weights / 2**30:.1f} GiB) and one "
                        f"request's KV ({one_request * unit_bytes / 2**30:.2f} GiB at {max_len} "
                        f"positions) do not fit in {profile.memory_util:g} of its "
                        f"{profile.memory / 2**30:.0f} GiB; give shorter prompts or outputs, or a "
                        "smaller model")
    return units
