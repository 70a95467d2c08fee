"""The closed schema of a rule file. Unknown keys are errors; `docs` and `examples` are required."""
from __future__ import annotations

from ..fix.catalog import FIX_KINDS
from .ops import OPS

_VALUE = {"oneOf": [
    {"type": ["number", "string", "boolean", "null"]},
    {"type": "array", "items": {"type": ["number", "string", "boolean", "null"]}},
    {"type": "object", "additionalProperties": False, "required": ["threshold"],
     "properties": {"threshold": {"type": "string"}}},
]}
_OPS = list(OPS)
_LEAF = {"type": "object", "additionalProperties": False, "required": ["fact", "op", "value"],
         "properties": {"fact": {"type": "string"}, "op": {"enum": _OPS}, "value": _VALUE}}
_CONDITION = {"$ref": "#/definitions/condition"}

RULE_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "definitions": {
        "condition": {"oneOf": [
            _LEAF,
            {"type": "object", "additionalProperties": False, "required": ["all"],
             "properties": {"all": {"type": "array", "minItems": 1, "items": _CONDITION}}},
            {"type": "object", "additionalProperties": False, "required": ["any"],
             "properties": {"any": {"type": "array", "minItems": 1, "items": _CONDITION}}},
            {"type": "object", "additionalProperties": False, "required": ["not"],
             "properties": {"not": _CONDITION}},
        ]},
    },
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "title", "summary", "severity", "tips", "message", "fix", "cost", "docs", "examples"],
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]+[0-9]{3}$"},
        "title": {"type": "string", "minLength": 1},
        "summary": {"type": "string", "minLength": 1},
        "severity": {"enum": ["info", "warning", "error"]},
        "scope": {"enum": ["trace", "job", "report"]},
        "tips": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "^T[0-9]{2}$"}},
        "thresholds": {"type": "object", "additionalProperties": {"type": ["number", "integer"]}},
        "evidence": {
            "type": "object", "additionalProperties": False, "required": ["sites"],
            "properties": {
                "sites": {"type": "string"},
                "where": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False, "required": ["field", "op", "value"],
                    "properties": {"field": {"type": "string"}, "op": {"enum": _OPS}, "value": _VALUE}}},
            },
        },
        "when": _CONDITION,
        "escalate": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["when", "severity"],
            "properties": {"when": _CONDITION, "severity": {"enum": ["info", "warning", "error"]}}}},
        "message": {"type": "string", "minLength": 1},
        # a GPU-only pattern seen on the projection instead (--target): when `when` does not hold on what was
        # measured, the rule fires on this condition over the projection's facts, with this message (which
        # names the target and the expected error); the finding carries no measured cost
        "projected": {"type": "object", "additionalProperties": False, "required": ["when", "message"],
                      "properties": {"when": _CONDITION, "message": {"type": "string", "minLength": 1},
                                     # the severity a finding on the model alone gets (default: the rule's)
                                     "severity": {"enum": ["info", "warning", "error"]},
                                     # the host time its fix removes, a key of the projection (`small_kernels.
                                     # launch_ms`); default: the projection's host-bound idle times cost.scale
                                     "host_ms": {"type": "string", "pattern": "^[a-z_]+(\\.[a-z_]+)*$"}}},
        "notes": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["text"],
            "properties": {"when": _CONDITION, "text": {"type": "string"}}}},
        "cost": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "from": {"enum": ["evidence", "none"]},
                "fact": {"type": "string"},
                "per_unit_us": _VALUE,
                "scale": _VALUE,
                "estimated": {"oneOf": [{"type": "boolean"}, _CONDITION]},
                "unknown_when_zero": {"type": "boolean"},  # nothing measured is no cost figure, not 0 ms
                # the fact giving the cost's share (%) of the step it was timed against, when that is not the
                # recorded step (a DataLoader's wait timed in steps run without the profiler)
                "share_pct": {"type": "string"},
                # how the fix's saving is projected onto a GPU (--target): the steps replayed with the fix
                # applied (engine/projected.py)
                "projects": {"enum": ["data", "sync", "copies", "precision", "host", "optimizer", "grads", "created",
                                      "bias", "cache", "search", "no_sync", "bucket_view"]},
            },
        },
        "fix": {"type": "string", "minLength": 1},
        # a fix that depends on what was found (a synchronize() gets timing advice, not the .item()
        # advice): the first variant whose condition holds replaces `fix`
        "fixes": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["when", "text"],
            "properties": {"when": _CONDITION, "text": {"type": "string", "minLength": 1}}}},
        # the mechanical edit `perfaudit fix` makes: a kind from a fixed set in code, its parameters
        # named as facts of the run (the worker count the run measured, say)
        "autofix": {"type": "object", "additionalProperties": False, "required": ["kind"], "properties": {
            "kind": {"enum": sorted(FIX_KINDS)},
            "params": {"type": "object", "additionalProperties": {"type": "string"}}}},
        "docs": {
            "type": "object", "additionalProperties": False,
            "required": ["what", "why", "example", "use_instead", "references"],
            "properties": {
                "what": {"type": "string", "minLength": 1},
                "why": {"type": "string", "minLength": 1},
                "example": {"type": "string", "minLength": 1},
                "use_instead": {"type": "string", "minLength": 1},
                "references": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            },
        },
        "examples": {"type": "array", "minItems": 2, "items": {
            "type": "object", "additionalProperties": False, "required": ["expect"],
            "properties": {
                "script": {"type": "string"},
                "trace": {"type": "string"},
                "args": {"type": "array", "items": {"type": "string"}},
                "expect": {"enum": ["fire", "silent"]},
                "severity": {"enum": ["info", "warning", "error"]},
                "nproc": {"type": "integer", "minimum": 2},
            },
            "oneOf": [{"required": ["script"]}, {"required": ["trace"]}],
        }},
    },
}
