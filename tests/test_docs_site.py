"""The documentation site builds strictly (a broken link, a page outside the nav, a rule whose generated
page is wrong, fails), offline; the README is a front page that links to every page of it."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT

README_MAX_LINES = 250


def _nav_pages() -> list[str]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())   # no !!python tags in ours
    pages = []
    for entry in config["nav"]:
        (_, page), = entry.items()
        pages.append(page)
    return pages


def test_mkdocs_builds_strictly_offline(tmp_path):
    pytest.importorskip("material", reason="mkdocs-material is in the test extra: pip install -e '.[test]'")
    site = tmp_path / "site"
    # no proxy, no network: the theme's fonts are off and the search index is built locally
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": str(ROOT), "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    from perfaudit.engine.loader import load_rules
    rules = load_rules()
    for rule in rules:
        page = site / "rules" / rule.id / "index.html"
        assert page.exists(), f"no page for {rule.id}"
        html = page.read_text()
        assert rule.summary.split("`")[0][:30] in html or rule.id in html
        assert "Use instead" in html and "Examples the test suite runs" in html, rule.id
    index = (site / "rules" / "index.html").read_text()
    assert all(f'href="{r.id}/"' in index for r in rules)
    for page in _nav_pages():
        stem = page[:-3]
        built = site / (f"{stem[:-len('index')]}index.html" if stem.endswith("index") else f"{stem}/index.html")
        assert built.exists(), page


def test_readme_is_a_front_page_linking_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    linked = set(re.findall(r"\]\(docs/([\w/.-]+\.md)(?:#[\w-]+)?\)", readme))
    # the rule pages are generated when the site is built: the README points at `perfaudit rules` for them
    missing = [p for p in _nav_pages() if p not in linked and p not in ("index.md", "rules/index.md")]
    assert not missing, f"README does not link to {missing}"
    for page in linked:
        assert (ROOT / "docs" / page).exists(), page
    # the two commands of the brief, verbatim
    assert "pip install torch==2.13.0 && pip install -e '.[test]'" in readme
    assert "python -m pytest -q" in readme
