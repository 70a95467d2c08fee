"""The library API, one small facade over the use cases (perfaudit/usecases/): each call returns the
finished report (static pass merged, CI gate applied); the CLI only parses, calls, renders and exits.

    from perfaudit import api
    report = api.audit("train.py", [], api.RunOptions(steps=5))
    report = api.analyze(["trace.json.gz"])
    report = api.lint(["src/"])
    report, plan = api.fix("train.py", [], api.RunOptions())
    report, plan, verification = api.verify("train.py", [], api.RunOptions(), api.RunOptions(mode="timing"))

Each name is imported on first use: `analyze` never loads the runner, `lint` never loads torch."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names below, imported for real on first use (see __getattr__)
    pass

_WHERE = {
    "RunOptions": "collect.run.options", "RunResult": "collect.run.options",
    "Finding": "findings", "Report": "findings", "rank": "findings", "GateOptions": "policy.gate", "gate_fails": "policy.gate",
    "analyze": "usecases.analysis", "evaluate_trace": "usecases.analysis",
    "expand_trace_paths": "usecases.analysis", "looks_like_trace": "usecases.analysis",
    "audit": "usecases.audit", "diff": "usecases.diff",
    "plan_batch": "verify.batch_plan", "plan_checkpoint": "verify.checkpoint_plan",
    "read_plan": "verify.plan_verify", "verify_plan": "verify.plan_verify",
    "bisect": "usecases.bisect", "history": "usecases.history", "fix": "usecases.fixes", "verify": "usecases.fixes",
    "project_root": "usecases.fixes", "check_fixable": "usecases.fixes", "check_script": "collect.run.runner",
    "Rounds": "verify", "recorded_report": "usecases.fixes", "lint": "usecases.lint",
    "Settings": "usecases.settings", "prepare": "usecases.settings", "run_options": "usecases.settings",
    "rules_catalogue": "usecases.settings", "rules_for": "usecases.settings", "check_rounds": "usecases.settings",
    "checked_budget": "usecases.settings",
    "WindowAudit": "usecases.inprocess", "GateFailed": "usecases.inprocess", "metrics": "usecases.inprocess",
    "audit_cell": "usecases.inprocess", "forget_inputs": "files",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'perfaudit.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"perfaudit.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
