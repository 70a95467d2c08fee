"""The HTML report: one self-contained file, written to every run folder and by `-f html=FILE`;
untrusted text (op names, code, paths) rendered as text; opened in a real headless Chromium (Debian's
package, which .ci/run installs) with no console error, charts drawn and no request leaving the file."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import TRACES, needs_program, needs_shared, perfaudit
from perfaudit.engine.loader import load_rules
from perfaudit.findings import Cost, Finding, Location, Report, Skipped, TraceSummary
from perfaudit.report import html

EVIL = "<script>alert(1)</script>"
EVIL_IMG = "<img src=x onerror=alert(2)>"


def _self_contained(page: str) -> None:
    assert "<script" not in page.lower() and "<link" not in page.lower() and "@import" not in page
    assert not re.search(r"""(src|srcset)\s*=\s*["']?(https?:|//)""", page), "a resource would be fetched"
    assert "url(" not in page
    assert len(page.encode()) < 1_000_000


def test_every_run_folder_holds_its_html_report(sample_report, run_dir):
    sample_report("data_bad.py")
    page = (Path(run_dir) / "data_bad" / "report.html").read_text()
    _self_contained(page)
    assert "DATA001" in page and "<svg" in page and "data_bad.py:" in page
    assert 'class="l hit"' in page  # the finding's line, highlighted in its code context


def test_untrusted_text_is_escaped_everywhere():
    loc = Location(f"train{EVIL_IMG}.py", 3, f"x = y  # {EVIL}")
    finding = Finding("SYNC001", f"title {EVIL}", ("T01",), "warning", f"op {EVIL} at {EVIL_IMG}", f"fix {EVIL}",
                      Cost(1.0, 0.1), (loc,), (f"note {EVIL}",))
    trace = TraceSummary(f"/tmp/{EVIL_IMG}.json", f"GPU {EVIL}", None, 2, "ProfilerStep", 10.0, None, True,
                         per_step=[{"data": 1.0, "forward": 2.0, "backward": 3.0, "optimizer": 1.0, "other": 3.0,
                                    "total": 10.0}] * 2)
    report = Report([finding], [Skipped("AMP001", f"reason {EVIL}")], [trace], script=f"/tmp/{EVIL_IMG}.py",
                    notes=[f"note {EVIL}"], command=f"perfaudit run {EVIL}")
    page = html.render(report, load_rules())
    assert EVIL not in page and EVIL_IMG not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    _self_contained(page)


def test_html_format_for_a_trace_and_a_folder_of_ranks(tmp_path):
    gpu = needs_shared(TRACES / "hta" / "alexnet_a100.json.gz")
    out = tmp_path / "gpu.html"
    proc = perfaudit("analyze", str(gpu), "-f", f"html={out}")
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    _self_contained(page)
    assert "GPU time" in page and "UTIL001" in page
    ranks = tmp_path / "ranks.html"
    proc = perfaudit("analyze", str(needs_shared(TRACES / "param" / "dlrm_8ranks")), "-f", f"html={ranks}")
    assert proc.returncode == 0, proc.stderr
    page = ranks.read_text()
    assert "Ranks: step time" in page and "straggler" in page and "RANK001" in page


@pytest.fixture(scope="session")
def chromium():
    """Checked before the samples run: a missing browser skips (or, under CI, fails) at once."""
    return needs_program("chromium", "chromium-browser", why="the browser test opens reports in it; "
                                                            "Debian: apt-get install chromium")


def test_reports_render_in_headless_chromium(chromium, tmp_path, sample_report, run_dir):
    """Three reports (a CPU run, a GPU trace, eight ranks) open in Chromium: no console error, no
    dialog (an escaped <script> would raise one), every chart drawn, nothing requested but the file."""
    import playwright.sync_api as playwright  # the test extra; it drives the system Chromium, no download
    sample_report("data_bad.py")
    pages = {"run": Path(run_dir) / "data_bad" / "report.html"}
    for name, target in (("gpu", TRACES / "hta" / "alexnet_a100.json.gz"), ("ranks", TRACES / "param" / "dlrm_8ranks")):
        pages[name] = tmp_path / f"{name}.html"
        assert perfaudit("analyze", str(needs_shared(target)), "-f", f"html={pages[name]}").returncode == 0
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            for name, path in pages.items():
                page = browser.new_page(viewport={"width": 1000, "height": 1400})
                errors, requests, dialogs = [], [], []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.on("request", lambda r: requests.append(r.url))
                page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
                page.goto(path.as_uri())
                page.wait_for_load_state("load")
                charts = page.locator("svg.chart")
                assert charts.count() >= 1, name
                for i in range(charts.count()):
                    box = charts.nth(i).bounding_box()
                    assert box and box["width"] > 100 and box["height"] > 50, (name, box)
                    assert charts.nth(i).locator("rect").count() >= 1, name
                assert not errors and not dialogs, (name, errors, dialogs)
                assert requests == [path.as_uri()], (name, requests)
                page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
                assert (tmp_path / f"{name}.png").stat().st_size > 10_000
        finally:
            browser.close()
