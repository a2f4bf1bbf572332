"""The grid and report commands: ``depthbench run`` (a spec's whole grid, resumable),
``report`` (figures and tables from result rows), ``scale-report`` (Table 3 across grids),
``track`` (rows into an experiment tracker) and ``docs`` (every generated page from the
committed rows)."""

from __future__ import annotations

import click

from depthbench.cli import support as cs
from depthbench.cli.support import build_config, default_of, emit_json, fail
from depthbench.config import ReportConfig


def _spec_sets(pairs: tuple[str, ...], seeds: str | None) -> dict:
    """``--set SECTION.KEY=VALUE`` pairs (values as JSON where they parse) and ``--seeds``."""
    out = cs.parse_sets(pairs)
    if seeds is not None:
        try:
            out["train.seeds"] = [int(x) for x in seeds.split(",") if x.strip()]
        except ValueError:
            fail(f"--seeds {seeds!r}: give seeds as integers separated by commas, e.g. 0,1,2")
        if not out["train.seeds"]:
            fail("--seeds is empty; give at least one seed, e.g. --seeds 0")
    return out


@click.command("run")
@click.argument("spec", required=False)
@click.option("--out", type=click.Path(file_okay=False),
              help="Experiment directory (default: runs/NAME); the report goes to OUT/report.")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Change one knob of the spec, e.g. train.steps=200, train.set.d_model=32, "
                   "eval.depths=1-8 (repeatable; values as JSON where they parse).")
@click.option("--seeds", help="The seeds to train, e.g. 0,1 (the same as --set train.seeds=[0,1]).")
@click.option("--plan", is_flag=True, help="Write every stage's config and print its command; run nothing.")
@click.option("--rerun", multiple=True, metavar="STAGE",
              help="Rerun the finished stages matching this pattern (e.g. 'train-*', 'eval-*' or "
                   "all) whose settings changed, replacing their outputs.")
@click.option("--executor", type=click.Choice(["local", "slurm", "submitit-local"]), default="local",
              show_default=True, help="local: a process pool here; slurm: one SLURM job per stage "
              "through submitit; submitit-local: submitit's local executor.")
@cs.json_option
def run_cmd(spec, out, sets, seeds, plan, rerun, executor, as_json):
    """Run an experiment grid: generate, train, eval, probe, serve-bench, report.

    SPEC: a TOML file or a packaged experiment (smoke, quickstart, presets, table3, table3-lr,
    table3-lr-x2, table3-lr-x4,
    table3-finish, probes, budgets, budgets-lr, table3-x2, table3-x4, table3-x4b, matched,
    fixed-depths, text-quickstart, text-table3, text-table3-deep, text-table3-deep-lr,
    paper-200m, paper-1b, paper-1b-text), or a calibration recipe (calibration/NAME,
    docs/calibration.md; calibration/text-NAME, docs/calibration-text.md); without SPEC, the
    quickstart. Everything, the report included, goes under OUT (runs/NAME): a committed report
    under reports/ is replaced only by copying one there on purpose. Finished stages are
    skipped on a rerun, an interrupted one continues, a changed one needs --rerun.

    \b
    Examples:
      depthbench run smoke
      depthbench run
      depthbench run table3 --seeds 0,1 --set train.steps=300 --out runs/table3-short
      depthbench run paper-200m --plan
      depthbench run my_grid.toml --out /scratch/grid --executor slurm
    """
    from depthbench.config import RunConfig
    from depthbench.pipeline import run_grid

    cfg = RunConfig(spec=spec or "", out=out or "", sets=_spec_sets(sets, seeds), plan=plan,
                    rerun=tuple(rerun), executor=executor)
    summary = run_grid(cfg, log=cs.say)
    if not plan:
        click.echo(f"report: {summary['report']}/index.html ({summary['seconds']:.0f}s)")
    if as_json:
        emit_json(summary)


@click.command("report")
@click.argument("results", nargs=-1, type=click.Path())
@click.option("--out", type=click.Path(file_okay=False), help="Report directory, e.g. reports/NAME.")
@click.option("--title", show_default=default_of(ReportConfig, "title"))
@click.option("--reference", help="Schedule the others are compared with on paired seeds "
              "(default: the first uniform schedule).")
@cs.config_option
@cs.json_option
def report_cmd(config_file, as_json, **given):
    """Draw figures and tables from result rows into a self-contained report.

    \b
    Examples:
      depthbench report runs/quickstart/report/rows --out reports/mine
      depthbench report runs/uniform/eval runs/ff/eval --out reports/ab
    """
    from depthbench.report import run_report

    cfg = build_config(ReportConfig, config_file, given)
    files = run_report(cfg)
    click.echo(f"wrote {len(files)} files to {cfg.out}")
    if as_json:
        emit_json({"out": str(cfg.out), "files": [str(f) for f in files]})


@click.command("track")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--tracker", required=True, type=click.Choice(["tensorboard", "trackio", "wandb"]),
              help="Where to log (installed separately: pip install tensorboard, trackio or wandb).")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="The tracker's log directory (TensorBoard: --logdir; trackio and wandb: the "
                   "project, named after it).")
@cs.json_option
def track_cmd(sources, tracker, out, as_json):
    """Replay runs and result rows into an experiment tracker, offline: a run's training curve
    (metrics.jsonl) and in-training evaluations against the step, and each run's depth sweep
    (eval rows) against the serving depth. The files stay the truth; replay any time.

    \b
    Examples:
      depthbench track runs/quickstart/runs/* --tracker tensorboard --out tb/quickstart
      depthbench track runs/quickstart/results/eval --tracker tensorboard --out tb/quickstart
      tensorboard --logdir tb/quickstart
    """
    from depthbench.trackers import replay
    logged = {}
    for s in sources:
        logged.update(replay(s, tracker, out))
    click.echo(f"logged {sum(logged.values())} points of {len(logged)} run(s) to {tracker} "
               f"under {out}")
    if as_json:
        emit_json({"tracker": tracker, "out": str(out), "logged": logged})


@click.command("scale-report")
@click.argument("grids", nargs=-1, required=True, type=click.Path())
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Report directory, e.g. reports/text-scale.")
@click.option("--title", default="Table 3 across model sizes", show_default=True)
@cs.json_option
def scale_report_cmd(grids, out, title, as_json):
    """Draw Table 3's gap against model size and training FLOPs from several text grids.

    GRIDS are the rows of one text Table 3 grid each (a report's rows/ or a run's results/),
    one per model size or training length, each compared with its own uniform:1-16 arm on
    paired seeds. The report states the trend by a rule fixed in advance, whether each grid's
    model uses its depth, and the paper's published gaps beside them.

    \b
    Examples:
      depthbench scale-report reports/text-scale-d16/rows reports/text-table3-deep-lr3e-3/rows \\
          reports/text-scale-d128/rows --out reports/text-scale
    """
    from depthbench.report.scale import build_scale_report
    files = build_scale_report(list(grids), out, title)
    click.echo(f"wrote {len(files)} files to {out}")
    if as_json:
        emit_json({"out": str(out), "files": [str(f) for f in files]})


@click.command("docs")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if a page is not what the rows give.")
@click.option("--root", type=click.Path(file_okay=False), default=None,
              help="The source tree (the folder with README.md, docs/ and reports/; default: "
                   "this checkout).")
def docs_cmd(check, root):
    """Regenerate every generated page from committed rows: the README's blocks, docs/results.md,
    and in a source tree the calibration tables, docs/benchmarks.md's serving blocks and the
    bad-input matrix.

    \b
    Examples:
      depthbench docs
      depthbench docs --check     (exit 1 if a page would change)
    """
    import sys

    from depthbench.docs import main as docs_main
    code = docs_main((["--check"] if check else []) + (["--root", root] if root else []),
                     prog="depthbench docs")
    if code:
        sys.exit(code)
