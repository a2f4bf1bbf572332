"""Experiment specs: the TOML file of ``depthbench run`` is these dataclasses, one per section.

A section's keys are its dataclass's fields (the same names as the stage configs they feed:
``[eval] depths`` becomes every ``EvalConfig.depths``); unknown keys, wrong types and
out-of-range values are refused with the section and key in the message, before any stage
runs. Torch-free.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from depthbench.axes import BUDGET, LENGTH, LR
from depthbench.config import (
    EVAL_SPLITS,
    TRACKERS,
    ConfigError,
    EvalConfig,
    PrepareTextConfig,
    ProbeConfig,
    ServeConfig,
)
from depthbench.config.base import PlainConfig, require
from depthbench.errors import UserError
from depthbench.pipeline.template import StageTemplate
from depthbench.rows import budget_label

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"  # package data


class SpecError(UserError):
    """An experiment spec with an unknown key, a wrong type or an invalid value."""


@dataclass(frozen=True, kw_only=True)
class DataSpec(PlainConfig):
    preset: str = "tiny"
    seed: int = 0
    set: dict = field(default_factory=dict)
    # a text corpus instead of the generated dataset: depthbench prepare-text's inputs and keys
    corpus: tuple[str, ...] = ()
    vocab_size: int = 0
    tokenizer: str = ""
    val_fraction: float = 0.01
    seq_len: int = 128

    def __post_init__(self):
        self._check_types()
        require(0 <= self.seed <= 2**32 - 1, "seed", "must be between 0 and 4294967295")
        require("seed" not in self.set, "set.seed", "is given by data.seed; give it there")
        if self.corpus:
            require(not self.set, "set", "configures the generated dataset; a corpus takes "
                   "vocab_size, tokenizer, val_fraction and seq_len")
            self.prepare_text("DATA")   # its keys, checked by the stage's config

    @property
    def text(self) -> bool:
        return bool(self.corpus)

    def prepare_text(self, out: str) -> PrepareTextConfig:
        """The prepare-text stage of a corpus (its inputs as given: paths relative to where
        the grid runs)."""
        return PrepareTextConfig(out=out, corpus=self.corpus, vocab_size=self.vocab_size,
                                 tokenizer=self.tokenizer, val_fraction=self.val_fraction,
                                 seed=self.seed, seq_len=self.seq_len)

    def dataset(self):
        """The generator's config (``data_gen.GenConfig``) of the preset under ``set``."""
        from depthbench.data_gen import resolve_config
        return resolve_config(self.preset, overrides=self.set, seed=self.seed)


@dataclass(frozen=True, kw_only=True)
class TrainSpec(PlainConfig):
    preset: str = "tiny"
    schedules: tuple[str, ...] = ("uniform:1-16",)
    seeds: tuple[int, ...] = (0,)
    steps: int = 0                 # 0: the preset's
    set: dict = field(default_factory=dict)
    matched_uniform: str = ""      # a schedule whose runs get a FLOP-matched matched_schedule run
    matched_schedule: str = "uniform:1-16"
    budgets: tuple[float, ...] = ()  # fractions of the full FLOP budget (budget_schedule's)
    budget_schedule: str = "uniform:1-16"
    # each arm's own train.set keys over the spec's (its peak LR from a sweep): keyed by schedule,
    # or by the matched arm's label (matched_schedule~matched_uniform)
    arm_set: dict[str, dict] = field(default_factory=dict)
    lrs: tuple[float, ...] = ()    # a learning-rate sweep: every arm and seed at each peak LR
    lengths: tuple[float, ...] = ()  # a training-length axis: every arm and seed at each multiple
                                     # of steps (the FLOP ratios between arms stay as they are)

    def __post_init__(self):
        self._check_types()
        require(bool(self.schedules) and bool(self.seeds), "schedules",
               "need at least one schedule and one seed")
        # one spelling per schedule: "fixed:02" and " fixed:2 " are fixed:2
        object.__setattr__(self, "schedules", tuple(_canonical(s, "schedules")
                                                    for s in self.schedules))
        for f in ("matched_schedule", "budget_schedule") + (("matched_uniform",)
                                                            if self.matched_uniform else ()):
            object.__setattr__(self, f, _canonical(getattr(self, f), f))
        require(len(set(self.schedules)) == len(self.schedules), "schedules",
               "must not repeat (after spelling each one canonically: "
               f"{', '.join(self.schedules)})")
        require(len(set(self.seeds)) == len(self.seeds), "seeds", "must not repeat")
        require(all(0 <= s <= 2**32 - 1 for s in self.seeds), "seeds",
               "must be between 0 and 4294967295")
        require(0 <= self.steps <= 10**9, "steps", "must be between 0 and 1000000000")
        require(all(0 < b <= 1 for b in self.budgets) and len(set(self.budgets)) == len(self.budgets),
               "budgets", "must be distinct fractions of the full FLOP budget in (0, 1], e.g. "
               "[0.15, 0.45, 1.0]")
        ids = [BUDGET.prefix(b) for b in self.budgets]
        require(len(set(ids)) == len(ids), "budgets",
               "must differ by at least 0.01 (runs are named by whole percents: "
               f"{', '.join(ids)})")
        for key, where in (("seed", "train.seeds"), ("steps", "train.steps")):
            require(key not in self.set, f"set.{key}",
                   f"is given by {where}, once per run; give it there, not in train.set")
        require(not (self.budgets and self.matched_uniform), "budgets",
               "budgets and matched_uniform do not combine; use one of them")
        require(not self.matched_uniform or self.matched_uniform in self.schedules,
               "matched_uniform", f"{self.matched_uniform!r} is not one of train.schedules")
        self._check_arms()

    @property
    def arms(self) -> tuple[str, ...]:
        """The arms' names: each schedule, and the matched arm as the report labels it."""
        matched = (f"{self.matched_schedule}~{self.matched_uniform}",) if self.matched_uniform else ()
        return self.schedules + matched

    def _check_arms(self) -> None:
        require(all(0 < lr <= 1 for lr in self.lrs) and len(set(self.lrs)) == len(self.lrs), "lrs",
               "must be distinct peak learning rates in (0, 1], e.g. [1.5e-3, 3e-3, 6e-3]")
        require(len({LR.prefix(lr) for lr in self.lrs}) == len(self.lrs), "lrs",
               "must differ in their first 6 significant digits (runs are named by them)")
        require(all(0 < x <= 1000 for x in self.lengths) and len(self.lengths) == len(set(self.lengths)),
               "lengths", "must be distinct multiples of train.steps in (0, 1000], e.g. [1, 2, 4]")
        require(len({LENGTH.prefix(x) for x in self.lengths}) == len(self.lengths), "lengths",
               "must differ in their first 4 significant digits (runs are named by them)")
        require(not (self.lengths and (self.budgets or self.lrs)), "lengths",
               "a training-length axis does not combine with budgets or lrs; give one axis per grid")
        arms = {_arm_key(k): v for k, v in self.arm_set.items()}
        at_budget = [f"{a} @ {budget_label(b)}" for a in self.arms for b in self.budgets]
        unknown = sorted(set(arms) - set(self.arms) - set(at_budget))
        require(not unknown, "arm_set", f"names no arm of this grid ({', '.join(unknown)}); its "
               f"arms: {', '.join(self.arms)}" + (" (one budget's: ARM @ 15%)" if self.budgets
                                                   else ""))
        require(not (self.lrs and "lr" in self.set), "set.lr",
               "is given by train.lrs, once per run; give one of them")
        for arm, over in arms.items():
            require(isinstance(over, dict) and all(not isinstance(v, (dict, list)) for v in over.values()),
                   f"arm_set.{arm}", "must be a table of plain train.set values, e.g. { lr = 2e-3 }")
            for key in ("seed", "steps") + (("lr",) if self.lrs else ()):
                require(key not in over, f"arm_set.{arm}.{key}",
                       "is set per run by the grid (seeds, steps, lrs); give it there")
            from depthbench.config.train import split_sets
            model_keys = sorted(split_sets(over)[0])
            require(not model_keys, f"arm_set.{arm}", f"takes training keys only (got model key(s) "
                   f"{', '.join(model_keys)}); every arm trains the same model: put them in train.set")
        object.__setattr__(self, "arm_set", arms)

    def arm_overrides(self, arm: str, budget: float | None = None) -> dict:
        """train.set for ``arm``: the spec's keys, then the arm's own, then its own at
        ``budget`` (a key ``ARM @ 15%``: the LR a sweep at that budget chose)."""
        at = self.arm_set.get(f"{arm} @ {budget_label(budget)}", {}) if budget else {}
        return {**self.set, **self.arm_set.get(arm, {}), **at}


def _arm_key(arm: str) -> str:
    """An arm's name with each schedule in it spelled canonically (and its budget, after " @ ",
    as whole percents)."""
    name, at, budget = str(arm).partition("@")
    key = "~".join(_canonical(part, "arm_set") for part in name.strip().split("~"))
    if not at:
        return key
    try:
        b = float(budget.strip().rstrip("%")) / 100
    except ValueError:
        raise ConfigError(f"arm_set: {arm!r}: the budget after @ must be a percent of the full "
                          "budget, e.g. 'fixed:4 @ 15%'") from None
    return f"{key} @ {budget_label(b)}"



def _canonical(schedule: str, name: str) -> str:
    from depthbench.schedules import parse_schedule
    try:
        return parse_schedule(schedule).canonical
    except UserError as e:
        raise ConfigError(f"{name}: {e}") from None


@dataclass(frozen=True, kw_only=True)
class EvalSpec(StageTemplate):
    """[eval]: every eval stage's ``EvalConfig`` (depths, splits, batch_size, max_people), and
    what the grid evaluates: the checkpoints after a switch, a corpus's lm-eval tasks."""
    STAGE = EvalConfig
    FILLED = ("run", "model", "data", "checkpoint", "out", "device", "harness", "tags")
    DEFAULTS = {"splits": EVAL_SPLITS}
    template: dict = field(default_factory=dict)
    switch_checkpoints: tuple[int, ...] = (0, 16, 64, 256)  # fixed-first: also eval switch + k
    tasks: tuple[str, ...] = ()     # a corpus: lm-eval tasks at every depth (final checkpoints)
    task_path: str = ""             # a folder of further lm-eval task YAMLs
    task_limit: int = 0             # at most this many documents per task (0: all)

    def __post_init__(self):
        super().__post_init__()
        require("eval_reordered" in self.splits, "splits",
               "must include eval_reordered (the split the report reads recall on)")
        require(all(k >= 0 for k in self.switch_checkpoints), "switch_checkpoints",
               "must be integers >= 0")
        require(self.task_limit >= 0, "task_limit", "must be >= 0 (0: every document)")


@dataclass(frozen=True, kw_only=True)
class ProbeSpec(StageTemplate):
    """[probe]: every probe stage's ``ProbeConfig`` (depth_a, depth_b, batches, max_people, seed,
    lr; 0: each checkpoint's own next LR), at the checkpoints the eval keeps after a switch."""
    STAGE = ProbeConfig
    FILLED = ("run", "checkpoint", "depths", "out", "device", "tags")
    template: dict = field(default_factory=dict)
    enabled: bool = True


@dataclass(frozen=True, kw_only=True)
class ServeSpec(StageTemplate):
    """[serve]: the serve stage's ``ServeConfig`` (any serve-bench knob: modes, exit, kv_policy,
    width, requests, rate, ...) on the seed-0 run of ``schedule``."""
    STAGE = ServeConfig
    FILLED = ("run", "random", "model", "model_set", "device", "out", "tags")
    DEFAULTS = {"requests": 64, "width": 32}   # a grid's serve stage: the modes side by side, small
    template: dict = field(default_factory=dict)
    enabled: bool = True
    schedule: str = "uniform:1-16"  # the seed-0 run of this schedule is benchmarked

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "schedule", _canonical(self.schedule, "schedule"))
        require("static" in self.modes, "modes", "must include static (speedups are measured "
               "against it)")


@dataclass(frozen=True, kw_only=True)
class ReportSpec(PlainConfig):
    name: str = ""                 # "": the experiment's name
    out: str = ""                  # "": reports/NAME (with run --out DIR: DIR/report)

    def __post_init__(self):
        self._check_types()
        require(self.name == "" or _plain_name(self.name), "name",
               "must be letters, digits, '-' and '_' (a folder under reports/); use "
               "report.out for another place")


def _plain_name(name) -> bool:
    return isinstance(name, str) and 0 < len(name) <= 100 and \
        name.replace("-", "").replace("_", "").isalnum() and name.isascii()


@dataclass(frozen=True, kw_only=True)
class RunSpec(PlainConfig):
    workers: int = 0               # local executor: parallel stages (0: one per CPU core)
    device: str = ""               # eval, probe and serve stages ("": the training preset's)
    # --executor slurm: submitit.SlurmExecutor parameters, e.g. partition, time (minutes),
    # cpus_per_task, mem; a GPU training stage also gets gpus_per_node and ntasks_per_node
    slurm: dict = field(default_factory=dict)
    # runs of the grid whose first updates are identical (fixed:4 and fixed-first:0.8:4:..., one
    # schedule at several budgets) train them once: the later run starts from the earlier one's
    # checkpoint where they part, with the same result (train.shared_steps)
    share_prefixes: bool = True
    # an experiment tracker fed as the grid runs (trackers are views: the rows stay the truth):
    # each training run's curve live, each eval, probe and serve stage's rows as it finishes,
    # under tracker_dir ("": OUT/tracker)
    tracker: str = ""
    tracker_dir: str = ""

    def __post_init__(self):
        self._check_types()
        require(0 <= self.workers <= 1024, "workers", "must be between 0 and 1024 (0: one per core)")
        require(self.tracker in ("",) + TRACKERS, "tracker",
               f"must be one of {', '.join(TRACKERS)} (or empty: none)")
        require(self.device in ("", "auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda")


SECTIONS = {"data": DataSpec, "train": TrainSpec, "eval": EvalSpec, "probe": ProbeSpec,
            "serve": ServeSpec, "report": ReportSpec, "run": RunSpec}


@dataclass(frozen=True, kw_only=True)
class ExperimentSpec:
    name: str = "experiment"
    data: DataSpec = field(default_factory=DataSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    eval: EvalSpec = field(default_factory=EvalSpec)
    probe: ProbeSpec = field(default_factory=ProbeSpec)
    serve: ServeSpec = field(default_factory=ServeSpec)
    report: ReportSpec = field(default_factory=ReportSpec)
    run: RunSpec = field(default_factory=RunSpec)

    def to_dict(self) -> dict:
        return {"name": self.name, **{s: getattr(self, s).to_dict() for s in SECTIONS}}


def spec_path(spec: str | Path | None) -> Path:
    """A spec file, or the packaged experiment of that name (default: quickstart)."""
    if spec is None:
        return EXPERIMENTS / "quickstart.toml"
    p = Path(spec)
    if not p.exists() and p.suffix != ".toml" and str(spec) in packaged_names():
        return EXPERIMENTS / f"{spec}.toml"
    return p


def packaged_names() -> list[str]:
    """The packaged experiments' names: each top-level spec, then each calibration recipe as
    ``calibration/NAME`` (docs/calibration.md and, for ``text-NAME``, docs/calibration-text.md)."""
    top = sorted(p.stem for p in EXPERIMENTS.glob("*.toml"))
    return top + sorted(f"calibration/{p.stem}" for p in (EXPERIMENTS / "calibration").glob("*.toml"))


def _section(cls, sec: str, body, path: Path):
    if not isinstance(body, dict):
        raise SpecError(f"{path}: [{sec}] must be a table")
    known = cls.known() if issubclass(cls, StageTemplate) else [f.name for f in dataclasses.fields(cls)]
    for key in body:
        if key not in known and key in getattr(cls, "FILLED", ()):
            raise SpecError(f"{path}: {sec}.{key} is set by the grid for each stage (its run, "
                            "output, device and tags); a spec cannot give it")
        if key not in known:
            raise SpecError(f"{path}: unknown key {sec}.{key}; known: {', '.join(known)}")
    try:
        return cls.from_dict(body)
    except UserError as e:
        raise SpecError(f"{path}: {sec}.{e}") from None


def apply_overrides(raw: dict, overrides: dict, path: Path) -> dict:
    """``SECTION.KEY[.SUBKEY]=value`` overrides (``run --set``) laid over a spec's TOML, so any
    knob of a packaged grid can be changed without copying it out of the package: e.g.
    ``train.seeds=[0,1]``, ``train.steps=200``, ``train.set.d_model=64``, ``name=mine``."""
    for key, value in overrides.items():
        parts = key.split(".")
        if parts[0] not in SECTIONS and key != "name":
            raise SpecError(f"--set {key}: the first part must be a section "
                            f"({', '.join(SECTIONS)}) or name, e.g. --set train.steps=200")
        node = raw
        for i, p in enumerate(parts[:-1]):
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise SpecError(f"--set {key}: {'.'.join(parts[:i + 1])} in {path} is a value, "
                                "not a table")
            node = nxt
        node[parts[-1]] = value
    return raw


def load_spec(spec: str | Path | None, overrides: dict | None = None) -> ExperimentSpec:
    """TOML -> a validated ExperimentSpec (a spec file, or a packaged experiment's name), with
    ``overrides`` (``apply_overrides``) laid over it before it is checked."""
    path = spec_path(spec)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        names = ", ".join(n for n in packaged_names() if "/" not in n)
        raise SpecError(f"experiment spec {path} does not exist (packaged experiments: "
                        f"{names}; calibration recipes: calibration/NAME)") from None
    except IsADirectoryError:
        raise SpecError(f"experiment spec {path} is a directory; give a TOML file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecError(f"experiment spec {path} is not valid TOML: {e}") from None
    raw = apply_overrides(raw, overrides or {}, path)
    name = raw.pop("name", path.stem)
    if not _plain_name(name):
        raise SpecError(f"{path}: name must be letters, digits, '-' and '_' (100 at most)")
    for sec in raw:
        if sec not in SECTIONS:
            raise SpecError(f"{path}: unknown key or section [{sec}]; sections: {', '.join(SECTIONS)}")
    if isinstance(raw.get("data"), dict) and "corpus" in raw["data"] and not raw["data"]["corpus"]:
        raise SpecError(f"{path}: data.corpus is empty; name the corpus files or directories "
                        "(or python-docs or kjv), or leave corpus out for the generated dataset")
    for axis in ("budgets", "lrs", "lengths"):   # an empty axis would read as no axis at all
        if isinstance(raw.get("train"), dict) and raw["train"].get(axis, None) == []:
            raise SpecError(f"{path}: train.{axis} is empty; give its values, or leave it out "
                            "for a grid without that axis")
    parts = {sec: _section(cls, sec, raw.get(sec, {}), path) for sec, cls in SECTIONS.items()}
    s = ExperimentSpec(name=name, **parts)
    _cross_check(s, path)
    return s


def _cross_check(s: ExperimentSpec, path: Path) -> None:
    """What one section cannot check alone: presets with their overrides, the served run."""
    from depthbench.config import resolve_presets

    try:
        s.data.dataset()
    except (ValueError, TypeError) as e:
        raise SpecError(f"{path}: data: {e}") from None
    if s.eval.tasks and not s.data.text:
        raise SpecError(f"{path}: eval.tasks: lm-eval tasks run on text runs (data.corpus); a "
                        "synthetic run's tasks are its eval splits")
    if s.data.text:   # what reads people and attributes does not apply to a corpus
        for what, on in (("probe.enabled", s.probe.enabled), ("serve.enabled", s.serve.enabled),
                         ("train.budgets", bool(s.train.budgets)),
                         ("train.lengths", bool(s.train.lengths))):
            if on:
                raise SpecError(f"{path}: {what}: not available for a text corpus "
                                "(data.corpus); turn it off")
    for k, v in {**s.data.set, **s.train.set}.items():
        if isinstance(v, dict):
            raise SpecError(f"{path}: set.{k} must be a plain value (got {v!r})")
    for arm in ("", *s.train.arm_set):
        try:
            resolve_presets(s.train.preset, s.train.arm_overrides(arm) if arm else s.train.set)
        except UserError as e:
            raise SpecError(f"{path}: train{f'.arm_set.{arm}' if arm else ''}: {e}") from None
    if s.serve.enabled and s.serve.schedule not in s.train.schedules:
        raise SpecError(f"{path}: serve.schedule: {s.serve.schedule!r} is not one of train.schedules")
