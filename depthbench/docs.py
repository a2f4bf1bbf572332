"""The results pages, generated from committed rows: ``depthbench docs``.

Writes ``docs/results.md`` (one section per committed report: what it reproduces, its findings
table, the comparisons decided in advance with their verdicts, seeds and time) and the README's
marked blocks (the results table, one row per committed experiment, and the quickstart's findings
table), every number through ``report.summarize`` over the report's own ``rows/``. In a source
tree it writes, in the same pass, the calibration pages (``report.calibration`` and
``report.calibration_text``, from the recipes' rows in ``docs/calibration/``) and every page a
script renders from kept rows: the serving blocks of
``docs/benchmarks.md`` (the benchmarks' own rendering of ``docs/serving/``) and the bad-input matrix
(``tests/cli/test_bad_inputs.py``'s cases). Hand-written prose carries no digit a rerun could change;
rerunning this command changes no file (a test).

    depthbench docs            # rewrite the pages (or python -m depthbench.docs)
    depthbench docs --check    # exit 1 if a page is not what the rows give
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Experiment:
    """One committed report and what it reproduces."""
    name: str            # reports/NAME
    reproduces: str      # one line, no digit a rerun could change
    command: str
    in_readme: bool = True   # a row of the README's table (else docs/results.md only)


EXPERIMENTS = (
    Experiment("quickstart", "the toolkit end to end: three schedules, the update probe "
               "(the paper's Figure 4), the serving benchmark", "depthbench run"),
    Experiment("presets", "the README's by-hand path at the default presets (no --preset, no "
               "--set): whether the task and recipe a user starts from pass the calibration's "
               "seed-spread criteria", "depthbench run presets", in_readme=False),
    Experiment("table3", "the paper's Table 3: uniform, fixed-first at two fixed phases, "
               "uniform matched to the shorter one's FLOPs", "depthbench run table3"),
    Experiment("table3-lr", "Table 3's learning-rate sweep: each arm at four peak LRs on held-out "
               "seeds; table3 runs each arm at its lowest mean serving NLL of the asked value",
               "depthbench run table3-lr", in_readme=False),
    Experiment("table3-lr-x2", "Table 3's learning-rate sweep at 2x its steps: each arm at three "
               "peak LRs on 4 held-out seeds; table3-x2 runs each arm at its lowest mean serving "
               "NLL of the asked value", "depthbench run table3-lr-x2", in_readme=False),
    Experiment("table3-lr-x4", "Table 3's learning-rate sweep at 4x its steps: each arm on 4 "
               "held-out seeds at 3 peak LRs, run one LR per part (the spec's comment says how); "
               "every arm chose 0.012, the LR table3-x4 and table3-x4b run at",
               "depthbench run table3-lr-x4 --set 'train.lrs=[LR]' --out "
               "runs/table3-lr-x4 for each LR, then depthbench report "
               "runs/table3-lr-x4/report/rows --out reports/table3-lr-x4", in_readme=False),
    Experiment("table3-finish", "the paper's Figure 2 rows: fixed-first at both fixed phases with "
               "a Poisson-lognormal finish beside the uniform finish, at the Table 3 recipe",
               "depthbench run table3-finish, then depthbench report reports/table3/rows "
               "runs/table3-finish/report/rows --out reports/table3-finish"),
    Experiment("probes", "the paper's Figure 4: one update at depth 16 against one at depth 4 "
               "from fixed-first 0.8's checkpoints at the switch and 16, 64 and 256 updates "
               "after it, at the Table 3 recipe, read on the asked value's NLL",
               "depthbench run probes"),
    Experiment("table3-rowlr", "Table 3 at the LRs an earlier sweep chose on the whole row's NLL "
               "(the 1-thread side of table3-2threads)",
               "depthbench run docs/specs/table3-rowlr.toml", in_readme=False),
    Experiment("table3-lengths", "Table 3 against training length (the paper's Figure 2 left): "
               "table3's arms at 1x and 2x its steps on its tiered task, each length at the LRs "
               "its own sweep chose on the asked value (table3-lr, table3-lr-x2), "
               "compared within each length, and whether each arm's mean serving NLL has reached "
               "a plateau (4x has "
               "its own report, table3-4x: three lengths in one report make Holm's family too "
               "large for 8 seeds to decide)",
               "depthbench run table3-x2, then depthbench report reports/table3/rows "
               "reports/table3-x2/rows --out reports/table3-lengths"),
    Experiment("table3-4x", "Table 3 at 4x its steps on its tiered task, 8 seeds from two "
               "specs (table3-x4: seeds 0-3, table3-x4b: seeds 4-7; each spec's own report is "
               "kept beside it), every arm at the LR the 4x sweep chose (0.012, table3-lr-x4). "
               "The two specs ran beside each other and beside the test suite on the same 2 cores, "
               "so the time by stage rows reads longer than they take alone (one after the "
               "other, idle, in an earlier run: 94 min 49 s)",
               "depthbench run table3-x4, depthbench run table3-x4b, then depthbench report "
               "reports/table3-x4/rows reports/table3-x4b/rows --out reports/table3-4x"),
    Experiment("matched", "a reading that can fail: uniform at fixed-first's FLOPs",
               "depthbench run matched"),
    Experiment("budgets", "the paper's Figure 1: three schedules at three matched FLOP budgets, "
               "each arm at its swept LR with the decay after every switch",
               "depthbench run budgets"),
    Experiment("budgets-lr", "Figure 1's learning-rate sweep: each arm at three peak LRs at 15% "
               "and 45% of the budget on held-out seeds; budgets runs each arm at its lowest mean "
               "serving NLL of the asked value", "depthbench run budgets-lr", in_readme=False),
    Experiment("budgets-lr3e-3", "the paper's Figure 1 as it first ran: three schedules at three "
               "matched FLOP budgets, every arm at LR 3e-3 with the decay from 80% of training",
               "depthbench run docs/specs/budgets-lr3e-3.toml", in_readme=False),
    Experiment("budgets-2threads", "Figure 1's 15% budget at 2 CPU threads per run, on a CPU "
               "whose 2-thread kernels round differently: does the verdict at 15% hold on each seed?",
               "depthbench run docs/threads/budgets-2threads.toml", in_readme=False),
    Experiment("budgets-lr3e-3-2threads", "budgets-lr3e-3's 15% budget at 2 CPU threads per run "
               "(arithmetic check)", "depthbench run docs/threads/budgets-lr3e-3-2threads.toml",
               in_readme=False),
    Experiment("table3-2threads", "Table3-rowlr's seeds at 2 CPU threads per run, on a CPU whose "
               "2-thread kernels round differently: do its verdicts depend on the thread count?",
               "depthbench run docs/threads/table3-2threads.toml"),
    Experiment("text-table3-2threads", "Table 3 on text, seed 0 at 2 CPU threads per run "
               "(arithmetic check)", "depthbench run docs/threads/text-table3-2threads.toml",
               in_readme=False),
    Experiment("fixed-depths", "the paper's Figure 5: fixed-depth models across serving depths",
               "depthbench run fixed-depths"),
    Experiment("text-quickstart", "natural text: NLL and bits per byte per serving depth, a "
               "cloze through lm-eval", "depthbench run text-quickstart"),
    Experiment("text-table3", "the paper's Table 3 on natural text: uniform, fixed-first at two "
               "fixed phases, uniform matched to the shorter one's FLOPs, judged on mean serving "
               "NLL (a recurrence whose loop is inert past depth 4: see text-table3-deep)",
               "depthbench run text-table3"),
    Experiment("text-table3-deep-lr", "the learning-rate sweep of Table 3 on text where the "
               "loop is used past depth 4: each arm at four peak LRs on held-out seeds",
               "depthbench run text-table3-deep-lr", in_readme=False),
    Experiment("text-table3-deep", "the paper's Table 3 on natural text with Huginn's recurrence "
               "(the stream renormalized, a random initial state): each arm at the LR its sweep "
               "chose, judged on mean serving NLL; uniform diverges on some seeds there",
               "depthbench run text-table3-deep"),
    Experiment("text-table3-deep-lr3e-3", "text-table3-deep with every arm at the calibration's "
               "LR (every arm's second choice in the sweep), where the loop is used past depth 4 "
               "and no seed diverges", "depthbench run docs/specs/text-table3-deep-lr3e-3.toml"),
    Experiment("text-scale-d16-lr", "the learning-rate sweep of the scale axis at d_model 16: "
               "each arm at six peak LRs on held-out seeds",
               "depthbench run docs/specs/text-scale-d16-lr.toml", in_readme=False),
    Experiment("text-scale-d16", "text-table3-deep-lr3e-3's four arms at d_model 16, each at "
               "the LR its sweep chose", "depthbench run docs/specs/text-scale-d16.toml",
               in_readme=False),
    Experiment("text-scale-d16-s300", "text-scale-d16 at half its steps (the scale axis's "
               "second training length)", "depthbench run docs/specs/text-scale-d16-s300.toml",
               in_readme=False),
    Experiment("text-scale-d128-lr", "the learning-rate sweep of the scale axis at d_model 128: "
               "each arm at four peak LRs on held-out seeds",
               "depthbench run docs/specs/text-scale-d128-lr.toml", in_readme=False),
    Experiment("text-scale-d128", "text-table3-deep-lr3e-3's four arms at d_model 128, each at "
               "the LR its sweep chose", "depthbench run docs/specs/text-scale-d128.toml",
               in_readme=False),
)

SPLIT_NAMES = {"eval_reordered": "name only, held-out position",
               "eval_seen_order": "name only, seen position"}


def summaries(root: Path = ROOT) -> list[tuple[Experiment, dict]]:
    """Each committed report's ``report.summarize``, read once, in the order of EXPERIMENTS."""
    from depthbench.errors import UserError
    from depthbench.report import load_rows, summarize
    out = []
    for exp in EXPERIMENTS:
        rows_dir = root / "reports" / exp.name / "rows"
        if not rows_dir.is_dir():   # never a page that silently drops a report
            raise UserError(f"{rows_dir} is missing; restore it (git checkout reports/{exp.name}) "
                            "or remove the experiment from EXPERIMENTS in depthbench/docs.py")
        try:
            out.append((exp, summarize(load_rows([rows_dir]))))
        except UserError as e:
            raise UserError(f"reports/{exp.name}: {e}") from None
    return out


def _minutes(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "-"
    return f"{int(round(seconds)) // 60} min {int(round(seconds)) % 60:02d} s"


def _short_nll(verdict: str) -> str:
    """'outside ±0.5% (higher NLL)' -> 'higher NLL'; 'not resolved at this precision (95%
    interval ±5.6%)' -> 'not resolved (±5.6%)'."""
    if verdict.startswith("outside"):
        return verdict.split("(")[1].rstrip(")")
    if verdict.startswith("not resolved at"):
        return "not resolved (" + verdict.split("(")[1].replace("95% interval ", "")
    return verdict


def _verdicts(s: dict, key: str = "comparisons") -> str:
    if s["kind"] == "text" and key == "comparisons":
        return "described (the text half's verdicts are on NLL)"
    if s["kind"] == "text" and not s[key]:
        return "described (no comparison decided in advance)"
    if s["kind"] == "sweep":
        return "chooses each arm's LR (no comparison)"
    if not s[key]:
        return "described"
    from depthbench.axes import AXES
    out = []
    for c in s[key]:
        at = f" at {AXES[c['axis']].short(c['group'])}" if c.get("group") is not None else ""
        short = _short_nll(c["verdict"]) if key == "nll" else c["verdict"].split(" (")[0]
        out.append(f"`{c['schedule']}`{at}: {short}")
    return "; ".join(out)


def _best(s: dict) -> str:
    if not s["best_share"]:
        return "-"
    return ", ".join(f"{100 * v:.0f}% ({'held-out' if k == 'eval_reordered' else 'seen'} position)"
                     for k, v in sorted(s["best_share"].items()))


def results_table(done: list[tuple[Experiment, dict]]) -> str:
    """The README's results block: one row per committed experiment (the LR sweeps, which
    decide nothing, are in docs/results.md only)."""
    lines = ["| experiment | reproduces | reading | seeds | verdict against uniform (exact match "
             "over depths, Holm-corrected) | mean serving NLL against uniform (the paper's "
             "metric, ±0.5%; on people, of the asked value) | best reading, % of ceiling | "
             "time on 2 CPU cores |",
             "|---|---|---|---|---|---|---|---|"]
    for exp, s in done:
        if not exp.in_readme:
            continue
        reading = "natural text" if s["kind"] == "text" else s["reading"]
        lines.append(f"| [{exp.name}](reports/{exp.name}/README.md) | {exp.reproduces} | "
                     f"{reading} | {s['seeds']} | {_verdicts(s)} | {_verdicts(s, 'nll')} | {_best(s)} | "
                     f"{_minutes(s['wall_s'])} |")
    return "\n".join(lines) + "\n"


def results_page(done: list[tuple[Experiment, dict]]) -> str:
    """docs/results.md: every committed report's findings and comparisons."""
    out = ["# Results", "",
           "Generated by `depthbench docs` from each report's committed `rows/`; "
           "rerunning it changes nothing. The headline reading is bits per person recalled from "
           "the name alone (`eval_reordered`: a position never trained for that person), "
           "bracketed by the person-agnostic floor, the name-blind record completer and the "
           "ceiling (see [metrics](metrics.md)); a report whose rows predate it says so under "
           "\"Reading\": there every fact after a row's first was teacher-forced after the "
           "person's other values. A verdict is one comparison decided in advance: exact "
           "match averaged over serving depths, paired over seeds, Holm-corrected across the "
           "report; \"equivalent\" only where the interval lies inside the margin. The paper's "
           "own claim is on mean serving NLL (\"within 0.5% of uniform\"): each comparison is "
           "also read there, as a paired relative difference, \"within ±0.5%\" only where its "
           "95% interval lies inside the band, \"outside\" only where it excludes it, else not "
           "resolved, with the precision reached.", ""]
    for exp, s in done:
        out += [f"## {exp.name}", "", f"{exp.reproduces[0].upper()}{exp.reproduces[1:]}. "
                f"`{exp.command}`; report: [reports/{exp.name}](../reports/{exp.name}/README.md); "
                f"{s['seeds']} seeds per arm; {_minutes(s['wall_s'])} on 2 CPU cores by its "
                f"stage rows. Reading: {'natural text' if s['kind'] == 'text' else s['reading']}.",
                ""]
        if s["findings"]:
            out += [s["findings"].rstrip(), ""]
        if s["best_share"]:
            out += ["Best seed-mean reading over arms and depths: " + "; ".join(
                f"{SPLIT_NAMES.get(k, k)} {100 * v:.0f}% of the ceiling"
                for k, v in sorted(s["best_share"].items())) + ".", ""]
        if s.get("spread"):
            out += [s["spread"], ""]
        out += [f"- {x}" for x in s["sentences"] + s["nll_sentences"]]
        if s["sentences"] or s["nll_sentences"]:
            out.append("")
    return "\n".join(out).rstrip() + "\n"


@dataclass(frozen=True)
class Scale:
    """The scale report: committed text grids, one per model size or training length, read
    together by ``depthbench scale-report`` (``report.scale``)."""
    name: str
    grids: tuple[str, ...]
    command: str


SCALE = Scale("text-scale", ("text-scale-d16", "text-table3-deep-lr3e-3", "text-scale-d128",
                             "text-scale-d16-s300"),
              "depthbench scale-report reports/text-scale-d16/rows "
              "reports/text-table3-deep-lr3e-3/rows reports/text-scale-d128/rows "
              "reports/text-scale-d16-s300/rows --out reports/text-scale")


def scale_reading(root: Path = ROOT):
    """(points, trend) of SCALE, from the grids' committed rows."""
    from depthbench.errors import UserError
    from depthbench.report.scale import scale_points, trend
    missing = [g for g in SCALE.grids if not (root / "reports" / g / "rows").is_dir()]
    if missing:
        raise UserError(f"reports/{missing[0]}/rows is missing; restore it or remove it from "
                        "SCALE in depthbench/docs.py")
    pts = scale_points([root / "reports" / g / "rows" for g in SCALE.grids])
    return pts, trend(pts)


def scale_block(pts, tr) -> str:
    """The README's answer on text: each arm's gap at each size and the trend, with seeds."""
    out = []
    for arm, g in pts.groupby("role", sort=False):
        main = g[g["steps"] == tr["steps"].iloc[0]].sort_values("params")
        gaps = "; ".join(f"{p / 1e3:.0f}k parameters {100 * d:+.2f}% [{100 * lo:+.2f}, "
                         f"{100 * hi:+.2f}] ({n} seeds, {_short_nll(v)}"
                         f"{'' if used else '; its loop unused past depth 4'})"
                         for p, d, lo, hi, n, v, used in zip(
                             main["params"], main["diff"], main["lo"], main["hi"],
                             main["seeds"], main["verdict"], main["depth_used"]))
        t = tr.set_index("arm").loc[arm, "verdict"]
        out.append(f"- `{arm}` against uniform on mean serving NLL (verdicts against ±0.5%): "
                   f"{gaps}; with size: **{t}**.")
    return "\n".join(out) + "\n"


def scale_page(pts, tr) -> list[str]:
    """docs/results.md's scale section."""
    from depthbench.report.scale import TREND_RULE, depth_table, points_table, scale_words
    return [f"## {SCALE.name}", "", "Table 3 on text across model sizes and training lengths: "
            f"`{SCALE.command}`; report: [reports/{SCALE.name}](../reports/{SCALE.name}/"
            f"README.md). The trend is {TREND_RULE}.", "",
            *[f"- {w}" for w in scale_words(pts, tr)], "", points_table(pts).to_markdown(
                index=False), "", depth_table(pts).drop(columns="grid").to_markdown(index=False),
            ""]


BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end -->)", re.S)


def _fill(text: str, blocks: dict[str, str], page: str = "README.md") -> str:
    def sub(m):
        name = m.group("name")
        if name not in blocks:
            from depthbench.errors import UserError
            raise UserError(f"{page}'s block {name!r} has no generator (known: "
                            f"{', '.join(blocks)}); remove its markers or name a known block")
        return m.group(1) + blocks[name] + m.group(4)
    return BLOCK.sub(sub, text)


def _script(root: Path, path: str):
    """A repository script (``benchmarks/NAME.py``, ``tests/PACKAGE/NAME.py``) loaded as a
    module; the benchmarks import their shared helper from their own folder, the tests theirs
    (``refusals``) from ``tests/``."""
    import importlib.util
    f = root / path
    for d in (root / "tests", f.parent):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    spec = importlib.util.spec_from_file_location(f.stem, f)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[f.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def script_pages(root: Path) -> dict[Path, str]:
    """The pages rendered from rows kept in the source tree (none outside one, with its
    benchmarks and tests): the calibration pages (``report.calibration``,
    ``report.calibration_text``), the serving blocks of docs/benchmarks.md, the bad-input matrix."""
    import json
    if not ((root / "benchmarks" / "bench_serve.py").is_file()
            and (root / "tests" / "cli" / "test_bad_inputs.py").is_file()):
        return {}
    from depthbench.report.calibration import page as calibration_page
    out = {root / "docs" / "calibration.md": calibration_page(root / "docs" / "calibration")}
    from depthbench.report.calibration_text import page as text_calibration_page
    out[root / "docs" / "calibration-text.md"] = text_calibration_page(root / "docs" / "calibration")
    serve, cpu = _script(root, "benchmarks/bench_serve.py"), _script(root, "benchmarks/serve_cpu.py")
    kept = json.loads((root / "docs" / "serving" / "bench_serve.json").read_text())
    runs = cpu.load_rows()
    blocks = {"serve-cpu-grid": serve.cpu_lines(kept), "serve-sim": serve.sim_lines(kept),
              "serve-kv": serve.kv_lines(kept),
              "serve-cpu-runs": cpu.table_lines(runs) + [""] + cpu.summary_lines(runs)}
    page = root / "docs" / "benchmarks.md"
    out[page] = _fill(page.read_text(), {k: "\n".join(v).strip("\n") + "\n" for k, v in blocks.items()},
                      "docs/benchmarks.md")
    bad = _script(root, "tests/cli/test_bad_inputs.py")
    out[bad.DOC] = bad.render_doc()
    return out


def pages(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file and its content."""
    from depthbench.errors import UserError
    readme = root / "README.md"
    if not readme.is_file():
        raise UserError(f"{root} has no README.md; give --root the source tree (the folder with "
                        "README.md, docs/ and reports/)")
    done = summaries(root)
    pts, tr = scale_reading(root)
    quick = dict((e.name, s) for e, s in done).get("quickstart")
    blocks = {"results": results_table(done),
              "quickstart-findings": quick["findings"] if quick else "",
              "text-scale": scale_block(pts, tr)}
    page = results_page(done).rstrip("\n") + "\n\n" + "\n".join(scale_page(pts, tr))
    return {readme: _fill(readme.read_text(), blocks),
            root / "docs" / "results.md": page.rstrip("\n") + "\n", **script_pages(root)}


def main(argv=None, prog: str = "python -m depthbench.docs") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if a page would change")
    ap.add_argument("--root", type=Path, default=ROOT, help="the source tree (default: this one)")
    a = ap.parse_args(argv)
    from depthbench.errors import UserError
    try:
        generated = pages(a.root)
    except UserError as e:   # one line, and no page is written
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    stale = []
    for path, text in generated.items():
        if not path.is_file() or path.read_text() != text:
            stale.append(path)
            if not a.check:
                path.write_text(text)
    for p in stale:
        print(f"{'stale' if a.check else 'wrote'} {p.relative_to(a.root)}")
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
