"""What one batching mode measured over a workload (``ModeResult``) and its bound and speedups
(``Bounds``), as values: ``serving.compare`` returns them, the serve columns and the JSON record
are derived from them (``ModeResult.row``, ``ModeResult.to_dict``). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

# nested readings and the serve columns they flatten to: {"p50": x} -> ttft_p50_ms = x
FLAT = {"ttft_ms": "ttft_{}_ms", "itl_ms": "itl_{}_ms", "tpot_ms": "tpot_{}_ms",
        "e2e_ms": "e2e_{}_ms", "norm_latency_ms": "norm_latency_{}_ms", "time_split": "time_{}",
        "launches_per_token": "launches_per_token_{}",
        "ideal_launches_per_token": "ideal_launches_per_token_{}"}


@dataclass(frozen=True)
class Bounds:
    """A mode's bound and speedups (``bound.mode_bounds``): ``ideal_s`` is the ideal time of
    the work it did (T*), ``fraction`` = T* / its whole-run seconds, ``speedup`` over full-depth
    serving at its best knobs, ``bound`` = speedup / fraction (its speedup at T*), the FLOP
    ceiling and the paper's eq. 1 estimate on its own depths. ``ideal_s``, ``fraction`` and
    ``bound`` are None where the bound is withheld (``withheld``)."""
    ideal_s: float | None
    ideal_launches_per_token: dict
    fraction: float | None
    speedup: float
    bound: float | None
    speedup_vs_static: float
    ceiling: float
    fraction_of_ceiling: float
    fraction_of_gain: float | None
    decode_speedup: float
    decode_fraction_of_ceiling: float
    paper_bound: float
    paper_fraction: float

    def withheld(self) -> Bounds:
        return replace(self, ideal_s=None, fraction=None, bound=None)


@dataclass(frozen=True)
class ModeResult:
    """One mode's run: throughput, latencies (``compare.latencies``: nested percentiles and the
    request rates), exit depths, launches, padding, KV, recall, the time split by stage and the
    steady-state window; once compared, its ``bounds``, the ``knobs`` it ran with (width and
    ``batching.KNOBS``), why a bound is withheld (``bound_note``) and, for full-depth serving, the
    candidate that ``baseline`` names. ``records``: the engine's launches, where it records them
    (not part of the result's record)."""
    mode: str
    wall_s: float
    output_tokens: int
    tokens_per_s: float
    prefill_s: float
    decode_tokens_per_s: float
    latency: dict
    mean_depth: float
    depth_histogram: list
    core_launches: int
    rows_per_launch: float
    padding_waste: float
    exact_match: float | None
    kv_cache_mb: float
    kv_blocks: int | None
    kv_peak_blocks: int | None
    preemptions: int
    time_split: dict
    launches_per_token: dict
    host_syncs: int
    steady_tokens_per_s: float | None
    steady_window_s: float | None
    records: list | None = field(default=None, repr=False, compare=False)
    baseline: str | None = None
    bounds: Bounds | None = None
    knobs: dict = field(default_factory=dict)
    bound_note: str | None = None
    # the simulator's whole-length KV reservation: resident requests that fit (None: paged KV,
    # or a measured engine, whose rows are its pool)
    kv_rows_fit: int | None = None

    def withheld(self, reason: str | None) -> ModeResult:
        """This result with ``bound_note`` = ``reason`` ("" for none) and, where there is a
        reason, no bound, fraction or ideal time."""
        bounds = self.bounds.withheld() if reason and self.bounds else self.bounds
        return replace(self, bound_note=reason or "", bounds=bounds)

    def to_dict(self) -> dict:
        """The result's record: every reading by name, in field order, the latencies and the
        knobs spread in, then the bounds (those withheld: None)."""
        skip = {"records"} | ({"baseline"} if self.baseline is None else set()) | (
            {"bound_note"} if self.bound_note is None else set())
        d = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in skip:
                continue
            if f.name in ("latency", "knobs"):
                d.update(v)
            elif f.name == "bounds":
                d.update({g.name: getattr(v, g.name) for g in fields(Bounds)} if v else {})
            else:
                d[f.name] = v
        return d

    def row(self, **keys) -> dict:
        """The mode's serve row: grouping ``keys``, then every scalar reading, then the nested
        ones flattened (``FLAT``)."""
        d = self.to_dict()
        row = {**keys, **{k: v for k, v in d.items() if not isinstance(v, (dict, list))}}
        for name, fmt in FLAT.items():
            row.update({fmt.format(k): v for k, v in d[name].items()})
        return row



@dataclass(frozen=True)
class Comparison:
    """Every mode of one workload compared (``compare.compare_modes``): each mode's result
    (``results``, full-depth serving at its best knobs among them as ``full_depth``), the
    configuration and exit criterion they ran at, whether the adaptive modes emitted the same
    tokens, the FLOP model's per-layer costs (``f0``, ``fr``), the full-depth candidate chosen
    (``baseline``) among those priced (``baseline_candidates``: tokens/s each), where the bound's
    costs came from (``costs``) and, kept out of the record, every mode's emitted tokens and per-
    request exit depths. Where it came from adds its own: serve-bench the profile it fitted
    (TOML) and how well it fits (``fit_r2``, ``fit_error``); serve-sim the resident requests its
    KV holds (``kv_rows_fit``). ``bound_note``: why the bounds are withheld ("" where kept)."""
    config: dict
    exit: str
    results: list[ModeResult]
    adaptive_modes_agree: bool | None
    f0: float
    fr: float
    baseline: str
    baseline_candidates: dict
    costs: str
    outputs: dict = field(repr=False)
    depth_traces: dict = field(repr=False)
    profile: str | None = None
    fit_r2: dict | None = None
    fit_error: dict | None = None
    bound_note: str = ""
    kv_rows_fit: int | None = None

    def withheld(self, reason: str | None) -> Comparison:
        """This comparison with ``bound_note`` = ``reason`` on it and on each result
        (``ModeResult.withheld``): where there is a reason, no mode has a bound or fraction."""
        return replace(self, bound_note=reason or "",
                       results=[r.withheld(reason) for r in self.results])

    def rows(self, **keys) -> list[dict]:
        """Flat serve rows (one per mode, ``ModeResult.row``), led by ``keys``."""
        return [r.row(**keys) for r in self.results]

    def record(self, **extra) -> dict:
        """The JSON record: every field but the tokens and depth traces, each result by
        ``ModeResult.to_dict``, what only the simulator has left out where unset, then
        ``extra``."""
        skip = {"outputs", "depth_traces"} | ({"kv_rows_fit"} if self.kv_rows_fit is None else set())
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        d["results"] = [r.to_dict() for r in self.results]
        return {**d, **extra}
