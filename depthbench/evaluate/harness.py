"""The ``depthbench`` model for the lm-evaluation-harness (a ``TemplateLM`` subclass).

    lm-eval ... --model depthbench --model_args pretrained=RUN_OR_CKPT,n_loops=4
    lm-eval ... --model depthbench --model_args pretrained=RUN,exit=latent:0.05,max_depth=16

For a synthetic run, text is the dataset's whitespace token form and the tokenizer is the
dataset's vocabulary (found through the run's record, or ``data=DIR``); a sequence starts with
``<bos>``, ``<eos>`` ends it. For a run trained on a text corpus (``depthbench prepare-text``)
the tokenizer is the corpus's own byte-level BPE, and end-of-text starts every sequence, so any
lm-eval task (``hellaswag``, ``piqa``, ``arc_easy`` where the HF datasets cache holds them, or a
local YAML such as ``depthbench_cloze``) runs at any ``n_loops``.
With ``exit=SPEC`` generation runs through the depth-adaptive serving engine (batch-1 decoding,
the given criterion and KV policy); likelihoods always use ``n_loops`` (default: max_depth).

The model's arguments are parsed once into a typed ``model_args.ModelArgs`` (lm-eval's own
``batch_size``, possibly "auto", ``max_batch_size`` and ``device`` among them); an unknown
argument or a value out of range is a one-line error before any model is read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model

from depthbench.checkpoint import load as load_checkpoint
from depthbench.checkpoint import open_run, read_run, run_dir_of, run_keys, run_name
from depthbench.data.synthetic import Dataset, open_dataset
from depthbench.errors import UserError
from depthbench.evaluate.model_args import ModelArgs, int_arg


@register_model("depthbench")
class DepthbenchLM(TemplateLM):
    def __init__(self, **given):
        super().__init__()
        args = self.args = ModelArgs.parse(given)
        self._dev = torch.device(args.device)
        from depthbench.loading import open_ported, parse_spec
        spec = parse_spec(args.pretrained)
        if spec.kind == "run":   # checked against its dataset, its run finished (open_run)
            self.model, ck, _, ds = open_run(args.pretrained, args.checkpoint_step, args.data,
                                             self._dev, verify=False, data_option="data=DIR")
            self.checkpoint = ck["path"]
        else:   # ouro:DIR, huginn:DIR, hf:DIR read a text dataset tokenized their way
            if not args.data:
                raise UserError(f"{spec} needs data=DIR: a text dataset prepared with the "
                                "model's tokenizer (prepare-text CORPUS --tokenizer "
                                "DIR/tokenizer.json)")
            self.model, ds = open_ported(spec, args.data, self._dev, verify=False)
            self.checkpoint = self.model.source
        self.text = ds.kind == "text"
        self.vocab = ds.lm_vocab()
        self.max_len = args.positions(self.model.shape.max_seq_len)
        self.engine = None
        if args.criterion is not None:
            from depthbench.serving.engine import Engine
            self.engine = Engine(self.model, args.criterion, args.kv_policy, 1, self.max_len + 1)

    # ---- what lm-eval reads --------------------------------------------------------------------------
    @property
    def device(self):
        return self._dev

    @property
    def eot_token_id(self) -> int:
        return self.vocab.eos

    @property
    def prefix_token_id(self) -> int:
        return self.vocab.bos

    def tok_encode(self, string: str, add_special_tokens=None, **kwargs) -> list[int]:
        return self.vocab.encode(string)

    def tok_decode(self, tokens) -> str:
        return self.vocab.decode(tokens)

    def get_model_info(self) -> dict:
        a = self.args
        return {"model_checkpoint": self.checkpoint, "serving_depth": a.n_loops, "exit": a.exit,
                "max_depth": a.max_depth, "kv_policy": a.kv_policy}

    # ---- scoring -------------------------------------------------------------------------------------
    @torch.no_grad()
    def _logprobs(self, seqs: list[list[int]]) -> list[torch.Tensor]:
        """Per sequence, the (len-1, V) next-token log-probabilities at depth n_loops."""
        out = []
        for i in range(0, len(seqs), self.args.batch_size):
            chunk = seqs[i:i + self.args.batch_size]
            T = max(len(s) for s in chunk)
            if T > self.max_len:
                raise UserError(f"a request of {T} tokens exceeds the model's {self.max_len} positions")
            x = torch.full((len(chunk), T), self.vocab.pad, dtype=torch.long)
            for j, s in enumerate(chunk):  # right padding: causal attention never sees it
                x[j, :len(s)] = torch.tensor(s)
            logp = F.log_softmax(self.model(x.to(self._dev), n_loops=self.args.n_loops).float(), -1)
            out += [logp[j, :len(s) - 1].cpu() for j, s in enumerate(chunk)]
        return out

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs):
        # a synthetic sequence starts with <bos>, as in training (lm-eval adds it only to empty
        # contexts); a text run's training windows start anywhere, so its contexts are scored as
        # given (lm-eval starts an empty one with end-of-text, the prefix token)
        seqs = [([] if self.text or ctx[:1] == [self.vocab.bos] else [self.vocab.bos])
                + ctx + cont for _, ctx, cont in requests]
        res = []
        for (_, _, cont), seq, lp in zip(requests, seqs, self._logprobs(seqs)):
            tgt = torch.tensor(cont)
            start = len(seq) - len(cont) - 1  # the prediction of the first continuation token
            rows = lp[start:start + len(cont)]                                 # (L, V)
            ll = rows.gather(1, tgt[:, None]).sum().item()
            res.append((float(ll), bool((rows.argmax(-1) == tgt).all())))
        return res

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        seqs = [[self.vocab.bos] + self.tok_encode(r.args[0]) for r in requests]
        return [float(lp.gather(1, torch.tensor(s[1:])[:, None]).sum()) for s, lp in
                zip(seqs, self._logprobs(seqs))]

    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out = []
        for r in requests:
            context, gen = r.args
            until = gen.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            n_new = int(gen.get("max_gen_toks", 16))
            ids = [self.vocab.bos] + self.tok_encode(context)
            toks = self._generate(ids, n_new)
            if self.text:   # decode the text, cut at the first stop string
                text = self.vocab.decode(t for t in toks if t != self.vocab.eos)
                cut = [text.index(u) for u in until if u and u in text]
                out.append(text[:min(cut)] if cut else text)
                continue
            words = []
            for t in toks:
                w = self.vocab.tokens[t]
                if t == self.vocab.eos or any(u and u in w for u in until):
                    break
                words.append(w)
            out.append(" ".join(words))
        return out

    def _generate(self, ids: list[int], n_new: int) -> list[int]:
        n_new = min(n_new, self.max_len - len(ids))
        if n_new <= 0:
            return []
        if self.engine is None:  # fixed depth: full forwards
            ctx = torch.tensor([ids], device=self._dev)
            toks = []
            for _ in range(n_new):
                nxt = self.model(ctx, n_loops=self.args.n_loops)[0, -1].argmax()
                toks.append(int(nxt))
                if toks[-1] == self.vocab.eos:
                    break
                ctx = torch.cat([ctx, nxt.view(1, 1)], dim=1)
            return toks
        from depthbench.serving.batching import Batching
        from depthbench.serving.scheduler import Request, Scheduler
        req = Request(0, ids, n_new, stop_token=self.vocab.eos)
        Scheduler(self.engine, "batch1", Batching(1)).run([req])
        return req.output


# the task YAMLs: installed beside the package (package data), else the source tree's top-level
# tasks/ (an editable install)
PKG = Path(__file__).resolve().parents[1]
TASKS_DIR = next(d for d in (PKG / "tasks", PKG.parent / "tasks") if d.is_dir())
SPLIT_TASKS = {"eval_reordered": "reordered", "eval_seen_order": "seen_order",
               "eval_unseen_people": "unseen_people"}


def _is_spec(run: str) -> bool:
    """Whether ``run`` names a ported or wrapped model (ouro:DIR, ...), not a depthbench run."""
    from depthbench.loading import parse_spec
    return parse_spec(run)[0] != "run"


def _run_name(run: str) -> str:
    return run if _is_spec(run) else run_name(run)


def _per_depth(run: str, data: str, depths: list[int], tasks: list[str], tm, step, limit,
               batch_size: int):
    """(depth, lm-eval's results by task, the checkpoint, the run record) for every depth: a
    fresh model per depth, so that no response cache is ever shared across depths. A task lm-eval
    cannot run (its data not in the HF cache offline, a bad task file) ends as one UserError."""
    import lm_eval
    meta = read_run(Path(run)) if not _is_spec(run) and (Path(run) / "run.json").is_file() else {}
    for k in depths:
        lm = DepthbenchLM(pretrained=run, n_loops=k, max_depth=max(k, 1), data=data,
                          checkpoint_step=step, batch_size=batch_size)
        try:
            out = lm_eval.simple_evaluate(model=lm, tasks=list(tasks), task_manager=tm,
                                          limit=limit, log_samples=False, bootstrap_iters=0,
                                          use_cache=None)
        except UserError:
            raise
        except Exception as e:  # lm-eval's and datasets' own errors
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            raise UserError(f"lm-eval could not run {', '.join(tasks)} ({first}); a task's data "
                            "must be in the HF datasets cache (HF_DATASETS_OFFLINE=1 reads only "
                            "it)") from None
        ck = load_checkpoint(lm.checkpoint) if not _is_spec(run) else {"step": None}
        yield k, out["results"], {**ck, "path": lm.checkpoint}, meta


def harness_sweep(run: str, data: str, depths: list[int], splits: list[str],
                  step: int | None = None, limit: int | None = None, batch_size: int = 64) -> list[dict]:
    """A depth sweep through ``lm_eval.simple_evaluate``: one fresh model per depth (no response
    cache is ever shared across depths), one task manager for all, rows in the schema of
    ``depthbench eval`` (whole-sequence NLL is not a harness task and stays empty)."""
    from lm_eval.tasks import TaskManager

    ds = Dataset(data)
    tm = TaskManager(include_path=str(TASKS_DIR), include_defaults=False,
                     metadata={"data": str(Path(data).resolve())})
    tasks = [f"depthbench_{kind}_{SPLIT_TASKS[s]}" for s in splits for kind in ("recall", "likelihood")]
    rows = []
    for k, res, ck, meta in _per_depth(run, data, depths, tasks, tm, step, limit, batch_size):
        for s in splits:
            rec = res[f"depthbench_recall_{SPLIT_TASKS[s]}"]
            lik = res[f"depthbench_likelihood_{SPLIT_TASKS[s]}"]
            rows.append({
                **run_keys(_run_name(run), ck, meta), "depth": k, "split": s, "nll": None,
                "value_nll": lik["value_nll,none"],
                "exact_match": rec["exact_match,none"],
                # one asked fact per eval row, rows_per_person rows per person
                "bits_per_person": lik["recalled_bits,none"] * ds.rows_per_person,
                "ceiling_bits": ds.ceiling_bits, "modeled_train_flops": ck.get("flops"),
                "wall_clock_s": ck.get("wall_clock"), "dataset_hash": ds.hash,
                "checkpoint": ck["path"], "harness": "lm-eval",
            })
    return rows


def _metrics(r: dict) -> dict:
    """lm-eval's metrics of one task as row columns: ``acc,none`` as ``acc``, a metric under
    another filter as ``metric_filter``; standard errors and labels left out."""
    out = {}
    for key, v in r.items():
        metric, _, filt = key.partition(",")
        if filt and not metric.endswith("_stderr") and isinstance(v, int | float) \
                and not isinstance(v, bool):
            out[metric if filt == "none" else f"{metric}_{filt}"] = float(v)
    return out


def check_tasks(tasks: list[str], task_path: str = "", data: str | None = None):
    """lm-eval's TaskManager over its own tasks, the packaged ones and ``task_path``; a task it
    does not know is refused (``depthbench run`` asks this before the first stage)."""
    from lm_eval.tasks import TaskManager
    if task_path and not Path(task_path).is_dir():
        raise UserError(f"task path {task_path} is not a directory of lm-eval task files")
    paths = [str(TASKS_DIR)] + ([str(Path(task_path).resolve())] if task_path else [])
    tm = TaskManager(include_path=paths,
                     metadata={"data": str(Path(data).resolve())} if data else None)
    unknown = [t for t in tasks if t not in tm.all_tasks]
    if unknown:
        raise UserError(f"lm-eval knows no task {unknown[0]!r}; see `depthbench lm-eval ls "
                        "tasks`, or give its YAML folder with --task-path")
    return tm


def harness_tasks(run: str, data: str, depths: list[int], tasks: list[str],
                  step: int | None = None, limit: int | None = None, batch_size: int = 64,
                  task_path: str = "") -> list[dict]:
    """Tasks through ``lm_eval.simple_evaluate`` at every depth, a fresh model per depth:
    lm-eval's own (hellaswag, piqa, arc_easy where the HF datasets cache holds them), the
    packaged ones (``depthbench_cloze`` for a text run, ``depthbench`` and its recall and
    likelihood tasks for a synthetic one), or YAMLs under ``task_path``. One ``task`` row per
    task lm-eval reports (a group's members each) and depth, with every metric it reports
    (``acc``, ``acc_norm``, ``acc_mutual_info``, ``exact_match``, ...)."""

    ds = open_dataset(data, verify=False)
    tm = check_tasks(tasks, task_path, data)
    rows = []
    for k, res, ck, meta in _per_depth(run, data, depths, tasks, tm, step, limit, batch_size):
        for t, r in sorted(res.items()):
            metrics = _metrics(r)
            if not metrics:   # a group without aggregate metrics
                continue
            rows.append({**run_keys(_run_name(run), ck, meta), "depth": k, "task": t,
                         **metrics, "modeled_train_flops": ck.get("flops"),
                         "dataset_hash": ds.hash, "checkpoint": ck["path"], "harness": "lm-eval"})
    return rows


def _opt(args: list[str], name: str) -> list[str]:
    """Every value of option ``name`` in lm-eval-style ``args`` (``--x V`` or ``--x=V``)."""
    out = []
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith(name + "="):
            out.append(a.split("=", 1)[1])
    return out


def _meta_data(meta: str) -> str | None:
    """The dataset directory an lm-eval ``--metadata`` JSON object names ("data"), or None."""
    try:
        data = json.loads(meta).get("data")
    except (json.JSONDecodeError, AttributeError):
        raise UserError(f"--metadata {meta!r} is not a JSON object") from None
    if data is not None and not (isinstance(data, str) and data):
        raise UserError(f"--metadata data must be a dataset directory path (got {data!r})")
    return data


def check_inputs(args: list[str]) -> None:
    """What lm-eval would take without a word, refused before it runs: an --include_path that
    is not a directory, task files (``--metadata`` data) of another dataset than the one the
    model was trained on, and --rows or lm-eval's --output_path that would land on the run or
    the dataset."""
    from depthbench.fsio import refuse_over_inputs
    from depthbench.rows import row_paths
    for inc in _opt(args, "--include_path"):
        if not Path(inc).is_dir():
            raise UserError(f"--include_path {inc} is not a directory of lm-eval task files")
    margs = dict(kv.partition("=")[::2] for m in _opt(args, "--model_args") for kv in m.split(",") if kv)
    run = margs.get("pretrained")
    run_dir = run_dir_of(run) if run else None
    data = None
    for meta in _opt(args, "--metadata"):
        data = _meta_data(meta) or data
    if run_dir is not None and data and (Path(data) / "manifest.json").is_file():
        trained = read_run(run_dir).get("dataset_hash")
        try:
            given = json.loads((Path(data) / "manifest.json").read_text()).get("dataset_hash")
        except (OSError, ValueError, AttributeError):
            given = None
        if trained and given and trained != given:
            raise UserError(f"--metadata data {data} is dataset {str(given)[:12]}, but {run} was "
                            f"trained on {str(trained)[:12]}: its task files would score the "
                            "model on questions of another dataset; pass the run's own dataset")
    data = data or margs.get("data") or (read_run(run_dir).get("data") if run_dir else None)
    from depthbench.loading import parse_spec
    reads = {"run": run_dir, "data": Path(data) if data else None, "inputs": [run] if run else [],
             "checkpoint": parse_spec(run).folder if run else None}
    for out in _opt(args, "--rows"):
        refuse_over_inputs(row_paths(out), flag="--rows", **reads)
    for out in _opt(args, "--output_path") + _opt(args, "-o"):   # lm-eval's own results files
        refuse_over_inputs([out], flag="--output_path", **reads)


def run_depths(args: list[str]) -> tuple[list[dict], list[Path]]:
    """``depthbench lm-eval [run] --depths SPEC ...``: lm-eval's tasks at every depth of SPEC
    (``harness_tasks``), from lm-eval-style arguments (--model depthbench, --model_args without
    n_loops, --tasks, --limit, --batch_size, --metadata, --include_path) and --rows FILE;
    returns the rows and the files written (none without --rows)."""
    from depthbench.rows import write_rows
    from depthbench.schedules import parse_depths

    if args[:1] == ["run"]:
        args = args[1:]
    check_inputs(args)
    p = argparse.ArgumentParser(prog="depthbench lm-eval run --depths", add_help=False,
                                exit_on_error=False, allow_abbrev=False)
    for name in ("--model", "--model_args", "--tasks", "--depths", "--rows", "--metadata",
                 "--include_path", "--limit", "--batch_size"):
        p.add_argument(name)
    try:
        ns, extra = p.parse_known_args(args)
    except argparse.ArgumentError as e:
        raise UserError(f"depthbench lm-eval --depths: {e}") from None
    if extra:
        raise UserError(f"depthbench lm-eval --depths takes --model_args, --tasks, --limit, "
                        f"--batch_size, --metadata, --include_path and --rows, not {extra[0]}; "
                        "run lm-eval once per depth (n_loops=K) for its other options")
    if ns.model not in (None, "depthbench"):
        raise UserError(f"--depths needs --model depthbench (got {ns.model})")
    margs = dict(kv.partition("=")[::2] for kv in (ns.model_args or "").split(",") if kv)
    if "n_loops" in margs:
        raise UserError("--depths gives the serving depths; leave n_loops out of --model_args")
    unknown = sorted(set(margs) - {"pretrained", "data", "checkpoint_step", "batch_size"})
    if unknown:
        raise UserError(f"with --depths, --model_args takes pretrained, data, checkpoint_step "
                        f"and batch_size, not {unknown[0]}")
    run = margs.get("pretrained")
    if not run:
        raise UserError("--model_args needs pretrained=RUN_DIR (or ouro:DIR, huginn:DIR, hf:DIR)")
    if not ns.tasks:
        raise UserError("--depths needs --tasks T1,T2,...")
    meta_data = _meta_data(ns.metadata) if ns.metadata else None
    run_dir = run_dir_of(run)
    data = margs.get("data") or meta_data or (read_run(run_dir).get("data")
                                             if run_dir is not None else None)
    if not data:
        raise UserError(f"{run} records no dataset; pass --metadata '{{\"data\": \"DIR\"}}' (for "
                        "a ported model, a text dataset prepared with its tokenizer)")

    depths = parse_depths(ns.depths)
    limit = int_arg("--limit", ns.limit, 1, 1 << 30) if ns.limit is not None else None
    bs = int_arg("batch_size", ns.batch_size or margs.get("batch_size") or 64, 1, 1 << 16)
    step = (int_arg("checkpoint_step", margs["checkpoint_step"], 0, 1 << 40)
            if "checkpoint_step" in margs else None)
    tasks = [t for t in ns.tasks.split(",") if t]
    rows = harness_tasks(run, data, depths, tasks, step, limit, bs,
                         task_path=ns.include_path or "")
    written = list(write_rows(rows, Path(ns.rows), "task")) if ns.rows else []
    return rows, written
