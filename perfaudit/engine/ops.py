"""The comparison operators a rule condition may use: the schema's enum and the evaluator's functions."""
from __future__ import annotations

import operator

OPS = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
    "==": operator.eq, "!=": operator.ne,
    "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
    "contains": lambda a, b: b in a,
}
