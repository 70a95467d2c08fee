"""SARIF 2.1.0, as GitHub code scanning reads it: rules with help text, results with physical
locations relative to the repository root, severities mapped to levels."""
from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

from .. import __version__
from ..findings import Report
from .docs import rule_markdown

LEVEL = {"error": "error", "warning": "warning", "info": "note"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _artifact(path: str, root: str) -> dict:
    """A file under the root: a relative uri against %SRCROOT%; one outside it: an absolute file:// uri
    and no base id (SARIF allows a base id only with a relative uri)."""
    absolute = os.path.abspath(path)
    rel = os.path.relpath(absolute, root)
    if rel.startswith(".."):
        return {"uri": "file://" + quote(absolute.replace(os.sep, "/"))}
    return {"uri": quote(rel.replace(os.sep, "/")), "uriBaseId": "%SRCROOT%"}


def to_dict(report: Report, rules: list, root: str | None = None) -> dict:
    root = os.path.abspath(root or os.getcwd())
    ids = [r.id for r in rules]
    descriptors = [{
        "id": r.id,
        "name": "".join(w.capitalize() for w in r.title.split()[:6] if w.isalnum()) or r.id,
        "shortDescription": {"text": r.title},
        "fullDescription": {"text": r.summary},
        "help": {"text": r.docs.what + "\n\n" + r.docs.why, "markdown": rule_markdown(r)},
        "helpUri": r.docs.references[0],
        "defaultConfiguration": {"level": LEVEL[r.severity]},
        "properties": {"tags": ["performance", *r.tips]},
    } for r in rules]
    results = []
    for f in report.findings:
        result: dict[str, Any] = {"ruleId": f.rule, "level": LEVEL[f.severity], "message": {"text": f"{f.message} Fix: {f.fix}"},
                  "properties": {"ms_per_step": f.cost.ms_per_step, "share_of_step": f.cost.share_of_step,
                                 "estimated": f.cost.estimated, "tips": list(f.tips),
                                 **({"verified": f.verified} if f.verified else {})}}
        if f.rule in ids:
            result["ruleIndex"] = ids.index(f.rule)
        if f.locations:
            result["locations"] = [{"physicalLocation": {
                "artifactLocation": _artifact(loc.path, root),
                "region": {"startLine": loc.line}}} for loc in f.locations]
        results.append(result)
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "perfaudit", "version": __version__, "semanticVersion": __version__,
                                "informationUri": "https://github.com/perfaudit/perfaudit", "rules": descriptors}},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": "file://" + quote(root.replace(os.sep, "/")) + "/"}},
            "results": results,
        }],
    }


def render(report: Report, rules: list, root: str | None = None) -> str:
    return json.dumps(to_dict(report, rules, root), indent=2)
