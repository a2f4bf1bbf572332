"""A grid's stages: each one command of the CLI with its config (``Stage``), the action that
runs it in-process, the key that says whether a finished stage is the same stage, and its name."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from depthbench.config import (
    EvalConfig,
    GenerateJob,
    PrepareTextConfig,
    ProbeConfig,
    ReportConfig,
    ServeConfig,
    TrainJob,
)

# every stage's typed config: the action gets the config, built from the stage's plain one
CONFIGS = {"generate": GenerateJob, "prepare-text": PrepareTextConfig, "train": TrainJob,
           "eval": EvalConfig, "probe-update": ProbeConfig, "serve-bench": ServeConfig,
           "report": ReportConfig}


def _generate(job: GenerateJob) -> None:
    from depthbench.data.generate import generate
    generate(job.dataset, job.out, force=True)


def _prepare_text(cfg: PrepareTextConfig) -> None:
    from depthbench.data.corpus import run_prepare_text
    run_prepare_text(cfg, force=True)


def _train(job: TrainJob) -> None:
    from depthbench.train.job import run_train
    log_dir = Path(job.out).parent.parent / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"train-{Path(job.out).name}.log", "a") as f:
        run_train(job, progress=False, log=lambda m: print(m, file=f, flush=True))


def _eval(cfg):
    from depthbench.evaluate.sweep import run_eval
    run_eval(cfg)


def _probe(cfg):
    from depthbench.train.probe import run_probe
    run_probe(cfg)


def _serve(cfg):
    from depthbench.serving.bench import run_bench
    run_bench(cfg)


def _report(cfg):
    from depthbench.report import run_report
    run_report(cfg)


ACTIONS = {"generate": _generate, "prepare-text": _prepare_text, "train": _train, "eval": _eval,
           "probe-update": _probe,
           "serve-bench": _serve, "report": _report}


def run_stage(command: str, config: dict, cwd: str | None = None, threads: int = 0) -> float:
    """Run one stage from its plain config (in this process, a pool worker or a submitit job);
    returns the process's peak resident memory so far in MB (a pool worker's whole life, not
    this stage alone)."""
    if cwd:
        os.chdir(cwd)
    if threads:
        import torch
        torch.set_num_threads(threads)
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and int(os.environ.get("SLURM_NTASKS", 1)) > 1:
        import submitit  # several tasks: torchrun's environment from SLURM's
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    ACTIONS[command](CONFIGS[command].from_dict(config))
    return peak_rss_mb()


def peak_rss_mb() -> float:
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def stage_hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _flat(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differences(old: dict, new: dict) -> list[str]:
    """``key: old -> new`` for every (dotted) key whose value differs."""
    a, b = _flat(old), _flat(new)
    return [f"{k}: {json.dumps(a.get(k))} -> {json.dumps(b.get(k))}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


# a training stage's keys that say where its shared prefix comes from, or where a tracker shows
# it, not what it computes
_VIEW_KEYS = ("start_from", "start_step", "share_steps", "tracker", "tracker_dir")


def semantic_config(config: dict) -> dict:
    """A stage's config without the keys that change nothing it computes (where its shared
    prefix comes from, its tracker): what its key and its reruns compare."""
    return {k: v for k, v in config.items() if k not in _VIEW_KEYS}


def slug(schedule: str, seed: int) -> str:
    return schedule.replace(":", "_").replace(".", "p").replace(",", "_").replace("=", "") + f"-s{seed}"


@dataclass
class Stage:
    id: str
    command: str
    config: dict                   # the plain config of the command's action
    outputs: list[Path]
    after: list[str] = field(default_factory=list)  # stages whose outputs it reads
    gpus: int = 0                  # SLURM: GPUs (torchrun-style tasks) of a training stage
    # stages that must finish first without being inputs (a run a shared prefix starts from):
    # they order the stages and change neither the stage's key nor what it computes
    waits: list[str] = field(default_factory=list)

    def __post_init__(self):  # plain JSON values, as the marker and the plan file hold them
        self.config = json.loads(json.dumps(self.config))

    def argv(self, config_file: Path) -> list[str]:
        if self.command == "generate":
            return ["depthbench", "generate", "--config", str(config_file), "--out",
                    self.config["out"], "--force"]
        if self.command == "prepare-text":
            c = self.config
            return ["depthbench", "prepare-text", *c["corpus"], "--out", c["out"],
                    *(["--vocab-size", str(c["vocab_size"])] if c["vocab_size"] else
                      ["--tokenizer", c["tokenizer"]]),
                    "--val-fraction", str(c["val_fraction"]), "--seq-len", str(c["seq_len"]),
                    "--seed", str(c["seed"]), "--force"]
        head = ["depthbench"]
        if self.command == "train":
            head = ["torchrun", "--standalone", f"--nproc_per_node={max(1, self.gpus)}", "-m",
                    "depthbench"]
        return [*head, self.command, "--config", str(config_file)]

    def file_config(self) -> dict:
        return self.config["dataset"] if self.command == "generate" else self.config
