"""The CPU serving figure at the CLI's default workload, as a new user runs it, with its rows kept.

Each run is the documented command, unchanged but for the scheduler knobs of its setting:

    OMP_NUM_THREADS=T depthbench serve-bench --random small --set d_model=512 --exit trace:8 \\
        --width 64 --requests 256 --modes static,no_refill,cdb --json

For every setting x threads x repeat (and, with ``--beside``, with a CPU-bound process running
on another core) it appends one row per mode to ``docs/serving/cpu_runs.jsonl``: the mode's
fraction of the ideal time of its work (``serving.bound``), its bound, its whole-run tokens/s
and speedups, and the run's settings. The table the README quotes is regenerated from
the committed rows (``--table-only``, and a test checks the README against it):

    python benchmarks/serve_cpu.py --threads 1,2 --repeats 3          # idle machine
    python benchmarks/serve_cpu.py --threads 1 --repeats 1 --beside    # beside a CPU-bound process
    python benchmarks/serve_cpu.py --table-only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_rows import Parser, count, counts

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "docs" / "serving" / "cpu_runs.jsonl"
COMMAND = ["depthbench", "serve-bench", "--random", "small", "--set", "d_model=512", "--exit",
           "trace:8", "--width", "64", "--requests", "256", "--modes", "static,no_refill,cdb",
           "--json"]
# name -> (what it is, the knobs it adds to the command)
SETTINGS = {
    "defaults": ("the CLI's defaults on a CPU (batching.knob_defaults: coda batch 3 width/2, "
                 "pool 3 width, admit at 3 width/4 free rows, coda wait 16)", []),
    "gpu-defaults": ("the GPU's defaults run on the CPU (coda batch width/2, pool width + coda "
                     "batch, admit width/8, coda wait 4): the CLI's defaults before they were "
                     "chosen per device", ["--admit-min", "8", "--pool", "96", "--min-coda-batch",
                                           "32", "--coda-wait", "4"]),
    "larger-pool": ("the CPU's defaults given as flags: the runs that chose them",
                    ["--admit-min", "48", "--pool", "192", "--min-coda-batch", "96",
                     "--coda-wait", "16"]),
}
KEYS = ("fraction", "bound", "tokens_per_s", "speedup", "speedup_vs_static", "paper_fraction")
MODES = ("cdb", "no_refill", "static")


def _hog() -> subprocess.Popen:
    """A CPU-bound process (a Python busy loop) that runs until killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def run_one(setting: str, threads: int, beside: bool, batch: str = "") -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    hog = _hog() if beside else None
    try:
        t0 = time.perf_counter()
        out = subprocess.run(COMMAND + SETTINGS[setting][1], env=env, check=True,
                             capture_output=True, text=True).stdout
        wall = time.perf_counter() - t0
    finally:
        if hog:
            hog.kill()
            hog.wait()
    res = json.loads(out.strip().splitlines()[-1])
    return [{"setting": setting, "threads": threads, "beside": "cpu-bound process" if beside
             else "idle", "mode": r["mode"], **{k: round(r[k], 4) for k in KEYS},
             "baseline": res["baseline"], "wall_s": round(wall, 1), "batch": batch}
            for r in res["results"]]


def load_rows() -> list[dict]:
    if not ROWS.is_file():
        return []
    return [json.loads(x) for x in ROWS.read_text().splitlines() if x.strip()]


def _ratio(cdb: list[dict], nr: list[dict]) -> list[float]:
    """cdb over no_refill, whole-run tokens/s, per run."""
    return [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(cdb, nr)]


def table_lines(rows: list[dict]) -> list[str]:
    """Per setting, threads and machine state: cdb's and no_refill's fractions of the ideal time
    of their work and cdb over no_refill in whole-run tokens/s, one value per repeat in the
    order measured, and the largest fraction any mode reported there."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["setting"], r["threads"], r["beside"]), []).append(r)
    lines = ["| knobs | threads | machine | runs | cdb: fraction of its bound | no_refill | "
             "cdb / no_refill, whole-run tokens/s | largest fraction, any mode |",
             "|---|---|---|---|---|---|---|---|"]
    order = list(SETTINGS)
    for (setting, threads, beside), rs in sorted(
            groups.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][2] != "idle", kv[0][1])):
        by = {m: [r for r in rs if r["mode"] == m] for m in MODES}
        top = max(r["fraction"] for r in rs)
        cells = [[r["fraction"] for r in by["cdb"]], [r["fraction"] for r in by["no_refill"]],
                 _ratio(by["cdb"], by["no_refill"])]
        lines.append(f"| {setting} | {threads} | {beside} | {len(by['cdb'])} | "
                     + " | ".join(" / ".join(f"{x:.3f}" for x in c) for c in cells)
                     + f" | {top:.3f} |")
    return lines


def summary_lines(rows: list[dict], setting: str = "defaults") -> list[str]:
    """The page's sentence on ``setting``: per threads, the span of cdb's fraction, in how many
    runs it is faster than no_refill over the whole run, and the largest fraction any mode
    reported."""
    lines = []
    for threads in sorted({r["threads"] for r in rows if r["setting"] == setting}):
        rs = [r for r in rows if r["setting"] == setting and r["threads"] == threads
              and r["beside"] == "idle"]
        cdb = [r for r in rs if r["mode"] == "cdb"]
        if not cdb:
            continue
        v = [r["fraction"] for r in cdb]
        faster = sum(x > 1 for x in _ratio(cdb, [r for r in rs if r["mode"] == "no_refill"]))
        lines.append(f"- At `{setting}`, {threads} thread{'s' * (threads > 1)}, idle: `cdb` reads "
                     f"{min(v):.3f}-{max(v):.3f} of its bound over {len(v)} runs and is faster "
                     f"than `no_refill` over the whole run in {faster} of {len(v)}; the largest "
                     f"fraction any mode reports is {max(r['fraction'] for r in rs):.3f}.")
    return lines


def main(argv=None) -> int:
    ap = Parser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--threads", type=counts(1, 1024), default="1,2")
    ap.add_argument("--repeats", type=count(), default=3)
    ap.add_argument("--beside", action="store_true", help="run a CPU-bound process beside it")
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args(argv)
    if not a.table_only:
        settings = a.settings.split(",")
        unknown = [s for s in settings if s not in SETTINGS]
        if unknown:
            ap.error(f"unknown setting(s) {unknown}; known: {', '.join(SETTINGS)}")
        ROWS.parent.mkdir(parents=True, exist_ok=True)
        batch = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())   # this invocation's rows
        for rep in range(a.repeats):         # repeats outermost: an interrupted run has every
            for threads in a.threads:        # setting's first repeats
                for setting in settings:
                    rows = run_one(setting, threads, a.beside, batch)
                    with open(ROWS, "a") as f:
                        f.writelines(json.dumps(r) + "\n" for r in rows)
                    c = next(r for r in rows if r["mode"] == "cdb")
                    print(f"{setting} {threads} thread(s) {rows[0]['beside']}, repeat {rep + 1}: "
                          f"cdb {c['fraction']:.3f}, {c['wall_s']:.0f} s", flush=True)
    rows = load_rows()
    print("\n".join(table_lines(rows) + [""] + summary_lines(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
