"""The notebook magics: `%load_ext perfaudit`, then `%%perfaudit` on the cell that trains.

    %%perfaudit --steps 5
    for epoch in range(10):
        for x, y in loader:
            ...

The cell runs as `perfaudit run` runs a script (its steps found from what it does; the window ends the
cell unless `--full`), in the notebook's own namespace, so the model and the data built by earlier cells
are the ones measured. The report is printed, shown inline (the HTML report), and its findings point at
the cell's lines ("Cell In[5], line 4", as IPython's tracebacks name them). `--fail-on warning` makes
the cell fail when a finding reaches that severity (a notebook run in CI).
"""
from __future__ import annotations

import html

from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import HTML, display

from .. import api
from ._common import show


@magics_class
class PerfauditMagics(Magics):
    @magic_arguments()
    @argument("--steps", type=int, default=None, help="measured steps (default 5, or perfaudit.toml's)")
    @argument("--warmup", type=int, default=None, help="warm-up steps before them (default 2)")
    @argument("--full", action="store_true", help="let the cell run to its end after the window")
    @argument("--fail-on", default=None, help="fail the cell when a finding reaches this severity")
    @argument("--out", default=None, help="where run folders go (default .perfaudit/runs)")
    @argument("--no-html", action="store_true", help="print the report only; no inline HTML")
    @cell_magic
    def perfaudit(self, line: str, cell: str):
        args = parse_argstring(self.perfaudit, line)
        audit = api.WindowAudit(None, steps=args.steps, warmup=args.warmup, out_dir=args.out,
                                fail_on=args.fail_on, full=args.full)
        # this cell's number: its input is stored before it runs (the counter moves before or after, by version)
        count = max(len(self.shell.history_manager.input_hist_raw) - 1, 1)
        code = self.shell.transform_cell(cell)
        # the cell's first line is the one after `%%perfaudit`: line 2 as the notebook numbers it
        report, error = api.audit_cell(code, self.shell.user_ns, f"Cell In[{count}]", 2, audit)
        if report is None:
            print(f"perfaudit: {audit.standing_aside}; the cell ran without it")
            self.shell.run_cell(cell, store_history=False)
            return
        show(report)
        if not args.no_html and report.run_dir:
            with open(f"{report.run_dir}/report.html", encoding="utf-8") as f:
                page = f.read()
            display(HTML(f'<iframe srcdoc="{html.escape(page, quote=True)}" '
                         'style="width:100%;height:640px;border:1px solid #ddd"></iframe>'))
        if error is not None:
            raise error
        if audit.fails():
            raise api.GateFailed(f"perfaudit: findings at or above '{audit.fail_level}' "
                                 f"(report: {report.run_dir}/report.html)")


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(PerfauditMagics)
