"""The ``depthbench`` command line: a thin click layer over the library.

Every user error (bad path, spec, config value, mismatched files) ends as exit status 2 with
one line on stderr: ``depthbench: error: ...``, and no traceback.
"""

from __future__ import annotations

import json
import sys
import time

import click

from depthbench.errors import UserError


def fail(message: str) -> None:
    raise UserError(message)


class _Group(click.Group):
    def main(self, args=None, prog_name=None, **extra):
        try:
            return super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("depthbench: interrupted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            click.echo(f"depthbench: error: {' '.join(e.format_message().split())}", err=True)
            sys.exit(2)
        except UserError as e:
            click.echo(f"depthbench: error: {' '.join(str(e).split())}", err=True)
            sys.exit(2)


def emit_json(obj: dict) -> None:
    """The --json contract: one JSON object, the last line of stdout."""
    click.echo(json.dumps(obj, sort_keys=True, default=str))


def progress_bar(total: int, desc: str, unit: str = "it"):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, disable=not sys.stderr.isatty(),
                dynamic_ncols=True, leave=False)


def parse_sets(pairs: tuple[str, ...]) -> dict:
    from data_gen.config import parse_value
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            fail(f"--set {p!r} is not key=value (e.g. --set n_people=1000)")
        out[key.strip()] = parse_value(value.strip())
    return out


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="depthbench")
def main():
    """depthbench: benchmarks for looped (recurrent-depth) transformers.

    Generate a fictional-person knowledge dataset, train looped models under depth schedules,
    sweep serving depths, benchmark depth-adaptive serving, and draw reports.
    """


@main.command()
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Dataset directory to create.")
@click.option("--preset", default="tiny", show_default=True, help="tiny, small or paper.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML file whose keys replace the preset's.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override one config key (repeatable), e.g. --set n_people=1000000.")
@click.option("--seed", type=int, help="Random seed (replaces the config's).")
@click.option("--force", is_flag=True, help="Replace a non-empty --out directory.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line.")
def generate(out, preset, config_file, sets, seed, force, as_json):
    """Generate the synthetic fictional-person dataset.

    \b
    Examples:
      depthbench generate --out data/tiny
      depthbench generate --out data/paper --preset paper --set n_people=2000000
      depthbench generate --out data/x --set attributes=city:4096:2,employer:1024:1
    """
    from data_gen import generate as gen
    from data_gen import resolve_config

    try:
        cfg = resolve_config(preset, config_file, parse_sets(sets), seed)
    except (ValueError, TypeError) as e:
        fail(f"invalid dataset config: {e}")
    t0 = time.perf_counter()
    bar = progress_bar(cfg.n_people + cfg.n_unseen_people, "generate", "people")
    try:
        manifest = gen(cfg, out, force=force, progress=bar.update)
    except FileExistsError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write the dataset to {out}: {e.strerror or e}")
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    c = manifest["counts"]
    facts = c["facts"]["eval_reordered"]
    click.echo(f"wrote {out}: {c['people']} people ({c['unseen_people']} unseen controls), "
               f"{c['attributes']} attributes, {facts} facts, {c['train_sequences']} training "
               f"sequences, {c['train_tokens']} training tokens, ceiling "
               f"{manifest['ceiling_bits']:.1f} bits/person, {seconds:.1f}s")
    if as_json:
        emit_json({"out": str(out), "dataset_hash": manifest["dataset_hash"],
                   "people": c["people"], "facts": facts, "train_tokens": c["train_tokens"],
                   "ceiling_bits": manifest["ceiling_bits"], "seconds": seconds})
