"""What every ``depthbench`` command shares: the error contract (exit status 2 and one line,
no traceback), bounded option types, the ``--json`` line, progress bars, ``--set`` parsing and
the ``--config`` file merged with the options given on the command line."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import sys
import threading

import click

from depthbench.config import TRACKERS, ConfigError, read_config_file
from depthbench.errors import UserError
from depthbench.schedules import MAX_DEPTH


def fail(message: str) -> None:
    raise UserError(message)


class FiniteFloat(click.ParamType):
    """A float in [lo, hi]; unlike click.FloatRange it refuses nan and inf."""
    name = "float"

    def __init__(self, lo: float, hi: float):
        self.lo, self.hi = lo, hi

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not (math.isfinite(v) and self.lo <= v <= self.hi):
            self.fail(f"{value!r} is not a finite number in [{self.lo:g}, {self.hi:g}]", param, ctx)
        return v


class AutoInt(click.ParamType):
    """An integer in [lo, hi], or ``auto`` (read as -1: the device's default)."""
    name = "integer|auto"

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            v = value
        elif str(value).strip().lower() == "auto":
            return -1
        else:
            try:
                v = int(str(value))
            except ValueError:
                self.fail(f"{value!r} is neither auto nor an integer", param, ctx)
        if v == -1:
            return v
        if not self.lo <= v <= self.hi:
            self.fail(f"{v} is not auto nor in {self.lo}..{self.hi}", param, ctx)
        return v


# every numeric option is bounded where it is parsed; the limits are far beyond real use
SEED = click.IntRange(0, 2**32 - 1)
STEPS = click.IntRange(1, 10**9)
FLOP_STEPS = click.IntRange(1, 10**6)  # flops draws every step's depth (about 20 us a step)
BATCH = click.IntRange(1, 1 << 20)
COUNT = click.IntRange(1, 1 << 30)
DEPTH = click.IntRange(1, MAX_DEPTH)
WIDTH = click.IntRange(1, 1 << 16)


def _terminated(signum, frame):
    # unwinds like an interrupt, so every temporary output is removed on the way out
    raise SystemExit(128 + signum)


class Group(click.Group):
    def main(self, args=None, prog_name=None, **extra):
        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminated) if on_main_thread else None
        try:
            return self._main(args, prog_name, **extra)
        finally:
            if on_main_thread:
                signal.signal(signal.SIGTERM, previous)

    def _main(self, args, prog_name, **extra):
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
        except OSError as e:  # a full disk, a read-only directory, a vanished file
            click.echo(f"depthbench: error: {os_error_line(e)}", err=True)
            sys.exit(2)


def os_error_line(e: OSError) -> str:
    """What went wrong on the file system, in one line with its fix: an output under a file
    (a file stands where a folder of the path must be), else the system's words."""
    from pathlib import Path
    if isinstance(e, (FileExistsError, NotADirectoryError)) and e.filename:
        p = Path(e.filename)
        file = next((q for q in (p, *p.parents) if q.is_file()), None)
        if file is not None:
            return (f"{file} is a file, so nothing can be written under it ({e.filename}); "
                    "choose an output path whose folders are folders")
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or e}{where}; fix the path or free space and run again"


def emit_json(obj: dict) -> None:
    """The --json contract: one JSON object, the last line of stdout."""
    click.echo(json.dumps(obj, sort_keys=True, default=str))


from depthbench.console import debug, progress_bar, say, set_verbosity  # noqa: E402,F401  (bars, log)


def parse_sets(pairs: tuple[str, ...]) -> dict:
    from depthbench.data_gen.config import parse_value
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            fail(f"--set {p!r} is not key=value (e.g. --set n_people=1000)")
        out[key.strip()] = parse_value(value.strip())
    return out


def build_config(cls, config_file: str | None, given: dict, base: dict | None = None):
    """A stage config: the ``--config`` file's keys (JSON or TOML), then ``base``, then the
    options given on the command line (None and empty tuples are "not given")."""
    d = read_config_file(config_file) if config_file else {}
    d.update(base or {})
    d.update({k: v for k, v in given.items() if v is not None and v != ()})
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [f for f in required if f not in d]
    if missing:
        raise UserError(f"missing {' and '.join(missing)}: give {'/'.join(m.upper() for m in missing)} "
                        "on the command line or in --config")
    try:
        cfg = cls.from_dict(d)
    except ConfigError as e:  # name the option the user typed, where the key has one
        key, sep, msg = str(e).partition(": ")
        opt = OPTION_NAMES.get(key, "--" + key.replace("_", "-"))
        raise ConfigError(f"{opt}: {msg}" if sep and key in given else str(e)) from None
    debug(f"{cls.__name__}: {json.dumps(cfg.to_dict(), sort_keys=True, default=str)}")
    return cfg


# config keys whose option is not --KEY-WITH-DASHES
OPTION_NAMES = {"splits": "--split", "model_set": "--set", "depth_a": "--depths-a", "depth_b": "--depths-b"}


def default_of(cls, name: str) -> str:
    """A config field's default, for ``show_default`` (one source of truth: the dataclass)."""
    f = cls.__dataclass_fields__[name]
    v = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return ",".join(map(str, v)) if isinstance(v, tuple) else str(v)


def config_option(fn):
    return click.option("--config", "config_file", type=click.Path(dir_okay=False),
                        help="JSON or TOML file of this command's config keys (as `depthbench run "
                             "--plan` writes them); options given here replace its keys.")(fn)


def json_option(fn):
    return click.option("--json", "as_json", is_flag=True,
                        help="Print a JSON summary as the last line.")(fn)


def tracker_options(fn):
    """``--tracker NAME`` and ``--tracker-dir DIR``: also log what the command writes to an
    experiment tracker, offline (its rows or metrics.jsonl stay the truth)."""
    fn = click.option("--tracker-dir", type=click.Path(file_okay=False),
                      help="Where the tracker writes (default: tracker/ beside the run or the "
                           "rows).")(fn)
    return click.option("--tracker", type=click.Choice(TRACKERS),
                        help="Also log to this experiment tracker, offline (pip install it; "
                             "`depthbench track` replays rows later).")(fn)


def pop_tracker(given: dict) -> tuple[str, str] | None:
    """The (tracker, directory) a command was given, taken out of its config options."""
    name, where = given.pop("tracker", None), given.pop("tracker_dir", None)
    return (name, where or "") if name else None


def log_to_tracker(tracker: tuple[str, str] | None, kind: str, rows: list[dict],
                   written: str | None) -> None:
    """Log a command's result rows of ``kind`` (eval, probe, serve) to ``tracker``: the rows
    file it wrote where it wrote one (the truth, provenance included), else the rows it kept in
    memory. The directory defaults to tracker/ beside the rows file (or here)."""
    if tracker is None or not rows:
        return
    from depthbench.trackers import log_row_files, log_rows, tracker_dir
    out = tracker_dir(tracker[1], written or "rows")
    logged = (log_row_files([written], tracker[0], out) if written
              else log_rows({kind: rows}, tracker[0], out))
    say(f"logged {sum(logged.values())} points of {len(logged)} run(s) to {tracker[0]} under {out}")


def _number_list(text: str, option: str, kind) -> tuple:
    try:
        return tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UserError(f"{option}: {text!r} is not a comma-separated list of "
                        f"{'integers' if kind is int else 'numbers'}") from None


def float_list(text: str, option: str) -> tuple[float, ...]:
    return _number_list(text, option, float)


def int_list(text: str, option: str) -> tuple[int, ...]:
    return _number_list(text, option, int)
