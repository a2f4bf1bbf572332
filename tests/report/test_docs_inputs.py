"""`depthbench docs` refuses a tree it cannot generate from in one line."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from refusals import ROOT


def _tree(tmp: Path) -> Path:
    root = tmp / "tree"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text((ROOT / "README.md").read_text())
    shutil.copytree(ROOT / "reports", root / "reports",
                    ignore=shutil.ignore_patterns("*.png", "*.html"))
    return root


@pytest.mark.parametrize("break_it,needle", [
    (lambda r: shutil.rmtree(r / "reports" / "matched" / "rows"), "reports/matched/rows is missing"),
    (lambda r: (r / "reports" / "matched" / "rows" / "eval.csv").write_text("kind,run\neval,x\n"),
     "reports/matched:"),
    (lambda r: [p.unlink() for p in (r / "reports" / "matched" / "rows").iterdir()],
     "reports/matched: no result files"),
    (lambda r: (r / "README.md").unlink(), "has no README.md"),
    (lambda r: (r / "README.md").write_text("<!-- generated: nope -->\nx\n<!-- end -->\n"),
     "block 'nope' has no generator"),
])
@pytest.mark.slow
def test_the_docs_generator_refuses_in_one_line(tmp_path, break_it, needle):
    root = _tree(tmp_path)
    break_it(root)
    readme = (root / "README.md").read_text() if (root / "README.md").exists() else None
    r = subprocess.run([sys.executable, "-m", "depthbench.docs", "--root", str(root)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (root / "docs" / "results.md").exists()
    assert ((root / "README.md").read_text() if (root / "README.md").exists() else None) == readme
