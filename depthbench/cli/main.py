"""The ``depthbench`` command line: each command parses its options into the stage's config
(``depthbench.config``), calls the stage's action, and prints. ``--config FILE`` supplies the
same config from a file (what ``depthbench run --plan`` writes); options given replace its keys.
A user error (bad path, spec, config value, mismatched files) ends as exit status 2 with one
line on stderr: ``depthbench: error: ...``, and no traceback."""

from __future__ import annotations

import click

from depthbench.cli import support as cs
from depthbench.cli.data import generate_cmd, prepare_text_cmd
from depthbench.cli.evaluate import eval_cmd, lm_eval_cmd
from depthbench.cli.run import docs_cmd, report_cmd, run_cmd, scale_report_cmd, track_cmd
from depthbench.cli.serve import serve_bench_cmd, serve_sim_cmd
from depthbench.cli.support import parse_sets
from depthbench.cli.train import export_cmd, flops_cmd, probe_update_cmd, train_cmd

__all__ = ["main", "parse_sets"]


@click.group(cls=cs.Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="depthbench")
@click.option("-q", "--quiet", is_flag=True, help="Results and errors only: no progress lines or bars.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also the resolved config of each command that builds one (generate, train, "
                   "eval, probe-update, serve-bench, serve-sim).")
def main(quiet, verbose):
    """depthbench: benchmarks for looped (recurrent-depth) transformers.

    Generate a fictional-person knowledge dataset, train looped models under depth schedules,
    sweep serving depths, benchmark depth-adaptive serving, and draw reports.
    Progress goes through logging: -q hides it, -v adds detail (depthbench -q run smoke).
    """
    if quiet and verbose:
        raise click.UsageError("give -q or -v, not both")
    cs.set_verbosity(-1 if quiet else 1 if verbose else 0)


# one module per command family (README: "Commands and where they live")
for _cmd in (generate_cmd, prepare_text_cmd,                       # cli/data.py
             train_cmd, flops_cmd, export_cmd, probe_update_cmd,   # cli/train.py
             eval_cmd, lm_eval_cmd,                                # cli/evaluate.py
             serve_bench_cmd, serve_sim_cmd,                       # cli/serve.py
             run_cmd, report_cmd, scale_report_cmd, track_cmd, docs_cmd):   # cli/run.py
    main.add_command(_cmd)
