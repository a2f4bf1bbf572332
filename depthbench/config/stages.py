"""The configs of the stages after training: the depth sweep, the update probe, serving
(measured and simulated) and the report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from depthbench.config.base import ConfigError, PlainConfig, require
from depthbench.config.model import MODEL_PRESETS, kv_layout
from depthbench.config.train import DEVICES
from depthbench.data_gen import GenConfig
from depthbench.data_gen.format import SPLITS
from depthbench.errors import UserError
from depthbench.schedules import MAX_DEPTH, parse_depths

# ---- stage configs ------------------------------------------------------------------------------
EVAL_SPLITS = SPLITS[1:]


@dataclass(frozen=True)
class Mode:
    """A batching mode: what the scheduler reads of it, in one table (``MODES``; what each mode
    is: ``serving.scheduler``'s docstring)."""
    name: str
    exits: bool          # tokens exit at their own depth (else every token runs max_depth)
    pooled: bool         # run by the continuous-depth-batching policy: a resident pool of
                         # rows, coda batching, chunked prefill
    one_row: bool = False   # one request at a time


MODES = {m.name: m for m in (
    Mode("static", exits=False, pooled=True),
    Mode("no_refill", exits=True, pooled=False),
    Mode("batch1", exits=True, pooled=False, one_row=True),
    Mode("cdb", exits=True, pooled=True),
    Mode("static_lockstep", exits=False, pooled=False),
)}
SERVE_MODES = tuple(MODES)


DEFAULT_SERVE_MODES = ("static", "no_refill", "batch1", "cdb")


def depths_ok(spec: str, name: str) -> None:
    try:
        parse_depths(spec)
    except UserError as e:
        raise ConfigError(f"{name}: {e}") from None


def one_of(value, choices, name: str) -> None:
    require(value in choices, name, f"must be one of {', '.join(choices)} (got {value!r})")


@dataclass(frozen=True, kw_only=True)
class GenerateJob(PlainConfig):
    """A synthetic dataset written to ``out`` from the generator's config (``dataset``, a table
    of ``data_gen.GenConfig``'s keys): ``data.generate.generate``."""
    out: str
    dataset: GenConfig

    def __post_init__(self):
        self._check_types()
        require(bool(self.out), "out", "must name the dataset directory")

    @classmethod
    def from_dict(cls, d: dict):
        d = dict(d)
        if isinstance(d.get("dataset"), dict):
            try:
                d["dataset"] = GenConfig.from_dict(d["dataset"])
            except (ValueError, TypeError) as e:
                raise ConfigError(f"dataset: {e}") from None
        return super().from_dict(d)

    def to_dict(self) -> dict:
        """The generator's own table (its manifest's spelling), so a stage's key is its dataset's."""
        return json.loads(json.dumps({"out": self.out, "dataset": self.dataset.to_dict()}))


@dataclass(frozen=True, kw_only=True)
class PrepareTextConfig(PlainConfig):
    """A text corpus tokenized into a dataset at ``out``: ``data.corpus.prepare_text`` (the
    settings checked here; the corpus itself where it is read)."""
    out: str
    corpus: tuple[str, ...]
    vocab_size: int = 0            # train a byte-level BPE of this size, or
    tokenizer: str = ""            # read this tokenizer.json
    val_fraction: float = 0.01
    seed: int = 0
    seq_len: int = 128

    def __post_init__(self):
        self._check_types()
        require(bool(self.out), "out", "must name the dataset directory")
        require(bool(self.corpus), "corpus", "must name at least one input")
        require(bool(self.vocab_size) != bool(self.tokenizer), "vocab_size",
                "give either vocab_size (--vocab-size N: train a byte-level BPE) or tokenizer "
                "(--tokenizer tokenizer.json)")
        require(not self.vocab_size or 260 <= self.vocab_size <= 2 ** 20, "vocab_size",
                f"must be between 260 (the 256 bytes and a few merges) and 1048576 "
                f"(got {self.vocab_size})")
        require(0 < self.val_fraction < 1, "val_fraction",
                f"must be strictly between 0 and 1 (got {self.val_fraction:g})")
        require(8 <= self.seq_len <= 65536, "seq_len", f"must be between 8 and 65536 (got {self.seq_len})")
        require(0 <= self.seed <= 2**32 - 1, "seed", "must be between 0 and 4294967295")


@dataclass(frozen=True, kw_only=True)
class EvalConfig(PlainConfig):
    """A serving-depth sweep of one checkpoint: ``evaluate.run_eval(cfg)``."""
    run: str = ""                  # run directory or checkpoint file
    model: str = ""                # or another looped model: ouro:DIR, huginn:DIR, hf:DIR
    data: str = ""                 # dataset directory ("": the one the run records)
    depths: str = "1-16"           # serving depths, e.g. 1-16 or 1,4,16
    splits: tuple[str, ...] = ()   # (): every eval split
    checkpoint: int | None = None  # step (None: the latest)
    batch_size: int = 64           # rows a batch (the fastest on a CPU: bench_eval.py; GPU
                                   # specs set more)
    max_people: int | None = None  # only the first N people of each split
    out: str = ""                  # result file base ("": RUN/eval/step_NNNNNNN)
    device: str = "auto"
    harness: str = "native"        # native | lm-eval (through lm_eval.simple_evaluate)
    tasks: tuple[str, ...] = ()    # a text run through lm-eval: these tasks at every depth
    task_path: str = ""            # a folder of further lm-eval task YAMLs
    tags: dict = field(default_factory=dict)

    def __post_init__(self):
        self._check_types()
        depths_ok(self.depths, "depths")
        require(bool(self.run) != bool(self.model), "run",
                "give one model: a RUN directory (or checkpoint) or --model SPEC")
        require(not (self.model and self.checkpoint is not None), "checkpoint",
                "picks a step of a depthbench run; a --model checkpoint folder has one set of weights")
        require(not self.tasks or self.harness == "lm-eval", "tasks", "need --harness lm-eval")
        for s in self.splits:
            one_of(s, EVAL_SPLITS, "splits")
        object.__setattr__(self, "splits", tuple(dict.fromkeys(self.splits)))  # each split once
        one_of(self.device, DEVICES, "device")
        one_of(self.harness, ("native", "lm-eval"), "harness")
        require(1 <= self.batch_size <= 1 << 20, "batch_size", "must be in 1..1048576")
        require(self.max_people is None or self.max_people >= 1, "max_people", "must be >= 1")
        require(self.checkpoint is None or self.checkpoint >= 0, "checkpoint", "must be >= 0")


@dataclass(frozen=True, kw_only=True)
class ProbeConfig(PlainConfig):
    """The update-benefit probe of one checkpoint: ``probe.run_probe(cfg)``."""
    run: str
    checkpoint: int | None = None
    depth_a: int = 4
    depth_b: int = 16
    depths: str = "1-16"           # serving depths the NLL difference is read at
    batches: int = 8               # training batches averaged over (>= 2, for a CI)
    max_people: int = 256          # people of eval_reordered the NLL is measured on
    seed: int = 0
    lr: float | None = None        # None (or 0): the run's next LR (its peak LR after a full decay)
    out: str = ""                  # result file base ("": RUN/probe/step_N_A_vs_B)
    device: str = "auto"
    tags: dict = field(default_factory=dict)

    def __post_init__(self):
        self._check_types()
        depths_ok(self.depths, "depths")
        for f in ("depth_a", "depth_b"):
            require(1 <= getattr(self, f) <= MAX_DEPTH, f, f"must be in 1..{MAX_DEPTH}")
        require(2 <= self.batches <= 1 << 16, "batches", "must be in 2..65536")
        require(1 <= self.max_people <= 1 << 30, "max_people", "must be >= 1")
        require(self.lr is None or 0 <= self.lr <= 1, "lr",
                "must be in [0, 1] (0 or none: the run's own next LR at the checkpoint)")
        if self.lr == 0:
            object.__setattr__(self, "lr", None)
        require(self.checkpoint is None or self.checkpoint >= 0, "checkpoint", "must be >= 0")
        require(0 <= self.seed <= 2**32 - 1, "seed", "must be in 0..2**32-1")
        one_of(self.device, DEVICES, "device")


@dataclass(frozen=True, kw_only=True)
class ServeConfig(PlainConfig):
    """A serving benchmark, every batching mode on one workload: ``serving.bench.run_bench``."""
    run: str = ""                  # run directory or checkpoint (or random)
    random: str = ""               # a random-weight model of this model preset instead
    model: str = ""                # or any looped model: ouro:DIR, huginn:DIR, hf:DIR (depthbench.loading)
    model_set: dict = field(default_factory=dict)  # model config overrides of random
    data: str = ""                 # workload dataset ("": the run's)
    modes: tuple[str, ...] = DEFAULT_SERVE_MODES
    exit: str = "latent:0.05"
    kv_policy: str = "depth_indexed"
    width: int = 64                # rows per core launch at most
    pool: int = 0                  # cdb: requests resident at once (0: the device's default,
                                   # batching.knob_defaults; GPU width + min_coda_batch)
    requests: int = 256
    rate: float = 0.0              # requests/s (Poisson arrivals); 0: all at t = 0 (offline)
    concurrency: int = 0           # a closed loop: at most this many requests in flight, each
                                   # sent when an earlier one finishes (0: no cap)
    slo_ttft_ms: float = 0.0       # goodput: requests within both SLOs per second (0: no SLO)
    slo_tpot_ms: float = 0.0
    max_new_tokens: int = 0        # 0: the rest of the dataset sequence (or 32 for random prompts)
    prompt_len: int = 8            # prompt length of random
    length_spread: float = 0.0     # random: new tokens per request vary by +-this fraction
    min_depth: int = 1
    max_depth: int = 16
    lookahead: bool = False        # exit decisions one loop ahead
    admit_min: int = 0             # free rows needed to admit while busy (0: GPU width/8, CPU 3w/4)
    min_coda_batch: int = 0        # cdb: exited tokens that wait before the coda runs (0: GPU w/2,
                                   # CPU 3w/2)
    coda_wait: int = 0             # cdb: core launches the oldest exited token waits at most (0:
                                   # GPU 4, CPU 16)
    prefill_chunk: int = -1        # cdb, static: prompt tokens in core launches at once (chunked
                                   # prefill); 0: each admission's prompts in a prefill launch;
                                   # -1 (auto): the device's default (0 on every
                                   # device: benchmarks/chunk_default.py)
    seed: int = 0
    warmup_requests: int = 4
    interleave: bool = True        # CPU: the modes measured side by side, a step of each in turn
    device: str = "auto"
    out: str = ""                  # result file base ("": no file)
    save_trace: str = ""           # write the cdb mode's exit depths as a replay trace
    stop_at_eos: bool = False      # dataset/text workloads stop at EOS (default: the same token
                                   # count in every mode, EOS ignored)
    tags: dict = field(default_factory=dict)

    def __post_init__(self):
        self._check_types()
        require(bool(self.modes), "modes", "must name at least one mode")
        for m in self.modes:
            one_of(m, SERVE_MODES, "modes")
        twice = sorted({m for m in self.modes if self.modes.count(m) > 1})
        require(not twice, "modes", f"names {', '.join(twice)} twice; name each mode once")
        try:
            kv_layout(self.kv_policy, self.max_depth)
        except ConfigError as e:
            raise ConfigError(f"kv_policy: {e}") from None
        one_of(self.device, DEVICES, "device")
        for f, hi in (("width", 1 << 16), ("requests", 1 << 20), ("min_depth", MAX_DEPTH),
                      ("max_depth", MAX_DEPTH), ("prompt_len", 1 << 16)):
            require(1 <= getattr(self, f) <= hi, f, f"must be in 1..{hi} (got {getattr(self, f)})")
        for f, hi in (("max_new_tokens", 1 << 16), ("admit_min", 1 << 16), ("pool", 1 << 16),
                      ("min_coda_batch", 1 << 16), ("coda_wait", 1 << 16),
                      ("warmup_requests", 1 << 16), ("seed", 2**32 - 1)):
            require(0 <= getattr(self, f) <= hi, f, f"must be in 0..{hi} (got {getattr(self, f)})")
        require(-1 <= self.prefill_chunk <= 1 << 16, "prefill_chunk",
                f"must be -1 (auto: the device's default) or in 0..{1 << 16} "
                f"(got {self.prefill_chunk})")
        require(self.max_new_tokens != 1, "max_new_tokens",
               "must be 0 (the dataset's sequence) or at least 2: the first token comes from the "
               "prompt's forward, so 1 leaves no decode step to batch or exit early")
        require(0 <= self.rate <= 1e9, "rate", "must be in [0, 1e9]")
        require(0 <= self.concurrency <= 1 << 20, "concurrency",
                "must be in 0..1048576 (0: no cap on requests in flight)")
        for f in ("slo_ttft_ms", "slo_tpot_ms"):
            require(0 <= getattr(self, f) <= 1e9, f, "must be in [0, 1e9] milliseconds (0: none)")
        require(not self.pool or self.pool >= self.width, "pool",
                f"must be 0 (the device's default) or at least width={self.width}: a pool of "
                f"{self.pool} resident requests never fills a core launch of {self.width} rows, "
                "so the record would name a width that did not run")
        require(0 <= self.length_spread < 1, "length_spread", "must be in [0, 1)")
        require(self.min_depth <= self.max_depth, "min_depth", "must be <= max_depth")
        if self.random:
            one_of(self.random, tuple(MODEL_PRESETS), "random")
        require(not self.model_set or bool(self.random), "model_set", "only applies to random")
        from depthbench.exits import parse_exit
        try:   # parsed once, here (a replay trace is read once), or says why not
            crit = parse_exit(self.exit, self.min_depth, self.max_depth, self.lookahead, self.seed)
        except UserError as e:
            raise ConfigError(f"exit: {e}") from None
        object.__setattr__(self, "_criterion", crit)

    @property
    def criterion(self):
        """The exit criterion (``exits.ExitCriterion``) that ``exit`` and the depth knobs name:
        parsed where the config enters, for every stage that serves."""
        return self._criterion


@dataclass(frozen=True, kw_only=True)
class SimConfig(ServeConfig):
    """A simulated serving benchmark (``serving.sim.run_sim``): the serve-bench workload and
    scheduler knobs on a random-shaped model, priced by a hardware profile instead of run."""
    exit: str = ""                 # trace, replay or fixed ("": the first of means, or a trace
                                   # of mean (1 + max_depth) / 2)
    profile: str = "h100"          # packaged profile name (h100, h200) or a profile TOML
    means: tuple[float, ...] = ()  # sweep these trace means (speedup vs mean depth, plotted)
    rates: tuple[float, ...] = ()  # sweep these request rates (latency against throughput,
                                   # plotted); 0 in the list: every request at t = 0
    plot: str = ""                 # the sweep's PNG ("": OUT.png when out is given)
    calibrate: str = ""            # measure this machine and write a fitted profile here instead
    calibrate_widths: tuple[int, ...] = (16, 64)
    kv_block: int = 16             # paged KV: positions per block of the profile's memory, which
                                   # requests are admitted and preempted by (vLLM's default 16);
                                   # 0: each request reserved at its whole length, never preempted

    def __post_init__(self):
        if not self.exit and self.means and isinstance(self.means[0], (int, float)) \
                and isinstance(self.max_depth, int):   # said as a mean, not as the exit it makes
            require(1 <= self.means[0] <= self.max_depth, "means",
                    f"must be in [1, max_depth={self.max_depth}] (got {self.means[0]:g})")
        if not self.exit:
            mean = self.means[0] if self.means else (1 + self.max_depth) / 2
            object.__setattr__(self, "exit", f"trace:{mean:g}")
        super().__post_init__()
        require(bool(self.random) != bool(self.model), "random",
                "serve-sim needs one model shape: --random PRESET or --model SPEC")
        require(not self.run, "run", "serve-sim runs no checkpoint; give --random PRESET or "
                "--model SPEC (its shape is read from the config)")
        kind = self.exit.partition(":")[0]
        require(kind in ("trace", "replay", "fixed"), "exit",
               "serve-sim needs exit depths known in advance: trace:MEAN, replay:FILE or fixed:K")
        for m in self.means:
            require(1 <= m <= self.max_depth, "means",
                    f"must be in [1, max_depth={self.max_depth}] (got {m:g})")
        for r in self.rates:
            require(0 <= r <= 1e9, "rates", f"must be in [0, 1e9] requests/s (got {r:g})")
        require(not (self.rates and self.means), "rates",
                "sweeps request rates at one exit; give --means or --rates, not both")
        require(len(set(self.rates)) == len(self.rates), "rates", "must not repeat")
        require(not self.plot or bool(self.means or self.rates), "plot",
                "draws a sweep: give --means or --rates with it, or leave --plot out")
        require(not self.plot or self.plot.lower().endswith(".png"), "plot",
                f"is drawn as a PNG: name a .png file (got {self.plot})")
        for w in self.calibrate_widths:
            require(1 <= w <= 1 << 16, "calibrate_widths", f"must be in 1..65536 (got {w})")
        require(0 <= self.kv_block <= 1 << 16, "kv_block",
                f"must be in 0..65536 positions (0: whole-length reservation; got {self.kv_block})")


    def model_config(self):
        """The random model ``random`` and ``model_set`` name (a vocabulary of 256 where the
        preset leaves it to the dataset): the shape simulated and, with ``calibrate``, measured."""
        from depthbench.config.model import model_preset
        mcfg = model_preset(self.random).replace(**self.model_set)
        return mcfg if mcfg.vocab_size else mcfg.replace(vocab_size=256)


@dataclass(frozen=True, kw_only=True)
class ReportConfig(PlainConfig):
    """A report from result rows: ``report.build_report``."""
    results: tuple[str, ...]       # result files or directories
    out: str
    title: str = "depthbench report"
    reference: str = ""            # schedule compared with on paired seeds ("": first uniform)

    def __post_init__(self):
        self._check_types()
        require(bool(self.results), "results", "must name at least one result file or directory")


EXECUTORS = ("local", "slurm", "submitit-local")


@dataclass(frozen=True, kw_only=True)
class RunConfig(PlainConfig):
    """An experiment grid run: ``pipeline.run.run_grid``, what ``depthbench run`` calls."""
    spec: str = ""                 # a spec TOML file or a packaged experiment ("": quickstart)
    out: str = ""                  # the experiment directory ("": runs/NAME)
    sets: dict = field(default_factory=dict)   # "SECTION.KEY" -> value, changes to the spec
    plan: bool = False             # write every stage's config and its command; run nothing
    rerun: tuple[str, ...] = ()    # patterns of finished stages to rerun where changed
    executor: str = "local"        # local: a process pool; slurm, submitit-local: submitit jobs

    def __post_init__(self):
        self._check_types()
        one_of(self.executor, EXECUTORS, "executor")
