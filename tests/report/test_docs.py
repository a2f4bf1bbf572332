"""The results pages are generated: rerunning the generator changes no file, and every table a
reference page quotes from a benchmark's kept rows is that benchmark's own rendering of them."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from depthbench import docs

ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str):
    if str(ROOT / "benchmarks") not in sys.path:   # the scripts import their shared helper
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _lines(page: str) -> list[str]:
    return (ROOT / "docs" / page).read_text().splitlines()


@pytest.mark.slow
def test_rerunning_the_generator_changes_no_file():
    for path, text in docs.pages(ROOT).items():
        assert path.read_text() == text, f"run depthbench docs ({path.name} is stale)"


def test_readme_is_short_and_every_generated_block_is_filled():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    blocks = docs.BLOCK.findall(text)
    assert {b[1] for b in blocks} == {"results", "quickstart-findings", "text-scale"}
    assert all(b[2].strip() for b in blocks), "an empty generated block"


@pytest.mark.slow
def test_generator_check_mode_reports_a_stale_page(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "reports").symlink_to(ROOT / "reports")   # every report's rows, as committed
    (tmp_path / "README.md").write_text("x\n<!-- generated: results -->\nold\n<!-- end -->\n")
    assert docs.main(["--root", str(tmp_path), "--check"]) == 1
    assert (tmp_path / "README.md").read_text().count("old") == 1   # --check writes nothing
    assert docs.main(["--root", str(tmp_path)]) == 0
    assert docs.main(["--root", str(tmp_path), "--check"]) == 0


def test_serving_tables_are_the_committed_runs():
    """The serving pages' measured figures are `bench_serve.py --readme` of the committed
    `--json-out` file, and the CPU table `serve_cpu.py`'s of its rows, line for line."""
    page = _lines("serving.md") + _lines("benchmarks.md")
    out = json.loads((ROOT / "docs" / "serving" / "bench_serve.json").read_text())
    for line in _bench("bench_serve").readme_lines(out):
        assert line in page, f"docs/serving.md or benchmarks.md should read: {line}"
    cpu = _bench("serve_cpu")
    for line in cpu.table_lines(cpu.load_rows()) + cpu.summary_lines(cpu.load_rows()):
        assert line in page, f"docs/serving.md or benchmarks.md should read: {line}"


BENCHMARKS = {   # docs/benchmarks.md's row -> (script, its committed rows)
    "`python benchmarks/bench_generate.py`": ("bench_generate", "generate.json"),
    "`python benchmarks/bench_train.py`": ("bench_train", "train.json"),
    "`python benchmarks/bench_train.py --compile`": ("bench_train", "compile.json"),
    "`python benchmarks/bench_eval.py`": ("bench_eval", "eval.json"),
    "`python benchmarks/bench_grid.py --grid`": ("bench_grid", "grid.json"),
    "`python benchmarks/bench_grid.py --threads 1 2`": ("bench_grid", "step.json"),
    "`python benchmarks/bench_grid.py --against 376558b`": ("bench_grid", "grid-376558b.json"),
    "`python benchmarks/text_hygiene.py --licenses DIR`": ("text_hygiene", "hygiene.json"),
    "`python benchmarks/text_hygiene.py --licenses DIR` (the code at 6d38e54, before "
    "containment)": ("text_hygiene", "hygiene-6d38e54.json"),
}


def test_benchmarks_table_is_its_rows():
    page = _lines("benchmarks.md")
    for row, (script, kept) in BENCHMARKS.items():
        got = [line for line in page if line.startswith(f"| {row} |")]
        assert len(got) == 1, f"docs/benchmarks.md should have one row {row}"
        cell = got[0].rstrip().rstrip("|").rsplit(" | ", 1)[1].strip()
        res = json.loads((ROOT / "docs" / "benchmarks" / kept).read_text())
        assert cell == _bench(script).readme_cell(res), (
            f"rerun `python benchmarks/{script}.py --readme docs/benchmarks/{kept}`")


def test_one_pass_writes_every_page_a_script_renders():
    """`depthbench docs` in a source tree: the calibration tables, the bad-input matrix and
    docs/benchmarks.md (its serving blocks the benchmarks' rendering of the kept rows), beside
    the results pages; outside a source tree, none of them."""
    got = docs.script_pages(ROOT)
    names = {p.relative_to(ROOT).as_posix() for p in got}
    assert names == {"docs/calibration.md", "docs/calibration-text.md", "docs/benchmarks.md",
                     "docs/bad-inputs.md"}
    page = ROOT / "docs" / "benchmarks.md"
    assert {b[1] for b in docs.BLOCK.findall(page.read_text())} == {
        "serve-cpu-grid", "serve-sim", "serve-kv", "serve-cpu-runs"}
    out = json.loads((ROOT / "docs" / "serving" / "bench_serve.json").read_text())
    assert "\n".join(_bench("bench_serve").sim_lines(out)) in got[page]
    assert docs.script_pages(ROOT / "docs") == {}   # outside a source tree: none
