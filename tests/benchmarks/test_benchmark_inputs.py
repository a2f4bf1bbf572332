"""The benchmark scripts refuse bad arguments and options in one line, before any work."""

import subprocess
import sys

import pytest
from refusals import ROOT


@pytest.mark.parametrize("script,args", [
    ("bench_text.py", ["--mb", "0"]), ("bench_eval.py", ["--readme", "/nonexistent.json"]),
    ("bench_generate.py", ["--people", "-5"]), ("bench_serve.py", ["--width", "x"]),
    ("bench_grid.py", ["--grid-seeds", "0"]),
    # kept rows that are not JSON, or another benchmark's; rows that could not be kept, refused
    # before anything runs; names and lists checked at parse time
    ("bench_train.py", ["--readme", str(ROOT / "README.md")]),
    ("bench_train.py", ["--readme", str(ROOT / "docs" / "benchmarks" / "eval.json")]),
    ("bench_eval.py", ["--json-out", "/proc/none/rows.json"]),
    ("bench_generate.py", ["--json-out", str(ROOT / "docs")]),
    ("bench_grid.py", ["--shared-work", "no-such-spec"]),
    ("bench_grid.py", ["--against", "no-such-commit"]),
    ("cloze_floors.py", ["/nonexistent"]), ("cloze_floors.py", [str(ROOT / "docs")]),
])
@pytest.mark.slow
def test_benchmark_scripts_refuse_bad_arguments_in_one_line(script, args):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-500:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("args,needle", [
    (["serve_cpu.py", "--threads", "x"], "'x' is not an integer"),
    (["serve_cpu.py", "--threads", "1,x"], "'x' is not an integer"),
])
def test_benchmark_scripts_refuse_bad_options_first(tmp_path, args, needle):
    f = tmp_path / "afile"
    f.write_text("x")
    rows = ROOT / "docs" / "serving" / "cpu_runs.jsonl"
    before = rows.read_bytes() if rows.exists() else None
    script, *rest = args
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script),
                        *[a.format(file=f) for a in rest]], capture_output=True, text=True)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (rows.read_bytes() if rows.exists() else None) == before
