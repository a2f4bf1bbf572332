"""What every benchmark script shares: its result rows kept as JSON (``--json-out``) and the
README's figures printed from kept rows (``--readme``), so that the README's Benchmarks table is
regenerated from committed rows (``docs/benchmarks/``) and a test checks it against them."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "docs" / "benchmarks"


class Parser(argparse.ArgumentParser):
    """A benchmark's options: a bad one is one line on stderr and exit status 2, like the CLI."""

    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def count(lo: int = 1, hi: int = 1 << 30) -> Callable[[str], int]:
    """An argparse type: an integer in lo..hi."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is not in {lo}..{hi}")
        return v
    return parse


def counts(lo: int = 1, hi: int = 1 << 30) -> Callable[[str], list[int]]:
    """An argparse type: a comma-separated list of integers in lo..hi (``1,2``), every one
    checked before anything runs."""
    one = count(lo, hi)

    def parse(text: str) -> list[int]:
        parts = [t.strip() for t in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"{text!r} is not a list like 1,2")
        return [one(t) for t in parts]
    return parse


def existing_file(text: str) -> Path:
    """An argparse type: kept rows, a file holding one JSON object."""
    p = Path(text)
    if not p.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file (the kept rows are under "
                                         "docs/benchmarks/ and docs/serving/)")
    try:
        ok = isinstance(json.loads(p.read_text(encoding="utf-8")), dict)
    except (UnicodeDecodeError, ValueError):
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"{text} is not kept rows (a JSON object written by "
                                         "--json-out)")
    return p


def json_out(text: str) -> Path:
    """An argparse type: where rows will be kept, checked before anything runs (a benchmark
    that ran for minutes must not fail at its last line)."""
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a .json file path")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:   # the only sure test of writing there is writing there (a file removed at once)
        tempfile.TemporaryFile(dir=parent).close()
    except OSError:
        raise argparse.ArgumentTypeError(f"cannot write {text} ({parent} is not a writable "
                                         "directory)") from None
    return p


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json-out", type=json_out, default=None,
                    help="keep the result rows in this JSON file (the committed ones live in "
                         "docs/benchmarks/ and docs/serving/)")
    ap.add_argument("--readme", type=existing_file, default=None, metavar="JSON",
                    help="print the README's figures from kept rows and exit (nothing is run)")


def from_kept(args, cell: Callable[[dict], str]) -> bool:
    """With ``--readme``: print the README cell of the kept rows; whether it did."""
    if args.readme is None:
        return False
    try:
        text = cell(json.loads(args.readme.read_text()))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        sys.stderr.write(f"{Path(sys.argv[0]).name}: error: {args.readme} does not hold this "
                         "benchmark's rows; give the file its --json-out wrote\n")
        sys.exit(2)
    print(text)
    return True


def keep(args, res: dict, cell: Callable[[dict], str]) -> None:
    """Print the README cell of this run and, with ``--json-out``, keep its rows."""
    print(f"README: {cell(res)}")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json_out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(res, indent=1, default=str) + "\n")
        tmp.replace(args.json_out)


def people(n: int) -> str:
    """1000000 -> 1M, 250000 -> 250k."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)
