"""Message templates in rule files: `{name}` or `{name:.2f}` substitutions, nothing evaluated."""
from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)(?::([^{}]*))?\}")
# a format spec may pad and round, within reason: `{x:99999999}` must not build a huge string
_SPEC = re.compile(r"^[<>^=]?[+\- ]?#?0?(\d{0,2})(,|_)?(\.\d{1,2})?[bcdeEfFgGnosxX%]?$")


def valid_spec(spec: str) -> bool:
    return bool(_SPEC.match(spec))


def format_value(value, spec: str) -> str:
    if value is None:
        return "n/a"
    if spec and not valid_spec(spec):
        return str(value)
    try:
        return format(value, spec)
    except (ValueError, TypeError):
        return str(value)
