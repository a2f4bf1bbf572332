"""serve-sim: the real scheduler against a virtual clock and a cost model per stage launch.

``SimEngine`` has the engine's interface and host state (rows, positions, loop counters, exit
depths known at start) but no model: each launch advances a virtual clock by what a hardware
profile says it costs. The batching policies, admission, coda queue and every counter are the
real ``Scheduler``'s, so the simulated rows have the serve-bench schema.

Work of one launch (``stage_work``), for ``tokens`` new tokens over ``rows`` rows attending to
``L`` positions, with P = 4 d^2 + 2 d ff parameters per layer and ``n`` layers in the stage
(prefill: prelude + max_depth x core + coda; start: prelude; core: core; finish: coda):

    FLOPs = 2 tokens (n P + head) + 4 d L tokens n                  (matmuls + attention)
    bytes = b [ n P + head                                          (weights, read per launch)
              + 2 d n (rows L + tokens)                             (KV read, KV written)
              + 4 d n_core copies ]                                 (KV copied on exit)

with ``head`` = d V in the stages that read out (prefill, finish) and b bytes per value.
A profile prices it one of two ways:

    device     roofline: max(FLOPs / (peak eff_f), bytes / (bandwidth eff_b))  (GPU
               profiles, from public specifications);  fitted: per stage a + alpha FLOPs +
               beta bytes (non-negative least squares on this machine's own launch timers:
               ``serve-sim --calibrate``)
    host       launch + token x tokens emitted (+ ``iteration``, the scheduler's work per core
               launch)
    launch     max(host, device) with ``overlap`` (asynchronous launches: the host prepares the
               next launch while the device runs; exit depths known ahead need no read back),
               host + device without; plus sync x device-to-host reads

With every overhead zero and cost proportional to FLOPs the simulated speedup equals the
paper-convention bound exactly (tests check it). Simulating imports no torch (the scheduler,
the executor interface and the comparison are torch-free); only ``--calibrate``, which runs the
real engine, needs it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from depthbench.config import MODES, LoopShape, ModelConfig, SimConfig, copies_on_exit
from depthbench.errors import UserError
from depthbench.exits import ExitCriterion, replay_file
from depthbench.serving.bound import withheld_reason
from depthbench.serving.executor import Clock, HostState
from depthbench.serving.memory import BlockPool, kv_bytes
from depthbench.serving.profile import (
    Profile,
    ProfileCosts,
    kv_blocks_that_fit,
    kv_rows_that_fit,
    load_profile,
    stage_work,
)
from depthbench.serving.result import Comparison


class VirtualClock:
    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def wait_until(self, t: float) -> None:
        self.t = max(self.t, t)


class SimEngine(HostState):
    """The engine's interface, priced by ``profile`` on a virtual clock (tokens are all 0)."""

    def __init__(self, cfg: ModelConfig | LoopShape, criterion: ExitCriterion, kv_policy: str, n_rows: int,
                 max_len: int, profile: Profile, record: bool = False, clock: Clock | None = None,
                 n_prompt_slots: int = 0, blocks: BlockPool | None = None):
        if not criterion.known_in_advance:
            raise UserError(f"serve-sim needs exit depths known in advance, not {criterion.kind}")
        super().__init__(criterion, n_rows, record, clock or VirtualClock(), n_prompt_slots)
        self.cfg, self.kv_policy, self.profile = cfg, kv_policy, profile
        self.device_type = profile.device_type
        self.blocks = blocks
        # KV memory: paged, the most blocks held at once; else every row at its whole length
        self._kv_unit = (kv_bytes(cfg, kv_policy, self.max_depth, 1, blocks.block_size,
                                  profile.bytes_per_value) if blocks else
                         kv_bytes(cfg, kv_policy, self.max_depth, n_rows, max_len,
                                  profile.bytes_per_value))

    @property
    def kv_nbytes(self) -> int:
        return self._kv_unit * (self.blocks.peak if self.blocks else 1)

    def _launch(self, stage, rows, tokens, L, syncs=0, emitted=0, copies=0, read=None,
                prompt_tokens=0) -> None:
        p = self.profile
        if not p.paged:
            read = None
        flops, nbytes = stage_work(self.cfg, stage, rows, tokens, L, self.max_depth,
                                   p.bytes_per_value, copies, p.attention, read)
        dt = p.seconds(stage, flops, nbytes, syncs, emitted,
                       p.iteration if stage == "core" else 0.0)
        self.clock.t += dt
        self.stats.syncs += syncs
        self._log(stage, dt, rows, tokens, L, copies, prompt_tokens)

    def prefill(self, rows: list[int], prompts: list[list[int]]) -> list[int]:
        lens = [len(q) for q in prompts]
        self._launch("prefill", len(rows), len(rows) * max(lens), max(lens), syncs=1,
                     emitted=len(rows))
        self.pos_h[rows] = lens
        self.stats.prefills += len(rows)
        return [0] * len(rows)

    def _read(self, rows: list[int]) -> int:
        return int(self.pos_h[rows].sum()) + len(rows)

    def start(self, items: list[int], tokens: list[int], depths: list[int] | None = None) -> None:
        self._launch("start", len(items), len(items), self.context(items), read=self._read(items),
                     prompt_tokens=self.n_prompt(items))
        self._set_target(items, depths)

    def core(self, items: list[int]) -> list[int]:
        self._launch("core", len(items), len(items), self.context(items), read=self._read(items),
                     prompt_tokens=self.n_prompt(items))
        self.stats.core_rows += len(items)
        return self._known_exits(items)

    def finish(self, items: list[int]) -> tuple[list[int], list[int]]:
        depths = self.loop_h[items].tolist()
        copies = copies_on_exit(self.kv_policy, self.max_depth, depths)
        n_prompt = self.n_prompt(items)
        # a prompt token's coda fills its caches; of prompt tokens only a prompt's last emits
        # (its request's first token)
        firsts = sum(1 for i in items if i >= self.n_rows
                     and self.pos_h[i] == self.pos_h[self.row_h[i]] - 1)
        self._launch("finish", len(items), len(items), self.context(items), syncs=1,
                     emitted=len(items) - n_prompt + firsts, copies=copies,
                     read=self._read(items), prompt_tokens=n_prompt)
        self.advance(items)
        return [0] * len(items), depths


def simulate(cfg: SimConfig, profile: Profile, mcfg: ModelConfig | None = None) -> Comparison:
    """Every mode of ``cfg`` on ``profile``: serve-bench's result (rows, bounds, speedups)."""
    from depthbench.serving.batching import Batching
    from depthbench.serving.compare import compare_modes
    from depthbench.serving.workload import workload
    if mcfg is None and cfg.model:
        from depthbench.loading import load_shape
        mcfg = load_shape(cfg.model)
    mcfg = mcfg or cfg.model_config()
    b = Batching.of(cfg).resolved(profile.device_type, cfg.requests)
    crit = cfg.criterion
    reqs = workload(cfg, vocab_size=mcfg.vocab_size)
    crit.check_covers([q.id for q in reqs])
    max_len = max(len(q.prompt) + q.max_new_tokens for q in reqs) + 1

    # the KV that fits beside the weights: paged (``kv_block``), the blocks every mode admits
    # and preempts by; else the resident requests, each reserved at its whole length, that
    # every mode admits at most (its pool is the engine's rows), whatever its knobs ask
    if cfg.kv_block:
        fit, n_blocks = None, kv_blocks_that_fit(mcfg, profile, cfg.kv_policy, cfg.max_depth,
                                                 cfg.kv_block, max_len)
    else:
        fit = kv_rows_that_fit(mcfg, profile, cfg.kv_policy, cfg.max_depth, max_len)
        n_blocks = None

    def engines(mode, c):
        rows = c.rows(mode) if fit is None else min(c.rows(mode), fit)
        return lambda clock=None: SimEngine(
            mcfg, crit, cfg.kv_policy, rows, max_len, profile, clock=clock,
            n_prompt_slots=c.prompt_slots(mode),
            blocks=BlockPool(n_blocks, cfg.kv_block) if n_blocks else None)

    sim = cfg.replace(warmup_requests=0)   # a virtual clock has nothing to warm up
    costs = ProfileCosts(mcfg, profile, cfg.max_depth, float(cfg.prompt_len))
    res = compare_modes(engines, mcfg, reqs, sim, b, cfg.prompt_len + (cfg.max_new_tokens or 32),
                        costs).withheld(withheld_reason(None, cfg.rate, b.concurrency, b.width))
    return replace(res, kv_rows_fit=fit,
                   results=[replace(r, kv_rows_fit=fit) for r in res.results])


# ---- the serve-sim stage -------------------------------------------------------------------------
def sweep_png(points: list[dict], title: str) -> bytes:
    """Speedup over static vs mean exit depth, one line per mode, against the bound (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    pts = sorted(points, key=lambda r: r["mean_depth"])
    bound = {}
    full_depth = ("full_depth", *(m for m, mode in MODES.items() if not mode.exits))
    for r in pts:
        if r["mode"] not in full_depth and r["bound"] is not None:
            bound.setdefault(r["trace_mean"], (r["mean_depth"], r["bound"]))
    xb, yb = zip(*sorted(bound.values())) if bound else ((), ())
    ax.plot(xb, yb, "k--", label="bound (the ideal time of the work)")
    for mode in dict.fromkeys(r["mode"] for r in pts if r["mode"] not in full_depth):
        mine = [r for r in pts if r["mode"] == mode]
        ax.plot([r["mean_depth"] for r in mine], [r["speedup"] for r in mine], "o-", label=mode)
    ax.set_xlabel("mean exit depth (decoded tokens)")
    ax.set_ylabel("throughput / full-depth serving")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    import io
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()


def latency_png(points: list[dict], title: str) -> bytes:
    """A rate sweep's latency against throughput, one line per mode (the serving engineer's
    curve): time to first token and time per output token, p50 (solid) and p99 (dashed), against
    output tokens/s (PNG)."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, mode in enumerate(dict.fromkeys(r["mode"] for r in points)):
        mine = sorted((r for r in points if r["mode"] == mode), key=lambda r: r["rate"] or 1e18)
        x = [r["tokens_per_s"] for r in mine]
        for ax, key in zip(axes, ("ttft_ms", "tpot_ms")):
            color = f"C{i}"
            ax.plot(x, [r[key]["p50"] for r in mine], "o-", color=color, label=f"{mode} p50")
            ax.plot(x, [r[key]["p99"] for r in mine], "s--", color=color, label=f"{mode} p99")
    for ax, what in zip(axes, ("time to first token (ms)", "time per output token (ms)")):
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(what)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(title + " (one point per request rate)", fontsize=9)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()


def sweep_points(cfg: SimConfig, profile: Profile, shape, log=None) -> tuple[list, list]:
    """Every point of the run's sweep simulated: trace means at the configured rate
    (``cfg.means``), or request rates at one exit (``cfg.rates``), or the one exit and rate;
    (serve rows, per-mode results with their exit, rate and trace mean)."""
    from depthbench.rows import tag_rows
    points = ([(cfg.exit, r) for r in cfg.rates] if cfg.rates else
              [(f"trace:{m:g}", cfg.rate) for m in cfg.means] or [(cfg.exit, cfg.rate)])
    rows, results = [], []
    for spec, rate in points:
        res = simulate(cfg.replace(exit=spec, rate=rate), profile, shape)
        keys = dict(source=f"sim:{profile.name}", run=cfg.model or f"random:{cfg.random}", schedule=None,
                    exit=spec, kv_policy=cfg.kv_policy, width=cfg.width, lookahead=cfg.lookahead,
                    rate=rate, profile=profile.name)
        rows += tag_rows(res.rows(**keys), cfg.tags)
        for r in res.results:
            results.append({**r.to_dict(), "exit": spec, "rate": rate,
                            "trace_mean": float(spec.partition(":")[2]) if cfg.means else None})
        if log:
            log(f"  {spec}" + (f" at {rate:g} requests/s" if cfg.rates else "") + " done")
    fit = next((r["kv_rows_fit"] for r in results if r.get("kv_rows_fit")), None)
    if log and fit is not None and fit < max(cfg.pool, cfg.width, 1) and fit < cfg.requests:
        log(f"KV: {fit} resident requests fit in {profile.memory_util:g} of {profile.name}'s "
            f"memory beside the weights (each reserved at its whole length); every mode admits "
            "at most that many")
    preempted = {r["mode"]: r["preemptions"] for r in results if r.get("preemptions")}
    if log and preempted:
        blocks = next(r["kv_blocks"] for r in results if r.get("kv_blocks"))
        log(f"KV: {blocks} blocks of {cfg.kv_block} positions fit in {profile.memory_util:g} of "
            f"{profile.name}'s memory beside the weights; preemptions (recomputed): "
            + ", ".join(f"{m} {n}" for m, n in preempted.items()))
    return rows, results


def run_sim(cfg: SimConfig, log=None) -> dict:
    """The serve-sim stage: with ``cfg.calibrate``, measure this machine and write a fitted
    profile there; otherwise simulate every mode on ``cfg.profile`` (and each trace mean of
    ``cfg.means``), write ``serve`` rows to ``cfg.out`` and the sweep plot."""
    from depthbench.fsio import atomic_write_many, atomic_write_text
    from depthbench.rows import row_files, row_paths

    if cfg.calibrate:
        if cfg.model:
            raise UserError("--calibrate measures this machine on a random model of --random's "
                            "shape; leave --model out (a fitted profile prices any shape)")
        if Path(cfg.calibrate).is_dir():
            raise UserError(f"--calibrate {cfg.calibrate} is a directory; give a .toml file")
        from depthbench.serving.calibrate import calibrate
        prof, info = calibrate(cfg, log)
        atomic_write_text(Path(cfg.calibrate), prof.to_toml())  # makes the parents only now
        return {"profile": str(cfg.calibrate), "r2": info["r2"], "rows": [], "results": []}
    profile = load_profile(cfg.profile)
    from depthbench.fsio import refuse_over_inputs
    replay = replay_file(cfg.exit)
    outs = [*(row_paths(cfg.out) if cfg.out else ()), *([Path(cfg.plot)] if cfg.plot else [])]
    from depthbench.loading import load_shape, parse_spec
    spec = parse_spec(cfg.model) if cfg.model else None
    refuse_over_inputs(outs, inputs=[p for p in (cfg.profile, replay) if p and Path(p).suffix],
                       checkpoint=spec and spec.folder)
    shape = load_shape(spec) if spec else None   # read before anything is printed
    if log:
        log(f"profile {profile.name}: {profile.source}")
    rows, results = sweep_points(cfg, profile, shape, log)
    out = {"rows": rows, "results": results, "profile": profile.name,
           "bound_note": next((r["bound_note"] for r in results if r.get("bound_note")), "")}
    files = {}  # every output, written together
    if cfg.out:
        files = row_files(rows, cfg.out, "serve")
        out["csv"], out["jsonl"] = files
    swept = cfg.means or cfg.rates
    plot = cfg.plot or (str(Path(cfg.out).with_suffix(".png")) if cfg.out and swept else "")
    if plot and swept:
        title = (f"serve-sim {profile.name}: {cfg.model or cfg.random}, width {cfg.width}, kv "
                 f"{cfg.kv_policy}, max depth {cfg.max_depth}" + (f", exit {cfg.exit}" if cfg.rates else ""))
        files[Path(plot)] = latency_png(results, title) if cfg.rates else sweep_png(results, title)
        out["plot"] = plot
    atomic_write_many(files)
    return out
