"""``depthbench report``: result rows -> a self-contained ``reports/NAME/``.

``load`` reads and checks the rows, ``figures`` draws them, ``compare`` decides the paired
comparisons, ``sections`` writes the page's sections and ``build`` puts the report together."""

from depthbench.report.build import build_report, run_report
from depthbench.report.load import arm_label, busy_seconds, grid_clock, labelled, load_rows
from depthbench.report.sections import summarize

__all__ = ["arm_label", "build_report", "busy_seconds", "grid_clock", "labelled", "load_rows",
           "run_report", "summarize"]
