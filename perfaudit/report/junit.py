"""JUnit XML: one test case per rule; a failure per finding, a skip for rules without their data."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from ..findings import Report


def render(report: Report, rules: list) -> str:
    by_rule: dict[str, list] = {}
    for f in report.findings:
        by_rule.setdefault(f.rule, []).append(f)
    skipped = {s.rule: s.reason for s in report.skipped}
    suite = ET.Element("testsuite", name="perfaudit")
    failures = 0
    ids = [r.id for r in rules] + sorted(set(by_rule) - {r.id for r in rules})
    titles = {r.id: r.title for r in rules}
    for rule_id in ids:
        case = ET.SubElement(suite, "testcase", classname="perfaudit", name=f"{rule_id}: {titles.get(rule_id, rule_id)}")
        for f in by_rule.get(rule_id, []):
            where = f"{f.location.path}:{f.location.line}" if f.location else (f.trace or "")
            failure = ET.SubElement(case, "failure", type=f.severity, message=f"{where} {f.message}".strip())
            failure.text = f"{f.message}\nfix: {f.fix}"
            failures += 1
        if rule_id in skipped and rule_id not in by_rule:
            ET.SubElement(case, "skipped", message=skipped[rule_id])
    suite.set("tests", str(len(ids)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(sum(1 for r in ids if r in skipped and r not in by_rule)))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
