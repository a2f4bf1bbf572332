"""What every bad-input test reads: a CLI call in process and the one-line refusal it must give
(exit status 2, one line naming the problem, no traceback); the committed rows some cases edit."""

from pathlib import Path

from click.testing import CliRunner

from depthbench.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT / "reports" / "text-table3-deep-lr3e-3" / "rows"
TABLE3 = ROOT / "reports" / "table3" / "rows"


def cli(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(r, *needles):
    """Exit 2 and one error line on stderr holding every needle (a log line before it may be on
    stdout)."""
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    for n in needles:
        assert n in lines[0], lines[0]


def one_line_exit_2(r, needle: str):
    """Exit 2 and one line in all the output, holding ``needle``."""
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    assert needle in lines[0], lines[0]
