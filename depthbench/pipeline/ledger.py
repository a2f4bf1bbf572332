"""The ledger of a grid: which stages have finished and with what, decided in one place.

A finished stage leaves ``OUT/stages/ID.json`` (its key, config, outputs and times); a stage's
key hashes the settings that change what it computes and the keys of the stages it reads. A
stage is skipped while its key is unchanged and its outputs exist, runs again when a stage it
reads was rerun, resumes where an interrupted training run left off, and is refused (naming the
fields that differ) when its settings changed, unless ``--rerun PATTERN`` names it."""

from __future__ import annotations

import fnmatch
import json
import shutil
import time
from pathlib import Path

from depthbench.config import TrainJob
from depthbench.errors import UserError
from depthbench.fsio import atomic_write_text
from depthbench.pipeline.stages import Stage, differences, semantic_config, stage_hash
from depthbench.rows import write_rows


def _folder_digest(folder: Path) -> str:
    """The content of a folder of task files (every file's relative path and bytes)."""
    import hashlib
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


class Ledger:
    def __init__(self, stages_dir: Path, results: Path, rerun=(), log=print,
                 workers: int | None = None):
        """``workers``: the local pool's size, recorded with each finished stage (None: stages
        ran as submitted jobs)."""
        self.stages_dir, self.results, self.log = Path(stages_dir), Path(results), log
        self.rerun, self.workers = tuple(rerun), workers
        self.keys: dict[str, str] = {}  # stage id -> hash of its config and inputs
        self.started: dict[str, float] = {}  # stage id -> when this process started it

    def key(self, st: Stage) -> str:
        key = {"config": semantic_config(st.config), "after": [self.keys.get(a) for a in st.after]}
        if st.command == "prepare-text":   # a corpus edited in place is another input
            from depthbench.data.corpus import corpus_digest
            from depthbench.data.text import FORMAT_VERSION
            key["corpus"] = corpus_digest(list(st.config["corpus"]), st.config["tokenizer"] or None)
            key["format"] = FORMAT_VERSION   # a dataset this depthbench cannot read is rewritten
        if st.config.get("task_path"):      # task files edited in place are other questions
            key["task_path"] = _folder_digest(Path(st.config["task_path"]))
        return stage_hash(key)

    def names(self, stage_id: str) -> bool:
        """Whether ``--rerun`` names the stage (a pattern such as 'train-*', or all)."""
        return any(p == "all" or fnmatch.fnmatchcase(stage_id, p) for p in self.rerun)

    def check_rerun(self, stage_ids: list[str]) -> None:
        """Refuse (UserError) a ``--rerun`` pattern that names no stage of the grid: a typo
        would otherwise rerun nothing, and a changed stage would be refused after others ran."""
        for p in self.rerun:
            if p != "all" and not any(fnmatch.fnmatchcase(i, p) for i in stage_ids):
                raise UserError(f"--rerun {p!r} names no stage of this grid (its stages: "
                                f"{', '.join(stage_ids[:4])}{', ...' if len(stage_ids) > 4 else ''}"
                                "); give a stage id, a pattern such as 'train-*', or all")

    def todo(self, st: Stage) -> bool:
        """Whether ``st`` must run: it has not finished, its inputs were rerun, or its settings
        changed and --rerun names it (then its old outputs are removed)."""
        self.keys[st.id] = self.key(st)
        marker = self.stages_dir / f"{st.id}.json"
        try:
            rec = json.loads(marker.read_text())
            diff = differences(semantic_config(rec["config"]), semantic_config(st.config))
        except (OSError, ValueError, KeyError, TypeError):
            rec, diff = None, self.unmarked_run(st)
        if not diff:
            if rec and rec.get("key") == self.keys[st.id]:
                return not all(Path(o).exists() for o in st.outputs)
            if rec and st.command == "train" and Path(st.config["out"]).exists():
                # same settings, but a stage it reads was rerun: its run cannot be resumed
                self.log(f"rerun {st.id}: its inputs were rerun")
                shutil.rmtree(st.config["out"])
            return True
        # the report is drawn from the rows alone: it follows its inputs without --rerun
        if st.command != "report" and not self.names(st.id):
            raise UserError(f"stage {st.id} finished with other settings ({'; '.join(diff[:4])}"
                            f"{'; ...' if len(diff) > 4 else ''}); rerun it with --rerun "
                            f"'{st.id}' (patterns such as 'train-*' work), or give another --out")
        self.log(f"rerun {st.id}: {'; '.join(diff[:4])}")
        if st.command == "train" and Path(st.config["out"]).exists():
            shutil.rmtree(st.config["out"])
        marker.unlink(missing_ok=True)
        return True

    def unmarked_run(self, st: Stage) -> list[str]:
        """A training run without a marker (interrupted): how the settings it was started with
        differ from this stage's (empty: nothing to compare, or the same run)."""
        if st.command != "train" or not (Path(st.config["out"]) / "run.json").is_file():
            return []
        from depthbench.checkpoint import read_run
        from depthbench.train.job import job_record
        keys = ("model", "train", "schedule", "dataset_hash")
        old, new = read_run(st.config["out"]), job_record(TrainJob.from_dict(st.config))
        return differences({k: old[k] for k in keys}, json.loads(json.dumps({k: new[k] for k in keys})))

    def start(self, st: Stage) -> None:
        self.started[st.id] = time.time()
        self.log(f"run  {st.id}")

    def mark(self, st: Stage, rss_mb: float | None = None) -> None:
        self.stages_dir.mkdir(parents=True, exist_ok=True)
        now, started = time.time(), self.started.get(st.id)
        atomic_write_text(self.stages_dir / f"{st.id}.json", json.dumps(
            {"key": self.keys[st.id], "config": st.config, "command": st.command,
             "outputs": [str(o) for o in st.outputs], "started": started, "finished": now,
             "seconds": None if started is None else now - started,
             "workers": self.workers, "peak_rss_mb": rss_mb}, indent=1) + "\n")

    def write_stage_rows(self, stages: list[Stage]) -> None:
        """``results/stages``: when each finished stage of the grid started and ended (wall
        clock, seconds since the epoch; a submitted job's start is its submission), so that a
        report can say how long its grid took from its own rows."""
        rows = []
        for st in stages:
            try:
                rec = json.loads((self.stages_dir / f"{st.id}.json").read_text())
            except (OSError, ValueError):
                continue
            rows.append({"stage": st.id, "command": st.command, "started": rec.get("started"),
                         "finished": rec.get("finished"), "stage_s": rec.get("seconds"),
                         "workers": rec.get("workers"), "peak_rss_mb": rec.get("peak_rss_mb")})
        write_rows(rows, self.results / "stages", "stage")   # none: an empty file
