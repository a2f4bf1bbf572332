"""``depthbench run SPEC.toml``: an experiment grid from dataset to report, resumable.

Stages: generate -> train (every schedule x seed, in a pool of worker processes) -> eval (every
final checkpoint, plus fixed-first checkpoints at the switch and after it) -> update-benefit
probe (those fixed-first checkpoints) -> serve-bench -> export of result rows -> report.

A finished stage leaves a marker ``OUT/stages/ID.json`` holding the hash of its inputs and
config; a rerun skips stages whose hash is unchanged and whose outputs exist, and an
interrupted training run resumes from its last checkpoint. ``--plan`` prints the command of
every stage instead (training as torchrun commands) for a cluster scheduler.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
import shutil
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from depthbench.config import MAX_DEPTH
from depthbench.errors import UserError
from depthbench.fsio import DirLock, atomic_write_text

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"

# section -> key -> default; the type of the default is the type a value must have
SCHEMA: dict[str, dict] = {
    "": {"name": "experiment"},
    "data": {"preset": "tiny", "seed": 0, "set": {}},
    "train": {"preset": "tiny", "schedules": ["uniform:1-16"], "seeds": [0], "steps": 0,
              "set": {}, "matched_uniform": "", "matched_schedule": "uniform:1-16",
              "budgets": [], "budget_schedule": "uniform:1-16"},
    "eval": {"depths": "1-16", "splits": ["eval_reordered", "eval_seen_order",
                                         "eval_unseen_people"],
             "switch_checkpoints": [0, 16, 64, 256], "batch_size": 256},
    "probe": {"enabled": True, "depth_a": 4, "depth_b": 16, "batches": 8, "people": 256},
    "serve": {"enabled": True, "schedule": "uniform:1-16", "modes": ["static", "no_refill",
                                                                      "batch1", "cdb"],
              "exit": "latent:0.05", "kv_policy": "depth_indexed", "requests": 64, "width": 32,
              "max_depth": 16},
    "report": {"name": "", "out": ""},
    "run": {"workers": 0},
}


class SpecError(UserError):
    """An experiment spec with an unknown key, a wrong type or an invalid value."""


def _typename(v) -> str:
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}[type(v)]


def load_spec(path: str | Path | None) -> dict:
    """TOML -> validated spec dict (sections of SCHEMA, defaults filled in)."""
    if path is None:
        path = EXPERIMENTS / "quickstart.toml"
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"experiment spec {path} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecError(f"experiment spec {path} is not valid TOML: {e}") from None
    spec = {sec: dict(keys) for sec, keys in SCHEMA.items() if sec}
    spec["name"] = raw.pop("name", path.stem)
    if not isinstance(spec["name"], str) or not spec["name"].replace("-", "").replace("_", "").isalnum():
        raise SpecError(f"{path}: name must be letters, digits, '-' and '_'")
    for sec, body in raw.items():
        if sec not in SCHEMA or not sec:
            raise SpecError(f"{path}: unknown key or section [{sec}]; sections: "
                            f"{', '.join(s for s in SCHEMA if s)}")
        if not isinstance(body, dict):
            raise SpecError(f"{path}: [{sec}] must be a table")
        for key, value in body.items():
            if key not in SCHEMA[sec]:
                raise SpecError(f"{path}: unknown key {sec}.{key}; known: {', '.join(SCHEMA[sec])}")
            default = SCHEMA[sec][key]
            is_bool = isinstance(value, bool)
            ok = isinstance(value, type(default)) and (is_bool == isinstance(default, bool))
            if isinstance(default, float) and isinstance(value, int) and not is_bool:
                ok = True
            if not ok:
                raise SpecError(f"{path}: {sec}.{key} must be {_typename(default)} (got {value!r})")
            spec[sec][key] = value
    _check_shapes(spec, path)
    _validate(spec, path)
    return spec


# list keys -> the type every element must have; number keys -> inclusive bounds
_ELEMENTS = {("train", "schedules"): str, ("train", "seeds"): int, ("train", "budgets"): float,
             ("eval", "splits"): str, ("eval", "switch_checkpoints"): int, ("serve", "modes"): str}
_BOUNDS = {("data", "seed"): (0, 2**32 - 1), ("train", "steps"): (0, 10**9),
           ("eval", "batch_size"): (1, 1 << 20), ("probe", "depth_a"): (1, MAX_DEPTH),
           ("probe", "depth_b"): (1, MAX_DEPTH), ("probe", "batches"): (2, 1 << 16),
           ("probe", "people"): (1, 1 << 30), ("serve", "requests"): (1, 1 << 20),
           ("serve", "width"): (1, 1 << 16), ("serve", "max_depth"): (1, MAX_DEPTH),
           ("run", "workers"): (0, 1024)}


def _check_shapes(spec: dict, path: Path) -> None:
    """Element types of lists, scalar values in ``set`` tables, and numeric bounds."""
    for (sec, key), typ in _ELEMENTS.items():
        for x in spec[sec][key]:
            ok = (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)) \
                if typ is float else (isinstance(x, typ) and not isinstance(x, bool))
            if not ok:
                what = {str: "strings", int: "integers", float: "numbers"}[typ]
                raise SpecError(f"{path}: {sec}.{key} must be a list of {what} (got {x!r})")
    for sec in ("data", "train"):
        for k, v in spec[sec]["set"].items():
            if isinstance(v, (dict, list)) and not (isinstance(v, list) and all(
                    isinstance(i, (int, float, str)) for i in v)):
                raise SpecError(f"{path}: {sec}.set.{k} must be a plain value (got {v!r})")
    for (sec, key), (lo, hi) in _BOUNDS.items():
        if not lo <= spec[sec][key] <= hi:
            raise SpecError(f"{path}: {sec}.{key} must be between {lo} and {hi} "
                            f"(got {spec[sec][key]})")
    for seed in spec["train"]["seeds"]:
        if not 0 <= seed <= 2**32 - 1:
            raise SpecError(f"{path}: train.seeds must be between 0 and {2**32 - 1} (got {seed})")


def _validate(spec: dict, path: Path) -> None:
    from data_gen import resolve_config
    from depthbench.config import model_preset, split_sets, train_preset
    from depthbench.data import EVAL_SPLITS
    from depthbench.schedules import parse_depths, parse_schedule
    from depthbench.serving.exits import parse_exit
    from depthbench.serving.kvcache import KV_POLICIES
    from depthbench.serving.scheduler import MODES

    def bad(field: str, msg: str):
        raise SpecError(f"{path}: {field}: {msg}")

    try:
        resolve_config(spec["data"]["preset"], overrides=spec["data"]["set"], seed=spec["data"]["seed"])
    except (ValueError, TypeError) as e:
        bad("data", str(e))
    t = spec["train"]
    m, tr = split_sets(t["set"])
    try:
        model_preset(t["preset"]).replace(**m)
        train_preset(t["preset"]).replace(**tr)
    except UserError as e:
        bad("train", str(e))
    if not t["schedules"] or not t["seeds"]:
        bad("train.schedules", "need at least one schedule and one seed")
    if len(set(t["schedules"])) != len(t["schedules"]) or len(set(t["seeds"])) != len(t["seeds"]):
        bad("train.schedules", "schedules and seeds must not repeat")
    for s in t["schedules"] + ([t["matched_schedule"]] if t["matched_uniform"] else []):
        try:
            parse_schedule(s)
        except UserError as e:
            bad("train.schedules", str(e))
    b = t["budgets"]
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x <= 1 for x in b) \
            or len(set(b)) != len(b):
        bad("train.budgets", "must be distinct fractions of the full FLOP budget in (0, 1], e.g. "
            "[0.15, 0.45, 1.0]")
    if b:
        try:
            parse_schedule(t["budget_schedule"])
        except UserError as e:
            bad("train.budget_schedule", str(e))
        if t["matched_uniform"]:
            bad("train.budgets", "budgets and matched_uniform do not combine; use one of them")
    if t["matched_uniform"] and t["matched_uniform"] not in t["schedules"]:
        bad("train.matched_uniform", f"{t['matched_uniform']!r} is not one of train.schedules")
    if any(not isinstance(x, int) or x < 0 for x in t["seeds"]) or t["steps"] < 0:
        bad("train.seeds", "seeds and steps must be integers >= 0")
    try:
        parse_depths(spec["eval"]["depths"])
    except UserError as e:
        bad("eval.depths", str(e))
    for s in spec["eval"]["splits"]:
        if s not in EVAL_SPLITS:
            bad("eval.splits", f"unknown split {s!r}; choose from {', '.join(EVAL_SPLITS)}")
    if any(not isinstance(x, int) or x < 0 for x in spec["eval"]["switch_checkpoints"]):
        bad("eval.switch_checkpoints", "must be integers >= 0")
    p = spec["probe"]
    if p["depth_a"] < 1 or p["depth_b"] < 1 or p["batches"] < 2 or p["people"] < 1:
        bad("probe", "depth_a and depth_b must be >= 1, batches >= 2, people >= 1")
    sv = spec["serve"]
    if any(mo not in MODES for mo in sv["modes"]) or not sv["modes"]:
        bad("serve.modes", f"choose from {', '.join(MODES)}")
    if sv["kv_policy"] not in KV_POLICIES:
        bad("serve.kv_policy", f"choose one of {', '.join(KV_POLICIES)}")
    if sv["requests"] < 1 or sv["width"] < 1 or sv["max_depth"] < 1:
        bad("serve", "requests, width and max_depth must be >= 1")
    try:
        parse_exit(sv["exit"], 1, sv["max_depth"])
    except UserError as e:
        bad("serve.exit", str(e))
    if sv["enabled"] and sv["schedule"] not in t["schedules"]:
        bad("serve.schedule", f"{sv['schedule']!r} is not one of train.schedules")
    if spec["run"]["workers"] < 0:
        bad("run.workers", "must be >= 0 (0: one per CPU core)")


# ---- stages ----------------------------------------------------------------------------------------
def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def slug(schedule: str, seed: int) -> str:
    return schedule.replace(":", "_").replace(".", "p").replace(",", "_").replace("=", "") + f"-s{seed}"


@dataclass
class Stage:
    id: str
    key: dict
    outputs: list[Path]
    command: list[str]
    fn: str = ""                       # name of the function in this module that runs it
    args: dict = field(default_factory=dict)


class Pipeline:
    def __init__(self, spec: dict, out: Path, log=print):
        self.spec, self.out, self.log = spec, Path(out), log
        self.data = self.out / "data"
        self.results = self.out / "results"
        name = spec["report"]["name"] or spec["name"]
        self.report_dir = Path(spec["report"]["out"] or Path("reports") / name)
        self.stages_dir = self.out / "stages"

    # ---- bookkeeping -------------------------------------------------------------------------
    def _done(self, st: Stage) -> bool:
        f = self.stages_dir / f"{st.id}.json"
        if not f.is_file():
            return False
        try:
            rec = json.loads(f.read_text())
        except json.JSONDecodeError:
            return False
        return rec.get("key") == _hash(st.key) and all(Path(o).exists() for o in st.outputs)

    def _mark(self, st: Stage) -> None:
        self.stages_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.stages_dir / f"{st.id}.json",
                          json.dumps({"key": _hash(st.key), "outputs": [str(o) for o in st.outputs],
                                      "finished": time.time()}) + "\n")

    def _workers(self, n_jobs: int) -> int:
        w = self.spec["run"]["workers"] or (os.cpu_count() or 1)
        return max(1, min(w, n_jobs))

    def _run_stages(self, stages: list[Stage], plan: bool) -> None:
        todo = []
        for st in stages:
            if plan:
                self.log(shlex.join(st.command))
            elif self._done(st):
                self.log(f"skip {st.id} (done)")
            else:
                todo.append(st)
        if plan or not todo:
            return
        workers = self._workers(len(todo))
        if workers == 1 or len(todo) == 1:
            for st in todo:
                self.log(f"run  {st.id}")
                globals()[st.fn](**st.args)
                self._mark(st)
            return
        with ProcessPoolExecutor(max_workers=workers, initializer=_worker_init) as pool:
            futs = {pool.submit(_call, st.fn, st.args): st for st in todo}
            for st in todo:
                self.log(f"run  {st.id}")
            for fut, st in futs.items():
                fut.result()
                self._mark(st)
                self.log(f"done {st.id}")

    # ---- the grid ------------------------------------------------------------------------------
    def run(self, plan: bool = False) -> dict:
        if plan:
            return self._run(plan)
        with DirLock(self.out, "experiment directory"):
            return self._run(plan)

    def _run(self, plan: bool) -> dict:
        from data_gen import resolve_config
        from depthbench.config import model_preset, split_sets, train_preset
        from depthbench.schedules import parse_schedule
        from depthbench.train import matched_steps

        spec, t0 = self.spec, time.perf_counter()
        d = spec["data"]
        gen_cfg = resolve_config(d["preset"], overrides=d["set"], seed=d["seed"])
        gen = Stage("generate", {"config": gen_cfg.to_dict()}, [self.data / "manifest.json"],
                    ["depthbench", "generate", "--out", str(self.data), "--preset", d["preset"],
                     "--seed", str(d["seed"]), "--force",
                     *sum((["--set", f"{k}={json.dumps(v)}"] for k, v in d["set"].items()), [])],
                    "_stage_generate", {"cfg": gen_cfg.to_dict(), "out": str(self.data)})
        self._run_stages([gen], plan)

        t = spec["train"]
        m_over, t_over = split_sets(t["set"])
        mcfg = model_preset(t["preset"]).replace(**m_over)
        base_tcfg = train_preset(t["preset"]).replace(**t_over)
        if t["steps"]:
            base_tcfg = base_tcfg.replace(steps=t["steps"])
        runs: dict[str, dict] = {}

        def train_stage(schedule: str, seed: int, steps: int, tag: str = "") -> Stage:
            sched = parse_schedule(schedule)
            keep = ()
            switch = sched.switch_step(steps)
            if switch is not None:
                keep = tuple(sorted({switch + k for k in spec["eval"]["switch_checkpoints"]
                                     if 0 < switch + k <= steps}))
            tcfg = base_tcfg.replace(steps=steps, seed=seed, keep_steps=keep)
            name = tag + slug(schedule, seed)
            run_dir = self.out / "runs" / name
            runs[name] = {"dir": run_dir, "schedule": schedule, "seed": seed, "keep": keep,
                          "steps": steps, "switch": switch}
            sets = [f"{k}={json.dumps(v)}" for k, v in {**m_over, **t_over}.items()]
            cmd = ["torchrun", "--standalone", "--nproc_per_node=1", "-m", "depthbench", "train",
                   "--data", str(self.data), "--out", str(run_dir), "--preset", t["preset"],
                   "--schedule", schedule, "--seed", str(seed), "--steps", str(steps),
                   *sum((["--set", s] for s in sets), []),
                   *(["--set", f"keep_steps={json.dumps(list(keep))}"] if keep else []), "--resume"]
            return Stage(f"train-{name}", {"model": mcfg.to_dict(), "train": tcfg.to_dict(),
                                           "schedule": schedule, "data": gen_cfg.to_dict()},
                         [run_dir / "checkpoints" / f"step_{steps:07d}.pt"], cmd, "_stage_train",
                         {"data": str(self.data), "out": str(run_dir), "model": mcfg.to_dict(),
                          "train": tcfg.to_dict(), "schedule": schedule})

        # the most expensive runs (deepest mean depth) first, so the pool finishes together
        by_cost = sorted(t["schedules"], key=lambda s: -parse_schedule(s).depths(
            base_tcfg.steps, 0).mean())
        if t["budgets"]:
            steps_of = budget_steps(gen_cfg, mcfg, base_tcfg, t["budget_schedule"])
            trains = []
            for b in sorted(t["budgets"], reverse=True):
                for s in by_cost:
                    for seed in t["seeds"]:
                        trains.append(train_stage(s, seed, steps_of(s, b, seed),
                                                  tag=f"b{round(100 * b):03d}-"))
                        runs[trains[-1].id.removeprefix("train-")]["budget"] = b
        else:
            trains = [train_stage(s, seed, base_tcfg.steps) for s in by_cost for seed in t["seeds"]]
        self._run_stages(trains, plan)
        if t["matched_uniform"]:
            matched = []
            for seed in t["seeds"]:
                ref = runs[slug(t["matched_uniform"], seed)]
                steps = base_tcfg.steps if plan else matched_steps(
                    ref["dir"], t["matched_schedule"], self.data, mcfg, base_tcfg.batch_size, seed)
                matched.append(train_stage(t["matched_schedule"], seed, steps, tag="matched-"))
            self._run_stages(matched, plan)

        # ---- eval and probe ------------------------------------------------------------------
        ev = spec["eval"]
        evals, probes = [], []
        for name, r in runs.items():
            for step in sorted({r["steps"], *r["keep"]}):
                out = self.results / "eval" / f"{name}_step{step:07d}"
                evals.append(Stage(
                    f"eval-{name}-{step}", {"train": _hash(str(r)), "eval": ev, "step": step},
                    [out.with_name(out.name + ".jsonl")],
                    ["depthbench", "eval", str(r["dir"]), "--depths", ev["depths"], "--checkpoint",
                     str(step), "--out", str(out), *sum((["--split", s] for s in ev["splits"]), [])],
                    "_stage_eval", {"run": str(r["dir"]), "step": step, "depths": ev["depths"],
                                    "splits": ev["splits"], "out": str(out),
                                    "batch_size": ev["batch_size"],
                                    "tags": {"budget": r["budget"]} if "budget" in r else {}}))
            p = spec["probe"]
            if p["enabled"] and r["switch"] is not None:
                for step in r["keep"]:
                    out = self.results / "probe" / f"{name}_step{step:07d}"
                    probes.append(Stage(
                        f"probe-{name}-{step}", {"train": _hash(str(r)), "probe": p, "step": step,
                                                 "depths": ev["depths"]},
                        [out.with_name(out.name + ".jsonl")],
                        ["depthbench", "probe-update", str(r["dir"]), "--step", str(step),
                         "--depths-a", str(p["depth_a"]), "--depths-b", str(p["depth_b"]),
                         "--depths", ev["depths"], "--batches", str(p["batches"]),
                         "--max-people", str(p["people"]), "--out", str(out)],
                        "_stage_probe", {"run": str(r["dir"]), "step": step, "probe": p,
                                         "depths": ev["depths"], "out": str(out),
                                         "switch": r["switch"]}))
        self._run_stages(evals + probes, plan)

        # ---- serve-bench -----------------------------------------------------------------------
        sv = spec["serve"]
        if sv["enabled"]:
            target = runs[slug(sv["schedule"], t["seeds"][0])]
            out = self.results / "serve"
            self._run_stages([Stage(
                "serve", {"train": _hash(str(target)), "serve": sv},
                [out.with_name("serve.jsonl")],
                ["depthbench", "serve-bench", str(target["dir"]), "--modes", ",".join(sv["modes"]),
                 "--exit", sv["exit"], "--kv-policy", sv["kv_policy"], "--requests",
                 str(sv["requests"]), "--width", str(sv["width"]), "--max-depth", str(sv["max_depth"]),
                 "--out", str(out)],
                "_stage_serve", {"run": str(target["dir"]), "serve": sv, "out": str(out)})], plan)

        # ---- result rows of the training runs, then the report ----------------------------------
        if plan:
            self.log(shlex.join(["depthbench", "report", str(self.results), "--out",
                                 str(self.report_dir)]))
            return {"plan": True}
        _export_training(runs, self.results)
        from depthbench.report import build_report
        files = build_report([self.results], self.report_dir, title=spec["name"])
        return {"out": str(self.out), "report": str(self.report_dir), "files": len(files),
                "runs": len(runs), "seconds": time.perf_counter() - t0}


def budget_steps(gen_cfg, mcfg, tcfg, budget_schedule: str):
    """``steps_of(schedule, fraction, seed)``: the steps at which ``schedule`` spends ``fraction``
    of the full budget, the modeled training FLOPs of ``budget_schedule`` over ``tcfg.steps``
    steps (its seed-0 draws). Computed from the generator config, so ``--plan`` needs no data."""
    from data_gen import build_vocab
    from depthbench.flops import FlopModel, match_steps, schedule_flops
    from depthbench.schedules import parse_schedule
    seq = gen_cfg.seq_len - 1
    fm = FlopModel.of(mcfg.replace(vocab_size=mcfg.vocab_size or len(build_vocab(gen_cfg))), seq)
    tps = tcfg.batch_size * seq
    full = schedule_flops(fm, parse_schedule(budget_schedule), tcfg.steps, 0, tps)

    def steps_of(schedule: str, fraction: float, seed: int) -> int:
        return match_steps(fm, parse_schedule(schedule), fraction * full, tcfg.steps, seed, tps)
    return steps_of


# ---- stage bodies (run in worker processes) ---------------------------------------------------------
def _worker_init():
    import torch
    torch.set_num_threads(1)


def _call(fn: str, args: dict):
    return globals()[fn](**args)


def _stage_generate(cfg: dict, out: str):
    from data_gen import GenConfig, generate
    generate(GenConfig.from_dict(cfg), out, force=True)


def _stage_train(data: str, out: str, model: dict, train: dict, schedule: str):
    from depthbench.config import ModelConfig, TrainConfig
    from depthbench.train import train as run_train
    out_p = Path(out)
    resume = (out_p / "run.json").is_file()
    if resume:
        try:  # a run dir from another config is replaced, an interrupted one continues
            old = json.loads((out_p / "run.json").read_text())
            want = json.loads(json.dumps(TrainConfig.from_dict(train).to_dict()))
            if old.get("train") != want or old.get("schedule") != schedule:
                shutil.rmtree(out_p)
                resume = False
        except json.JSONDecodeError:
            shutil.rmtree(out_p)
            resume = False
    log_dir = out_p.parent.parent / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"train-{out_p.name}.log", "a") as logf:
        run_train(data, out, ModelConfig.from_dict(model), TrainConfig.from_dict(train), schedule,
                  resume=resume, progress=False, log=lambda m: print(m, file=logf, flush=True))


def _stage_eval(run: str, step: int, depths: str, splits: list[str], out: str, batch_size: int,
                tags: dict | None = None):
    from depthbench.checkpoint import load_model, read_run
    from depthbench.data import Dataset
    from depthbench.evaluate import result_rows, sweep, write_rows
    from depthbench.schedules import parse_depths
    model, ck = load_model(run, step)
    meta = read_run(run)
    ds = Dataset(meta["data"])
    rows = []
    for split in splits:
        sums = sweep(model, ds, split, parse_depths(depths), None, batch_size)
        rows += result_rows(ck, meta, Path(run).name, ds, split, sums)
    write_rows([{**r, **(tags or {})} for r in rows], out)


def _stage_probe(run: str, step: int, probe: dict, depths: str, out: str, switch: int):
    from depthbench.evaluate import probe_update, write_rows
    from depthbench.schedules import parse_depths
    rows = probe_update(run, step, probe["depth_a"], probe["depth_b"], parse_depths(depths),
                        probe["batches"], probe["people"])
    for r in rows:
        r["updates_after_switch"] = step - switch
    write_rows(rows, out)


def _stage_serve(run: str, serve: dict, out: str):
    from depthbench.checkpoint import load_model, read_run
    from depthbench.data import Dataset
    from depthbench.serving.bench import BenchConfig, dataset_workload, serve_bench
    model, ck = load_model(run)
    ds = Dataset(read_run(run)["data"])
    cfg = BenchConfig(modes=tuple(serve["modes"]), exit=serve["exit"], kv_policy=serve["kv_policy"],
                      width=serve["width"], requests=serve["requests"], max_depth=serve["max_depth"])
    res = serve_bench(model, dataset_workload(ds, serve["requests"], 0, 0), cfg, ds.seq_len - 1)
    from depthbench.evaluate import write_rows
    from depthbench.serving.bench import result_rows
    write_rows(result_rows(res, run=Path(run).name, schedule=ck.get("schedule"), exit=serve["exit"],
                           kv_policy=serve["kv_policy"], width=serve["width"]), Path(out))


def _export_training(runs: dict, results: Path) -> None:
    """Training curves and run summaries as result rows (reports read rows, never run dirs)."""
    from depthbench.checkpoint import read_run
    from depthbench.evaluate import write_rows
    from depthbench.train import metrics_rows
    curves, summary = [], []
    for name, r in runs.items():
        rec = read_run(r["dir"])
        rows = [x for x in metrics_rows(r["dir"]) if "loss" in x]
        tags = {"budget": r["budget"]} if "budget" in r else {}
        for x in rows:
            curves.append({"run": name, "schedule": r["schedule"], "seed": r["seed"],
                           "switch_step": r["switch"], **tags, **x})
        last = rows[-1]
        summary.append({"run": name, "schedule": r["schedule"], "seed": r["seed"],
                        "steps": r["steps"], "final_loss": last["loss"],
                        "modeled_train_flops": last["flops"], "wall_clock_s": last["wall_clock"],
                        "switch_step": r["switch"], "dataset_hash": rec["dataset_hash"], **tags})
    write_rows(curves, results / "train_curves")
    write_rows(summary, results / "runs")
